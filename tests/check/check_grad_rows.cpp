// The INCONCLUSIVE threshold of a gradient row (check.cpp decide_verdict):
// a row with more than half of its elements unscored makes an otherwise
// clean verdict INCONCLUSIVE; exactly half does not. la1 normalized, d = 2,
// n = 4, f32 declared: the first m tokens have q = (1, 1), k = (1, −1), so
// den = 0 there (D = ε, far inside den's bound: ill-conditioned), the others
// q = k = (1, 0), den = t + 1. dq_t depends on token t only (la1)
// and dk_j, dv_j on the tokens t ≥ j, so in every row exactly the elements of
// the first m tokens are unscored: m = 2 is half (PASS), m = 3 three quarters.
// The outputs are all scored (their residual is finite at D = ε).
// The reason says why (den near its pole, the tokens listed) and what to test instead.
// Then: a tensor an all-zero candidate would pass (its reference not all 0) is INCONCLUSIVE.
#include "hla/check/check.hpp"
#include "hla/engine/gradient_reference.hpp"
#include "hla/engine/orders.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <random>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;

// Our f32 streaming forward and backward of p, judged at f32 with the gradients required.
static Report f32_streaming_report(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) {
  Reference ref = compute_reference(p);
  ref.grad = compute_gradient_reference(p, ref, dout, dden);
  CandidateOutputs c = ours(p, Precision::f32, Form::streaming, 64, DType::f32);
  ours_gradients(p, dout, dden, BackwardForm::streaming, 16, DType::f32, c, Precision::f32);
  CheckOptions o;
  o.precision = Precision::f32;
  o.require_gradients = true;
  return check::check(p, ref, c, o);
}

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
    const Report r = f32_streaming_report(p, dout, dden);
    INFO("m = " << m << ": " << r.verdict() << (r.reasons.empty() ? "" : ": " + r.reasons.front()));
    REQUIRE(r.scored == r.elements);  // the outputs: every element scored
    for (const GradientRow& g : r.gradients) {
      INFO(g.name << ": " << g.scored << " of " << g.elements << " scored");
      CHECK(g.elements - g.scored == g.elements * static_cast<size_t>(m) / 4);
      CHECK(g.ill_conditioned == g.elements - g.scored);
      CHECK_FALSE(g.fails());
    }
    CHECK(r.verdict() == (m == 2 ? "PASS" : "INCONCLUSIVE"));
    if (m == 3) {
      // In one sentence: why (den ⊕ ε within its bound of 0, the tokens listed) and what to test instead.
      const std::string& why = r.reasons.front();
      CHECK(why.find("elements are not scored because they depend on a den ⊕ ε within its error bound of 0") != std::string::npos);
      CHECK(why.find("dist=positive") != std::string::npos);
      CHECK(r.gradients_ill_tokens.find("(batch 0, head 0, token 2)") != std::string::npos);
    }
  }
}

// A tensor an all-zero candidate would pass tells nothing (check.cpp decide_verdict): INCONCLUSIVE, never PASS.
namespace {
BatchProblem gaussian_problem(Variant v, Index heads, Index n, Index d, DType dt, Rational gamma, uint64_t seed) {
  BatchProblem p;
  p.opt.variant = v;
  p.opt.gamma = gamma;
  p.dtype = dt;
  p.heads = p.kv_heads = heads, p.n = n, p.d = p.dv = d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  for (auto* x : {&p.q, &p.k, &p.v}) {
    x->resize(static_cast<size_t>(heads * n * d));
    for (double& e : *x) e = round_to(dt, N(rng));
  }
  return p;
}

// A Gaussian upstream dout in p's dtype (seeded), dden as given, and p's reference with its gradients for them.
Reference reference_with_gradients(const BatchProblem& p, uint64_t seed, std::vector<double>& dout, const std::vector<double>& dden) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  dout.resize(static_cast<size_t>(p.heads * p.n * p.dv));
  for (double& e : dout) e = round_to(p.dtype, N(rng));
  Reference ref = compute_reference(p);
  ref.grad = compute_gradient_reference(p, ref, dout, dden);
  return ref;
}

