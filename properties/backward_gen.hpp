// Generators for the backward suites: a small problem with its upstream
// gradients (SPEC §9). Small shapes: the naive hla3 gradient is O(n⁴) terms
// and rational entries grow with every decayed product.
#pragma once

#include "generators.hpp"

namespace hla::test {

struct Upstream {
  Mat<Rational> dout;  // n × dv
  Vec<Rational> dden;  // n; zero in one case in three (den not an output)
};

// Inside a property: a value of g at RapidCheck's full size. These suites are
// cheap, so every case gets the whole range (n up to 7, entries up to ±4/q)
// rather than the small early cases of a size ramp; shrinking is unchanged.
template <class T> T draw_full(rc::Gen<T> g) { return *rc::gen::resize(rc::kNominalSize, std::move(g)); }

inline Spec backward_spec(Variant v) { return {.variant = v, .max_n = 7, .max_d = 3, .random_scale = true}; }
// Clamp mode takes ε ∈ {1/4, …, 4} half the time, so that rows with |den| < ε
// (D held at ±ε: D' = 0) and |den| = ε (the kink) occur; add mode keeps
// property_eps(), which den + ε never cancels.
inline Problem<Rational> backward_problem(const Spec& s) {
  auto p = draw_full(problem_gen(s));
  if (p.opt.normalize && p.opt.eps_mode == EpsMode::clamp && *rc::gen::arbitrary<bool>()) p.opt.eps = Rational(*rc::gen::inRange(1, 17), 4);
  return p;
}
inline Problem<Rational> backward_problem(Variant v) { return backward_problem(backward_spec(v)); }
inline Mat<Rational> full_matrix(Index rows, Index cols) { return draw_full(rational_matrix(rows, cols)); }

inline Upstream upstream_gen(const Problem<Rational>& p) {
  Upstream u{full_matrix(p.n(), p.dv()), Vec<Rational>::Zero(p.n())};
  if (*rc::gen::inRange(0, 3) > 0) u.dden = full_matrix(p.n(), 1);
  return u;
}

inline Rational inner(const Mat<Rational>& a, const Mat<Rational>& b) { return a.cwiseProduct(b).sum(); }

}  // namespace hla::test
