// The edges of the gradient reference's certification (fast/gradient.cpp and
// gradient_reference.cpp), on instances built to sit on them:
//   1. the screen: a gradient element whose exact value lies just past a
//      rounding midpoint, at 0.75 × the engine's own error term, is never
//      certified by the double-double engine; binary128 resolves it; far from
//      the midpoint the engine certifies it. Plain (the backward's own error)
//      and normalized where the upstream's error dominates (den behind a
//      cancelling key pair: M_den/|den| = 2^11);
//   2. clamp mode: a token whose |den| is ε, or within its bound of ε (the
//      branch of D in doubt), makes the elements that depend on it
//      ill-conditioned (flagged, never certified); 2^-60 away it does not.
#include "hla/engine/gradient_groups.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace hla;
using namespace hla::engine;

namespace grad_edges {

// la1, d = 2, dv = 1, γ = 1, f64 inputs; k_0 = (1, 0), so that
// dv_0 = Σ_t (q_t·k_0)·Ĝ_t = Σ_t q_t[0]·do_t / D_t. Every den_t is q_t[0]
// (the keys after k_0 add (0, B) and (0, −B)), so each token adds do_t:
//   token 0: q = (1, 0), do = tiny;  token 1: q = (1, 0), do = 2^-53;
//   token 2: q = (c, 1), do = 1 (den = c, M_den = c + 2B: κ = 1 + 2B/c)
// and dv_0 = 1 + 2^-53 + tiny, just past the midpoint of 1 and 1 + 2^-52.
// Raw (not normalized): Ĝ_t = do_t, and do_2 = 1/c gives the same sum.
struct Instance {
  BatchProblem p;
  std::vector<double> dout, dden;
};
Instance instance(bool normalize, double tiny) {
  const double B = 1, c = std::ldexp(1.0, -10);
  Instance x;
  BatchProblem& p = x.p;
  p.opt.variant = Variant::la1;
  p.opt.gamma = 1;
  p.opt.normalize = normalize;
  p.opt.eps_mode = EpsMode::clamp;  // |den| ≥ ε everywhere: D = den, exact
  p.opt.eps = to_rational(std::ldexp(1.0, -60));
  p.dtype = DType::f64;
  p.n = 3, p.d = 2, p.dv = 1;
  p.q = {1, 0, 1, 0, c, 1};
  p.k = {1, 0, 0, B, 0, -B};
  p.v = {1, 1, 1};
  x.dout = {tiny, std::ldexp(1.0, -53), normalize ? 1 : 1 / c};
  return x;
}

ReferenceOptions engine_only() {
  ReferenceOptions o;
  o.exact_max_n = 0;  // the double-double engine, not exact rationals
  return o;
}

// The engine's error term of dv_0.
double error_term(const Instance& x) {
  const Reference ref = compute_reference(x.p, engine_only());
  GroupGradient<double> v, f, bounds;
  REQUIRE(fast_group_gradient(x.p, x.dout, x.dden, ref.den, 0, 0, 0, x.p.n, 64, v, f, &bounds));
  return bounds.dv(0, 0);
}

struct Outcome {
  double value;
  uint8_t flags;
};
Outcome dv0(const Instance& x, bool recompute) {
  const Reference ref = compute_reference(x.p, engine_only());
  REQUIRE(ref.bits != 0);
  GradientOptions o;
  if (!recompute) o.recompute_work = 0;
  const GradientReference g = compute_gradient_reference(x.p, ref, x.dout, x.dden, o);
  return {g.dv[0], g.dv_flags[0]};
}

}  // namespace grad_edges

TEST_CASE("gradient certification: an element within the engine's error term of a midpoint goes to binary128", "[fast][certify]") {
  using namespace grad_edges;
  const double rounded = 1 + std::ldexp(1.0, -52);  // RN(1 + 2^-53 + tiny), tiny > 0
  for (const bool normalize : {false, true}) {
    const double e = error_term(instance(normalize, std::ldexp(1.0, -80)));
    // 0.75·e, a multiple of 2^-104 (2^-53 + tiny is then exact in the engine's low double).
    const double tiny = std::ldexp(std::floor(0.75 * e / std::ldexp(1.0, -104)), -104);
    const Instance x = instance(normalize, tiny);
    const double term = error_term(x);
    INFO((normalize ? "normalized" : "plain") << ": error term " << term << " = 2^" << std::log2(term) << ", exact − midpoint = 2^"
                                              << std::log2(tiny));
    REQUIRE(tiny > 0.7 * term);
    REQUIRE(tiny < 0.8 * term);
    if (normalize) {  // the upstream's error dominates the term: the plain backward's is 2^11 smaller
      const double plain = error_term(instance(false, tiny));
      INFO("the same sum without normalize: error term 2^" << std::log2(plain));
      REQUIRE(term > 256 * plain);
    }
    const Outcome alone = dv0(x, false), resolved = dv0(x, true);
    INFO("engine alone: " << alone.value << " flags " << int(alone.flags) << "; with binary128: " << resolved.value << " flags "
                          << int(resolved.flags));
    CHECK((alone.flags & kUncertified) != 0);     // the screen declines inside its error term
    CHECK((resolved.flags & kUncertified) == 0);  // binary128's tighter bound resolves it
    CHECK(resolved.value == rounded);
    // Control: 2^-60 past the midpoint, far beyond the term, the engine certifies alone.
    const Outcome far = dv0(instance(normalize, std::ldexp(1.0, -60)), false);
    CHECK((far.flags & kUncertified) == 0);
    CHECK(far.value == rounded);
  }
}

TEST_CASE("gradient certification, clamp: |den| at ε or within its bound of ε is ill-conditioned, 2^-60 away is not", "[fast][certify]") {
  using namespace grad_edges;
  // One normalized token 0 with den = q_0·k_0 = ε + s (ε = 2^-4), and the
  // tokens after it well away from ε; dq_0 depends on token 0 only (la1).
  const double eps = std::ldexp(1.0, -4);
  for (const double s : {0.0, std::ldexp(1.0, -115), -std::ldexp(1.0, -115), std::ldexp(1.0, -60), -std::ldexp(1.0, -60)}) {
    BatchProblem p;
    p.opt.variant = Variant::la1;
    p.opt.gamma = 1;
    p.opt.normalize = true;
    p.opt.eps_mode = EpsMode::clamp;
    p.opt.eps = to_rational(eps);
    p.dtype = DType::f64;
    p.n = 3, p.d = 2, p.dv = 1;
    p.q = {1, 1, 1, 0, 1, 0};
    p.k = {eps, s, 1, 0, 1, 0};
    p.v = {1, 2, 3};
    const std::vector<double> dout{1, 1, 1}, dden{1, 1, 1};
    const Reference ref = compute_reference(p, engine_only());
    const GradientReference g = compute_gradient_reference(p, ref, dout, dden);
    const bool within = std::fabs(s) < std::ldexp(1.0, -100);
    INFO("den − ε = " << s << ", dq_0 flags " << int(g.dq_flags[0]) << " " << int(g.dq_flags[1]) << ", dq_2 flags " << int(g.dq_flags[4]));
    for (size_t c : {0, 1}) {
      CHECK(((g.dq_flags[c] & kUncertified) != 0) == within);
      CHECK(((g.dq_flags[c] & kIllConditioned) != 0) == within);
    }
    CHECK((g.dq_flags[4] & kUncertified) == 0);  // token 2 (den = 3): certified either way
  }
}