// c with the engine's gradients g, stored in f32.
CandidateOutputs with_gradients(CandidateOutputs c, const CandidateOutputs& g) {
  c.dq = g.dq, c.dk = g.dk, c.dv = g.dv;
  c.dq_dtype = c.dk_dtype = c.dv_dtype = DType::f32;
  return c;
}
}  // namespace

TEST_CASE("vacuous: all-zero gradients of hla3 bf16 state_difference are INCONCLUSIVE, not PASS", "[check][gradients][vacuous]") {
  const BatchProblem p = gaussian_problem(Variant::hla3, 2, 256, 16, DType::bf16, Rational(99, 100), 5);
  std::vector<double> dout, dden(static_cast<size_t>(p.heads * p.n), 0.0);
  const Reference ref = reference_with_gradients(p, 6, dout, dden);
  CandidateOutputs c = ours(p, Precision::bf16, Form::streaming_paper_state, 64, DType::bf16);
  c.dq.assign(ref.grad->dq.size(), 0.0), c.dk.assign(ref.grad->dk.size(), 0.0), c.dv.assign(ref.grad->dv.size(), 0.0);
  c.dq_dtype = c.dk_dtype = c.dv_dtype = DType::bf16;
  CheckOptions o;
  o.form_class = FormClass::state_difference;
  const Report r = check::check(p, ref, c, o);
  INFO(r.text());
  CHECK(r.verdict() == "INCONCLUSIVE");
  REQUIRE_FALSE(r.reasons.empty());
  CHECK(r.reasons.front().find("an all-zero d") != std::string::npos);
  CHECK(r.reasons.front().find("state_difference, bf16") != std::string::npos);
  // A FAIL stays a FAIL: the same candidate with its output garbled.
  CandidateOutputs bad = c;
  for (double& x : bad.out) x += 1;
  const Report rb = check::check(p, ref, bad, o);
  CHECK(rb.verdict() == "FAIL");
}

TEST_CASE("vacuous: an honest f32 candidate still PASSes, and an all-zero one on an all-zero reference", "[check][gradients][vacuous]") {
  BatchProblem p = gaussian_problem(Variant::hla2, 2, 48, 8, DType::f32, Rational(7, 8), 9);
  p.opt.normalize = true;
  std::mt19937_64 rng(10);
  std::normal_distribution<double> N;
  std::vector<double> dout(static_cast<size_t>(p.heads * p.n * p.dv)), dden(static_cast<size_t>(p.heads * p.n));
  for (double& e : dout) e = round_to(DType::f32, N(rng));
  for (double& e : dden) e = round_to(DType::f32, N(rng));
  const Report r = f32_streaming_report(p, dout, dden);
  INFO(r.text());
  CHECK(r.verdict() == "PASS");
  for (const GradientRow& g : r.gradients) CHECK_FALSE(g.vacuous);
  // v = 0 and no upstream: out and every gradient are exactly 0, and so is the candidate.
  std::fill(p.v.begin(), p.v.end(), 0.0);
  p.opt.normalize = false;
  std::fill(dout.begin(), dout.end(), 0.0);
  std::fill(dden.begin(), dden.end(), 0.0);
  Reference z = compute_reference(p);
  z.grad = compute_gradient_reference(p, z, dout, dden);
  CandidateOutputs zc;
  zc.out.assign(z.out.size(), 0.0), zc.dq.assign(z.grad->dq.size(), 0.0), zc.dk.assign(z.grad->dk.size(), 0.0),
      zc.dv.assign(z.grad->dv.size(), 0.0);
  zc.out_dtype = zc.dq_dtype = zc.dk_dtype = zc.dv_dtype = DType::f32;
  CheckOptions o;
  o.precision = Precision::f32;
  o.require_gradients = true;
  const Report rz = check::check(p, z, zc, o);
  INFO(rz.text());
  CHECK(rz.verdict() == "PASS");
}

