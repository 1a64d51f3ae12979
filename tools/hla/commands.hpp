// Subcommands of the `hla` tool. Each registers its options on the app and
// returns the action to run once parsing succeeded.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace hla::cli {

using Action = std::function<int()>;  // exit status: 0 ok, 1 check failed, 2 usage/input error

void add_demo(CLI::App& app, Action& action);
void add_gen(CLI::App& app, Action& action);
void add_check(CLI::App& app, Action& action);
void add_eval(CLI::App& app, Action& action);
void add_fuzz(CLI::App& app, Action& action);
void add_select(CLI::App& app, Action& action);

}  // namespace hla::cli
