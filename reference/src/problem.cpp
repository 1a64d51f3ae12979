#include "hla/problem.hpp"

#include "hla/head.hpp"
#include "hla/options.hpp"

#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hla {
namespace {

// "hla2 and hla3": the variants with a property, for messages.
std::string names_with(bool VariantInfo::*has) {
  std::vector<std::string> names;
  for (const VariantInfo& v : kVariants)
    if (v.*has) names.emplace_back(v.name);
  return join(names, ", ", " and ");
}

}  // namespace

void throw_beyond_decay_bound(Index e, size_t table_size) {
  throw std::logic_error("gamma^" + std::to_string(e) + " is beyond the variant's decay bound (" + std::to_string(table_size - 1) + ")");
}

std::string to_string(EpsMode m) { return m == EpsMode::add ? "add" : "clamp"; }

EpsMode parse_eps_mode(std::string_view s) {
  if (s == "add") return EpsMode::add;
  if (s == "clamp") return EpsMode::clamp;
  throw InputError("unknown eps_mode '" + std::string(s) + "' (expected add or clamp)");
}

// Each option's range is its table row's; then what the variant takes.
void Options::validate() const {
  for (const OptionInfo& r : kOptions)
    if (r.in_range && !r.in_range(*this))
      throw InputError(std::string(r.name) + " = " + r.text(*this) + " must be " + std::string(r.range));
  const std::string var = to_string(variant), lam(info(Option::lam).name), g(info(Option::gamma).name);
  if (lambda != 0 && !has_ridge(variant))
    throw InputError(lam + " (ridge) applies to " + names_with(&VariantInfo::has_ridge) + " only, not " + var);
  if (!masked && !has_unmasked(variant))
    throw InputError(var + " has no unmasked form (only " + names_with(&VariantInfo::has_unmasked) + " do)");
  if (needs_unit_gamma(variant) && gamma != 1)
    throw InputError(var + " is defined for " + g + " = 1 only, got " + g + " = " + to_string(gamma));
}

std::string Options::describe() const {
  std::ostringstream os;
  os << *this;
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Options& o) {
  // "hla2 masked gamma=7/8 lam=0 scale=1", then "normalize=add eps=1/1000000" when normalized.
  os << to_string(o.variant) << (o.masked ? " masked" : " unmasked");
  for (Option id : {Option::gamma, Option::lam, Option::scale, Option::normalize, Option::eps})
    if (o.normalize || (id != Option::normalize && id != Option::eps)) os << " " << info(id).name << "=" << info(id).text(o);
  return os;
}

std::ostream& operator<<(std::ostream& os, const Problem<Rational>& p) {
  auto rows = [&](const char* name, const Mat<Rational>& m) {
    os << "  " << name << " =";
    for (Index t = 0; t < m.rows(); ++t) {
      os << " [";
      for (Index c = 0; c < m.cols(); ++c) os << (c ? " " : "") << to_string(m(t, c));
      os << "]";
    }
    os << "\n";
  };
  os << "Problem{" << p.opt << "; n=" << p.n() << " d=" << p.d() << " dv=" << p.dv() << "\n";
  rows("q", p.q);
  rows("k", p.k);
  rows("v", p.v);
  return os << "}";
}

void validate_shapes(Index qn, Index qd, Index kn, Index kd, Index vn, Index vdv) {
  auto shape = [](Index r, Index c) { return "(" + std::to_string(r) + ", " + std::to_string(c) + ")"; };
  if (qd < 1) throw InputError("q has shape " + shape(qn, qd) + ": head dimension d must be >= 1");
  if (vdv < 1) throw InputError("v has shape " + shape(vn, vdv) + ": value dimension dv must be >= 1");
  if (kn != qn || kd != qd)
    throw InputError("k has shape " + shape(kn, kd) + " but q has " + shape(qn, qd) + "; they must match");
  if (vn != qn)
    throw InputError("v has " + std::to_string(vn) + " tokens but q has " + std::to_string(qn));
}

}  // namespace hla
