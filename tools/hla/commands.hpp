// Subcommands of the `hla` tool. Each registers its options on the app and
// returns the action to run once parsing succeeded. Also the checks every
// subcommand shares: option values (a bad one is exit 2 naming the option)
// and output paths (checked before any work, so that a user's mistake is a
// message and not a failure after minutes, nor an "internal error").
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

namespace hla::cli {

using Action = std::function<int()>;  // exit status: 0 ok, 1 check failed, 2 usage/input error

void add_demo(CLI::App& app, Action& action);
void add_gen(CLI::App& app, Action& action);
void add_check(CLI::App& app, Action& action);
void add_eval(CLI::App& app, Action& action);
void add_fuzz(CLI::App& app, Action& action);
void add_fuzz_merge(CLI::App& app, Action& action);
void add_select(CLI::App& app, Action& action);
void add_ref(CLI::App& app, Action& action);

// --- option values (CLI11 validators: a failure is "--OPTION: message", exit 2) ---

// A whole number in [lo, hi], written as plain digits. CLI11 2.1 would store
// "-1" in an unsigned option as 2^64 − 1 and "1e3" or " 7" in other ways;
// this takes none of them.
CLI::Validator integer_in(std::uint64_t lo, std::uint64_t hi);
inline constexpr std::uint64_t kAnyU64 = std::numeric_limits<std::uint64_t>::max();

// A finite number of seconds in [lo, hi] (lo itself excluded when lo_open).
CLI::Validator seconds_in(double lo, double hi, bool lo_open);

// Not "": an option given with an empty value is a mistake (an unset shell
// variable), never a way to ask for the default.
extern const CLI::Validator non_empty;

// A comma list without empty entries ("hla2,,la1" and "hla2," are mistakes).
extern const CLI::Validator comma_list;

// --- output paths (throw hla::InputError naming the option, the path and the problem) ---

// A folder we will create (if needed) and write into: it must be a folder or
// creatable, and writable — probed with a real file, because permission bits
// do not tell (root, read-only mounts, /proc). Creates nothing.
void check_output_dir(const std::string& option, const std::filesystem::path& dir);

// A file we will write atomically: its folder must exist and be writable, and
// the file, if it exists, must be a regular file (renaming over a directory
// fails; over a device or FIFO, e.g. /dev/null as root, it would replace it).
void check_output_file(const std::string& option, const std::filesystem::path& file);

}  // namespace hla::cli
