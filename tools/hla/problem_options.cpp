#include "problem_options.hpp"

#include "commands.hpp"
#include "hla/io/printable.hpp"

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

bool ProblemOptionArgs::set(const std::string& key, const std::string& value) {
  if (key == "variant") variant = value;
  else if (key == "masked" || key == "unmasked") {
    if (value != "true" && value != "false") throw InputError(key + "=" + io::printable(value) + ": expected true or false");
    unmasked = (value == "true") == (key == "unmasked");
  } else if (key == "gamma") gamma = value;
  else if (key == "normalize") normalize = value;
  else if (key == "eps") eps = value;
  else if (key == "lambda") lambda = value;
  else if (key == "scale") scale = value;
  else return false;
  return true;
}

Options ProblemOptionArgs::options() const {
  Options o;
  auto number = [](const char* name, const std::string& text) {
    try {
      return parse_rational(text);
    } catch (const InputError& e) {
      throw InputError(std::string(name) + ": " + e.what());
    }
  };
  o.variant = parse_variant(variant);
  o.masked = !unmasked;
  o.gamma = number("gamma", gamma);
  o.eps = number("eps", eps);
  o.lambda = number("lambda", lambda);
  o.scale = number("scale", scale);
  if (normalize == "none") o.normalize = false;
  else if (normalize == "add" || normalize == "clamp") o.normalize = true, o.eps_mode = parse_eps_mode(normalize);
  else throw InputError("normalize: '" + io::printable(normalize) + "' is not none, add or clamp");
  o.validate();
  return o;
}

}  // namespace hla::cli
