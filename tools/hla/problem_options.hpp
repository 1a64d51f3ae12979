// The operator options of a problem as `hla ref` and `hla gen --case` take
// them: one flag per row of kOptions (hla/options.hpp), exact rationals or
// decimals ("99/100", "0.99"), checked by Options::validate (a bad value is
// exit 2 naming the option). The text and its parsing are io::OptionText
// (shared with the Python package).
#pragma once

#include "commands.hpp"
#include "hla/io/inputs.hpp"

#include <CLI/CLI.hpp>

namespace hla::cli {

struct ProblemOptionArgs : io::OptionText {
  // Each row's flag (a bool's flips its default), and its alias, hidden, with a warning.
  void add_to(CLI::App* app);
};

// Row r's flag (a text option) setting `text`, and its old spelling, hidden, with a warning.
void add_option_flag(CLI::App* app, const OptionInfo& r, std::string& text, const std::string& help);

void add_options(CLI::App& app, Action& action);  // hidden: hla options prints the table for the docs

}  // namespace hla::cli
