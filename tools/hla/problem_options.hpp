// The operator options of a problem as `hla ref` and `hla gen --case` take
// them: exact rationals or decimals ("99/100", "0.99"), checked by
// Options::validate (a bad value is exit 2 naming the option). The text and
// its parsing are io::OptionText (shared with the Python package).
#pragma once

#include "hla/io/inputs.hpp"

#include <CLI/CLI.hpp>

namespace hla::cli {

struct ProblemOptionArgs : io::OptionText {
  // --variant, --unmasked, --gamma, --normalize none|add|clamp, --eps, --lambda, --scale.
  void add_to(CLI::App* app);
};

}  // namespace hla::cli
