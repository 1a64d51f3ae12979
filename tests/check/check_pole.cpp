// The width of the pole region (check.cpp score_head, near_pole): a
// non-finite normalized output is accepted where the reference's D lies
// within the bound of 0 — add mode |den ⊕ ε| ≤ K·u·(M_den + ε), clamp mode
// |den| ≤ K·u·M_den — and fails one step beyond. The instances put D on the
// bound, 2^-50 (relative) inside it and 2^-50 beyond it, both signs, so
// moving the edge by any factor of 1 + 2^-49 or more (or dropping its ≤, ε,
// or K) changes a verdict here.
#include "hla/check/check.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;

namespace pole_edges {

// la1, d = dv = 1, q = v = 1, n = 7, f32 declared: K = 2·(7 + 1) + 16 = 32 and
// u = 2^-24, so K·u = 2^-19. Keys (1, -1, 0, 0, 0, 0, s): at the last token
// den = s and M_den = RN(2 + |s|). With |s| near 2^-18 and the ε below, every
// double operation of the test (den + ε, M_den + ε, 2^-19·M) is exact, so
// check.cpp's double arithmetic decides exactly as the rationals do.
constexpr Index kN = 7;
const double kKu = std::ldexp(1.0, -19);

BatchProblem pole_problem(EpsMode mode, double eps, double s) {
  BatchProblem p;
  p.opt.variant = Variant::la1;
  p.opt.normalize = true;
  p.opt.eps_mode = mode;
  p.opt.eps = to_rational(eps);
  p.dtype = DType::f64;
  p.n = kN, p.d = 1, p.dv = 1;
  p.q.assign(kN, 1.0);
  p.k = {1, -1, 0, 0, 0, 0, s};
  p.v.assign(kN, 1.0);
  return p;
}

// The key s that puts the edge's quantity X (add: den + ε; clamp: den) at
// sign·(B + nudge), B = K·u·M the bound (add: M = M_den + ε; clamp: M_den).
// M_den = RN(2 + |s|) depends on s only through its last bits: a fixed point
// after two or three rounds.
double key_for(EpsMode mode, double eps, double sign, double nudge) {
  const double e = mode == EpsMode::add ? eps : 0;
  double s = sign * kKu * 2;
  for (int i = 0; i < 8; ++i) {
    const double B = kKu * ((2 + std::fabs(s)) + e);
    const double next = sign * (B + nudge) - e;
    if (next == s) return s;
    s = next;
  }
  FAIL("no fixed point for the key");
  return s;
}

}  // namespace pole_edges

TEST_CASE("pole region: a non-finite output is accepted on and just inside K·u·M, fails just beyond (add and clamp)", "[check][pole]") {
  using namespace pole_edges;
  // Add: ε = 2^-30 (den and den + ε differ by 2^-12 relatively, M_den and M_den + ε by 2^-31).
  // Clamp: ε = 1/4 > |den|, so its divisor is ±ε and only |den| can tell the pole.
  for (const auto& [mode, eps] : {std::pair{EpsMode::add, std::ldexp(1.0, -30)}, std::pair{EpsMode::clamp, 0.25}})
    for (double sign : {1.0, -1.0})
      for (int steps : {-4, 0, 4}) {  // X = B + steps·2^-70: ulp(X) = 2^-70, so 4 steps = 2^-50 relative
        const double s = key_for(mode, eps, sign, steps * std::ldexp(1.0, -70));
        const BatchProblem p = pole_problem(mode, eps, s);
        const Reference ref = compute_reference(p);
        REQUIRE(ref.bits == 0);  // exact rationals, rounded once
        const size_t last = kN - 1;
        const bool add = mode == EpsMode::add;
        // The instance, in exact rationals from the stored doubles: where X sits against B.
        const Rational eps_r = p.opt.eps, den = to_rational(ref.den[last]), M = to_rational(ref.mag_den[last]);
        const Rational X = add ? Rational(den + eps_r) : den, B = Rational(to_rational(kKu) * (add ? Rational(M + eps_r) : M));
        const Rational absX = X < 0 ? Rational(-X) : X;
        INFO(to_string(mode) << " sign " << sign << " steps " << steps << ": den " << ref.den[last] << ", M_den " << ref.mag_den[last]
                             << ", |X|/B - 1 = " << to_double(Rational(absX / B - 1)));
        REQUIRE(den == to_rational(s));  // den is s exactly
        REQUIRE(absX == B + Rational(steps) * to_rational(std::ldexp(1.0, -70)));
        REQUIRE(std::isfinite(ref.out[last]));
        const bool inside = steps <= 0;
        for (double bad : {double(INFINITY), -double(INFINITY), double(NAN)}) {
          CandidateOutputs c{ref.out, {}, DType::f64};
          c.out[last] = bad;
          const Report r = check::check(p, ref, c, {.precision = Precision::f32});
          INFO("candidate " << bad << "\n" << r.text());
          CHECK(r.bound == 33);  // K + 1 with K = 32
          if (inside) {
            CHECK(r.pass);
            CHECK(r.at_pole == 1);
            CHECK(r.nonfinite == 0);
            CHECK(r.scored == kN - 1);
          } else {
            CHECK_FALSE(r.pass);
            CHECK(r.at_pole == 0);
            CHECK(r.nonfinite == 1);
          }
        }
      }
}