// --worst 0 lists no element: a gradient over rule 2's bound still fails, and its reason says by how much, not where.
TEST_CASE("gradients: rule 2's reason with no worst element listed (--worst 0)", "[check][gradients]") {
  const BatchProblem p = gaussian_problem(Variant::la1, 1, 16, 4, DType::f32, Rational(1), 3);
  const std::vector<double> dout(static_cast<size_t>(p.n * p.dv), 1.0), dden;
  Reference ref = compute_reference(p);
  ref.grad = compute_gradient_reference(p, ref, dout, dden);
  CandidateOutputs c = ours(p, Precision::f32, Form::streaming, 64, DType::f32);
  ours_gradients(p, dout, dden, BackwardForm::streaming, 16, DType::f32, c, Precision::f32);
  c.dq[5] += 1e3;
  for (const size_t k : {size_t(0), size_t(10)}) {
    CheckOptions o;
    o.precision = Precision::f32;
    o.worst = k;
    const Report r = check::check(p, ref, c, o);
    INFO("worst " << k << ": " << r.text());
    CHECK(r.verdict() == "FAIL");
    REQUIRE(r.gradients.size() >= 1);
    CHECK(r.gradients[0].over_bound == 1);
    CHECK(r.gradients[0].worst.size() == std::min<size_t>(k, r.gradients[0].scored));
    const auto reason =
        std::find_if(r.reasons.begin(), r.reasons.end(), [](const std::string& x) { return x.rfind("dq: 1 elements exceed", 0) == 0; });
    REQUIRE(reason != r.reasons.end());
    CHECK((reason->find("at batch 0 head 0 token 1 column 1") != std::string::npos) == (k > 0));
  }
}

// Decay in log space along the sequence (engine::gradient_log_order, the
// outputs' chunked_matmul/64 order with log_along): exp(b_t − b_j) of a
// cumulative sum of log γ errs with |b_t|, far beyond our other orders at
// length. la1, 16 heads of 1024 tokens (the fast engine's orders: above 2^24),
// γ = 9/10, f32: a candidate that forms its decays so PASSes only through that
// order, which then sets every bar; one that decays by powers of γ PASSes
// without it, its bars from the sharper orders (the order is consulted only
// when needed).
TEST_CASE("log-space decay along the sequence: an order of ours at scale, consulted only when needed", "[check][gradients][log]") {
  const BatchProblem p = gaussian_problem(Variant::la1, 16, 1024, 32, DType::f32, Rational(9, 10), 21);
  REQUIRE(fast_baseline_wanted(p));
  std::vector<double> dout, dden;
  const Reference ref = reference_with_gradients(p, 22, dout, dden);
  CheckOptions o;
  o.precision = Precision::f32;
  o.require_gradients = true;
  const std::string along = "along the sequence";
  // Decays in log space along the sequence (the engine's forward and backward so formed).
  const CandidateOutputs lg =
      with_gradients(fast_ours(p, Precision::f32, BaselineForm{Form::chunked_matmul, 64, false, true, LogAlong::summed}, DType::f32),
                     fast_ours_gradients(p, Precision::f32, dout, dden, 64, LogAlong::summed));
  const Report rl = check::check(p, ref, lg, o);
  INFO(rl.text());
  CHECK(rl.verdict() == "PASS");
  CHECK(rl.baseline_worst_form.find(along) != std::string::npos);
  REQUIRE(rl.gradients.size() == 3);
  for (const GradientRow& g : rl.gradients) CHECK(g.baseline_worst_form.find(along) != std::string::npos);
  // Decays by powers of γ: the same verdict without that order, which is not consulted.
  CandidateOutputs pw = ours(p, Precision::f32, Form::chunked_matmul, 16, DType::f32);
  ours_gradients(p, dout, dden, BackwardForm::chunked, 16, DType::f32, pw, Precision::f32);
  const Report rp = check::check(p, ref, pw, o);
  INFO(rp.text());
  CHECK(rp.verdict() == "PASS");
  CHECK(rp.baseline_worst_form.find(along) == std::string::npos);
  for (const GradientRow& g : rp.gradients) CHECK(g.baseline_worst_form.find(along) == std::string::npos);
}

