#include "problem_options.hpp"

#include "commands.hpp"

namespace hla::cli {

void ProblemOptionArgs::add_to(CLI::App* c) {
  c->add_option("--variant", variant, variant_names(true) + " (default hla2)")->check(non_empty);
  c->add_flag("--unmasked", unmasked, "the unmasked operator (hla2, hla3)");
  c->add_option("--gamma", gamma, "decay in (0, 1], exact: 99/100 or 0.99 (default 1)")->check(non_empty);
  c->add_option("--normalize", normalize, "none (default), add: num/(den + eps), clamp: num/(sign(den) max(|den|, eps))")
      ->check(non_empty);
  c->add_option("--eps", eps, "eps of the normalization (default 1e-6)")->check(non_empty);
  c->add_option("--lambda", lambda, "ridge lambda >= 0 (hla2; default 0)")->check(non_empty);
  c->add_option("--scale", scale, "q is multiplied by this (default 1)")->check(non_empty);
}

}  // namespace hla::cli
