// The INCONCLUSIVE threshold of a gradient row (check.cpp decide_verdict):
// a row with more than half of its elements unscored makes an otherwise
// clean verdict INCONCLUSIVE; exactly half does not. la1 normalized, d = 2,
// n = 4, f32 declared: the first m tokens have q = (1, 1), k = (1, −1), so
// den = 0 there (D = ε, far inside den's bound: ill-conditioned), the others
// q = k = (1, 0), den = t + 1. dq_t depends on token t only (la1)
// and dk_j, dv_j on the tokens t ≥ j, so in every row exactly the elements of
// the first m tokens are unscored: m = 2 is half (PASS), m = 3 three quarters.
// The outputs are all scored (their residual is finite at D = ε).
#include "hla/check/check.hpp"
#include "hla/engine/gradient_reference.hpp"

#include <catch2/catch.hpp>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;

TEST_CASE("gradients: a row with more than half of its elements ill-conditioned is INCONCLUSIVE, half is not", "[check][gradients]") {
  for (const Index m : {2, 3}) {
    BatchProblem p;
    p.opt.variant = Variant::la1;
    p.opt.gamma = 1;
    p.opt.normalize = true;
    p.dtype = DType::f32;
    p.n = 4, p.d = 2, p.dv = 1;
    for (Index t = 0; t < p.n; ++t) {
      const bool ill = t < m;
      p.q.insert(p.q.end(), {1, ill ? 1.0 : 0.0});
      p.k.insert(p.k.end(), {1, ill ? -1.0 : 0.0});
      p.v.push_back(static_cast<double>(t + 1));
    }
    const std::vector<double> dout{1, -2, 3, 1}, dden{0.5, 1, -1, 2};
    Reference ref = compute_reference(p);
    ref.grad = compute_gradient_reference(p, ref, dout, dden);
    CandidateOutputs c = ours(p, Precision::f32, Form::streaming, 64, DType::f32);
    ours_gradients(p, dout, dden, BackwardForm::streaming, 16, DType::f32, c, Precision::f32);
    CheckOptions o;
    o.precision = Precision::f32;
    o.require_gradients = true;
    const Report r = check::check(p, ref, c, o);
    INFO("m = " << m << ": " << r.verdict() << (r.reasons.empty() ? "" : ": " + r.reasons.front()));
    REQUIRE(r.scored == r.elements);  // the outputs: every element scored
    for (const GradientRow& g : r.gradients) {
      INFO(g.name << ": " << g.scored << " of " << g.elements << " scored");
      CHECK(g.elements - g.scored == g.elements * static_cast<size_t>(m) / 4);
      CHECK(g.ill_conditioned == g.elements - g.scored);
      CHECK_FALSE(g.fails());
    }
    CHECK(r.verdict() == (m == 2 ? "PASS" : "INCONCLUSIVE"));
    if (m == 3) CHECK(r.reasons.front().find("elements are not scored") != std::string::npos);
  }
}