TEST_CASE("tensor-core precisions: our backward orders round their products' operands", "[check][gradients][tensor_core]") {
  // la1, 2 heads of 40 tokens, d = 8, bf16 inputs and upstream. Declared bf16+f32, each gradient's bar comes from
  // an engine backward order whose operands are rounded to bf16: more than 64 times what our f32 orders err, in
  // bf16's unit. A backward so computed passes.
  const BatchProblem p = gaussian_problem(Variant::la1, 2, 40, 8, DType::bf16, Rational(9, 10), 31);
  std::vector<double> dout, dden;
  const Reference ref = reference_with_gradients(p, 32, dout, dden);
  CheckOptions o;
  o.require_gradients = true;
  o.precision = Precision::f32;
  CandidateOutputs exact{ref.out, {}, DType::f64, DType::f64};
  exact.dq = ref.grad->dq, exact.dk = ref.grad->dk, exact.dv = ref.grad->dv;
  exact.dq_dtype = exact.dk_dtype = exact.dv_dtype = DType::f64;
  const Report f32 = check::check(p, ref, exact, o);
  REQUIRE(f32.gradients.size() == 3);
  o.precision = Precision::bf16_f32;
  const CandidateOutputs tc =
      with_gradients(fast_ours(p, Precision::bf16_f32, BaselineForm{Form::chunked_matmul, 16, false, false, LogAlong::none}, DType::bf16),
                     fast_ours_gradients(p, Precision::bf16_f32, dout, dden, 16, LogAlong::none));
  const Report r = check::check(p, ref, tc, o);
  INFO(r.text());
  CHECK(r.verdict() == "PASS");
  REQUIRE(r.gradients.size() == 3);
  const double to_bf16 = unit_roundoff(Precision::f32) / unit_roundoff(Precision::bf16_f32);
  for (size_t i = 0; i < 3; ++i) {
    INFO(r.gradients[i].name << ": ours " << r.gradients[i].baseline_max_score << " (" << r.gradients[i].baseline_worst_form << "), f32 "
                             << f32.gradients[i].baseline_max_score);
    CHECK(r.gradients[i].baseline_max_score > 64 * f32.gradients[i].baseline_max_score * to_bf16);
  }
}

TEST_CASE("gradients: a row mostly beyond its own dtype's range is INCONCLUSIVE, naming that dtype", "[check][gradients]") {
  // la1, q = k = v = 1, n = 4, d = dv = 1: dq_t = do_t (t + 1) and dk_j = dv_j = Σ_{t ≥ j} do_t, so with
  // do = (1, 6e4, 6e4, 6e4) three of each gradient's four elements exceed f16's 65504; the outputs (≤ 4) are scored.
  BatchProblem p;
  p.opt.variant = Variant::la1;
  p.opt.gamma = 1;
  p.dtype = DType::f32;
  p.n = 4, p.d = 1, p.dv = 1;
  p.q = p.k = p.v = {1, 1, 1, 1};
  const std::vector<double> dout{1, 6e4, 6e4, 6e4};
  Reference ref = compute_reference(p);
  ref.grad = compute_gradient_reference(p, ref, dout, {});
  CandidateOutputs c{ref.out, {}, DType::f32};
  for (auto [x, g] : {std::pair{&c.dq, &ref.grad->dq}, {&c.dk, &ref.grad->dk}, {&c.dv, &ref.grad->dv}})
    for (const double e : *g) x->push_back(round_to(DType::f16, e));
  c.dq_dtype = c.dk_dtype = c.dv_dtype = DType::f16;
  const Report r = check::check(p, ref, c, {.precision = Precision::f32, .require_gradients = true});
  INFO(r.text());
  CHECK(r.scored == r.elements);
  for (const GradientRow& g : r.gradients) CHECK((g.dtype == DType::f16 && g.out_of_range == 3 && g.scored == 1));
  REQUIRE(r.inconclusive);
  CHECK(r.reasons.front().find("dq: 3 of its 4 elements are not scored: too little was checked. Of them, 3 have a reference beyond "
                               "f16's largest finite value 65504: store them in a wider dtype") != std::string::npos);
}
