// The fast engine's heads of test problems, and its exact (Rational) result
// against the values and magnitudes it must equal, for the engine's
// properties (fast_engine.cpp, fast_backward.cpp, state.cpp).
#pragma once

#include "hla/evaluate.hpp"
#include "hla/fast/engine.hpp"

#include <random>
#include <string>

#include "../float_inputs.hpp"

namespace hla::test {

inline Rational abs_r(const Rational& x) { return x < 0 ? Rational(-x) : x; }
inline Rational rat(const fast::DD& x) { return to_rational(x.hi) + to_rational(x.lo); }
inline Rational rat(double x) { return to_rational(x); }
inline const Rational& rat(const Rational& x) { return x; }

template <class S> S get(const fast::Dense<S>& m, Index i, Index j) {
  if constexpr (std::is_same_v<S, fast::DD>) return m.at(i, j);
  else return m.at(i, j);
}

// The engine's head for a problem of doubles (q, k, v as Rational holding doubles).
template <class S> fast::FastHead<S> head_of(const Problem<Rational>& p, Index w) {
  auto conv = [](const Rational& x) {
    if constexpr (std::is_same_v<S, Rational>) return x;
    else if constexpr (std::is_same_v<S, fast::DD>) return fast::DD{to_double(x), 0};
    else return to_double(x);
  };
  return fast::make_fast_head<S>(
      p.opt, p.n(), p.d(), p.dv(), [&](Index t, Index c) { return conv(p.q(t, c)); }, [&](Index t, Index c) { return conv(p.k(t, c)); },
      [&](Index t, Index c) { return conv(p.v(t, c)); }, w);
}

// A problem whose inputs are doubles: Gaussian values rounded to f32, from a seed.
inline Problem<Rational> gaussian_problem(Options o, Index n, Index d, Index dv, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Mat<Rational> q = gaussian_f32_matrix(rng, n, d), k = gaussian_f32_matrix(rng, n, d);
  Mat<Rational> v = gaussian_f32_matrix(rng, n, dv);
  return {o, q, k, v};
}

// The first element (row t, column c; column dv is den) where the engine's
// value or magnitude differs from want / mag, spelled out; "" when none.
inline std::string engine_mismatch(const fast::HeadResult<Rational>& r, const Output<Rational>& want, const Output<Rational>& mag) {
  const Index dv = want.num.cols();
  for (Index t = 0; t < want.num.rows(); ++t)
    for (Index c = 0; c <= dv; ++c) {
      const Rational& w = c == dv ? want.den(t) : want.num(t, c);
      const Rational& m = c == dv ? mag.den(t) : mag.num(t, c);
      const std::string at = "[t=" + std::to_string(t) + ", c=" + std::to_string(c) + "]";
      if (r.val.at(t, c) != w) return "value" + at + ": engine " + to_string(r.val.at(t, c)) + ", want " + to_string(w);
      if (r.mag.at(t, c) != m) return "magnitude" + at + ": engine " + to_string(r.mag.at(t, c)) + ", want " + to_string(m);
    }
  return "";
}

}  // namespace hla::test
