// The one description of an HLA problem (SPEC §1, §2, §8) and the one place
// that decides whether it is valid.
#pragma once

#include "hla/error.hpp"
#include "hla/scalar.hpp"
#include "hla/variants.hpp"

#include <iosfwd>
#include <string>
#include <vector>

namespace hla {

enum class EpsMode { add, clamp };

std::string to_string(EpsMode m);
EpsMode parse_eps_mode(std::string_view s);

// Options, held exactly; every scalar type rounds them from here.
struct Options {
  Variant variant = Variant::hla2;
  bool masked = true;
  bool normalize = false;
  EpsMode eps_mode = EpsMode::add;
  Rational gamma{1};
  Rational eps{Rational(1, 1000000)};
  Rational lambda{0};
  Rational scale{1};

  // Throws InputError naming the offending option: γ ∉ (0,1], ε ≤ 0, λ < 0,
  // an option the variant does not take.
  void validate() const;
  std::string describe() const;  // one line, exact values
  bool operator==(const Options&) const = default;
};

// Shapes of one head: q n×d, k n×d, v n×dv with d, dv ≥ 1 (n = 0 is a valid
// empty sequence). Throws InputError naming the mismatch.
void validate_shapes(Index qn, Index qd, Index kn, Index kd, Index vn, Index vdv);

// One head: q, k are n×d, v is n×dv (row t = token t).
template <class S> struct Problem {
  Options opt;
  Mat<S> q, k, v;

  Index n() const { return q.rows(); }
  Index d() const { return q.cols(); }
  Index dv() const { return v.cols(); }
  // Throws InputError on mismatched or empty shapes, or invalid options.
  void validate() const {
    validate_shapes(q.rows(), q.cols(), k.rows(), k.cols(), v.rows(), v.cols());
    opt.validate();
  }
};

template <class S> Problem<S> convert_problem(const Problem<Rational>& p) {
  return Problem<S>{p.opt, mat_from_rational<S>(p.q), mat_from_rational<S>(p.k), mat_from_rational<S>(p.v)};
}

std::ostream& operator<<(std::ostream& os, const Options& o);
std::ostream& operator<<(std::ostream& os, const Problem<Rational>& p);

}  // namespace hla
