// The operator options of a problem as `hla ref` and `hla gen --case` take
// them: exact rationals or decimals ("99/100", "0.99"), checked by
// Options::validate (a bad value is exit 2 naming the option).
#pragma once

#include "hla/problem.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace hla::cli {

struct ProblemOptionArgs {
  std::string variant = "hla2";
  bool unmasked = false;
  std::string gamma = "1", normalize = "none", eps = "1/1000000", lambda = "0", scale = "1";

  // --variant, --unmasked, --gamma, --normalize none|add|clamp, --eps, --lambda, --scale.
  void add_to(CLI::App* app);
  // Sets one option by name (variant, masked, unmasked, gamma, normalize, eps,
  // lambda, scale); false when the name is none of them.
  bool set(const std::string& key, const std::string& value);
  // Parsed and validated; InputError names the option and the text.
  Options options() const;
};

}  // namespace hla::cli
