// A verdict that can be trusted: a fixture whose reference does not
// belong to its inputs is refused, whoever wrote it (the digest is recomputed
// here, as a hostile editor would); a report never passes on nothing; every
// honest fixture (the committed golden set) verifies.
#include "hla/check/check.hpp"
#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"

#include "../../properties/harness.hpp"
#include "../io/io_util.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;
using hla::test::require_input_error;
using hla::test::ScratchDir;

namespace {

BatchProblem problem(Variant v, bool normalize, uint64_t seed, Index n = 9, Index d = 3) {
  BatchProblem p;
  p.opt.variant = v;
  p.opt.gamma = needs_unit_gamma(v) ? Rational(1) : Rational(7, 8);
  p.opt.normalize = normalize;
  p.opt.eps = Rational(1, 1000);
  p.dtype = DType::f32;
  p.batch = 1, p.heads = 2, p.kv_heads = 1, p.n = n, p.d = d, p.dv = d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  auto fill = [&](std::vector<double>& x, Index size) {
    x.resize(static_cast<size_t>(size));
    for (auto& e : x) e = round_to(DType::f32, N(rng));
  };
  fill(p.q, p.batch * p.heads * n * d);
  fill(p.k, p.batch * p.kv_heads * n * d);
  fill(p.v, p.batch * p.kv_heads * n * d);
  return p;
}

io::Fixture honest(const BatchProblem& p) { return make_fixture(p, compute_reference(p), {"unit", "trust", 1, false}); }

// The same with gradients: an upstream do (and dden when normalized) drawn from `seed`.
io::Fixture honest_grad(const BatchProblem& p, uint64_t seed) {
  Reference r = compute_reference(p);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  std::vector<double> dout(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)), dden;
  for (auto& e : dout) e = round_to(p.dtype, N(rng));
  if (p.opt.normalize) {
    dden.resize(static_cast<size_t>(p.batch * p.heads * p.n));
    for (auto& e : dden) e = round_to(p.dtype, N(rng));
  }
  r.grad = compute_gradient_reference(p, r, dout, dden);
  return make_fixture(p, r, {"unit", "trust-grad", 1, false});
}

// Writes f (digest and all: a forged file) and reads it back.
io::Fixture roundtrip(const io::Fixture& f) {
  ScratchDir dir;
  io::write_fixture(dir / "f.safetensors", f);
  return io::read_fixture(dir / "f.safetensors");
}

// The candidate every output of which is 12345: must never pass.
io::Candidate garbage(const io::Fixture& f) {
  io::Candidate c;
  c.out.assign(f.ref_out.size(), 12345.0);
  c.out_dtype = DType::f32;
  return c;
}

using Edits = std::vector<std::pair<std::string, std::function<void(io::Fixture&)>>>;
// Each edit of `good`, written with a fitting digest (forged) and read back, is refused, not judged.
void refused_after(const io::Fixture& good, const Edits& edits) {
  for (const auto& [name, edit] : edits) {
    io::Fixture bad = good;
    edit(bad);
    INFO(name);
    const io::Fixture read = roundtrip(bad);
    require_input_error([&] { (void)check_fixture(read, garbage(read)); }, {"does not match its inputs"});
  }
}

}  // namespace

TEST_CASE("trust: corrupted references are refused, not judged", "[check][trust]") {
  for (Variant v : variants_where(is_kernel_variant)) {
    for (bool normalize : {false, true}) {
      const io::Fixture good = honest(problem(v, normalize, 3));
      INFO(to_string(v) << (normalize ? " normalized" : ""));
      CHECK_NOTHROW(verify_fixture(roundtrip(good)));
      const Edits edits{
          {"ref_out all NaN", [](io::Fixture& f) { std::fill(f.ref_out.begin(), f.ref_out.end(), NAN); }},
          {"ref_out all Inf", [](io::Fixture& f) { std::fill(f.ref_out.begin(), f.ref_out.end(), INFINITY); }},
          {"ref_out 1e300", [](io::Fixture& f) { std::fill(f.ref_out.begin(), f.ref_out.end(), 1e300); }},
          {"ref_out = the garbage", [](io::Fixture& f) { std::fill(f.ref_out.begin(), f.ref_out.end(), 12345.0); }},
          {"one NaN in ref_out", [](io::Fixture& f) { f.ref_out[f.ref_out.size() - 1] = NAN; }},
          {"one ref_out element off by 1e-9 relative", [](io::Fixture& f) { f.ref_out[4] *= 1 + 1e-9; }},
          {"ref_den scaled", [](io::Fixture& f) { f.ref_den[2] = 2 * f.ref_den[2] + 1; }},
          {"mag_num x 1e10",
           [](io::Fixture& f) {
             for (auto& m : f.mag_num) m *= 1e10;
           }},
          {"mag_den x 1e10",
           [](io::Fixture& f) {
             for (auto& m : f.mag_den) m *= 1e10;
           }},
          {"mag_num of the last head x 2", [](io::Fixture& f) { f.mag_num.back() *= 2; }},
          {"q: one value changed", [](io::Fixture& f) { f.problem.q[5] = round_to(DType::f32, f.problem.q[5] * 1.5 + 0.25); }},
          {"k of the last token changed", [](io::Fixture& f) { f.problem.k.back() = round_to(DType::f32, f.problem.k.back() - 1); }},
          {"v: one value changed", [](io::Fixture& f) { f.problem.v[7] = round_to(DType::f32, f.problem.v[7] + 2); }},
          {"gamma edited",
           [](io::Fixture& f) {
             if (!needs_unit_gamma(f.problem.opt.variant)) f.problem.opt.gamma = Rational(1, 2);
             else f.problem.opt.scale = 2;
           }},
          {"scale edited", [](io::Fixture& f) { f.problem.opt.scale = Rational(3, 4); }},
          {"normalize toggled",
           [](io::Fixture& f) {
             f.problem.opt.normalize = !f.problem.opt.normalize;
             if (f.problem.opt.normalize) f.ref_num = f.ref_out;
             else f.ref_num.clear();
           }},
          {"eps edited",
           [](io::Fixture& f) {
             if (f.problem.opt.normalize) f.problem.opt.eps = 5;
             else f.problem.opt.scale = Rational(-1, 2);
           }},
          {"ill-conditioned flags",
           [](io::Fixture& f) {
             if (f.problem.opt.normalize) f.den_flags.assign(f.ref_den.size(), io::kFlagIllConditioned);
             else f.flags.assign(f.ref_out.size(), io::kFlagIllConditioned);
           }},
          {"exact tier claimed on a binary128 reference",
           [](io::Fixture& f) {
             f.exact_tier = true;
             f.reference_bits = 113;
           }},
      };
      refused_after(good, edits);
      if (!good.final_state.empty())  // the final state (SPEC §8), proven as the outputs are
        refused_after(good, {{"one final-state entry off by 1e-9 relative", [](io::Fixture& f) { f.final_state[1] *= 1 + 1e-9; }},
                             {"a NaN in the final state", [](io::Fixture& f) { f.final_state.back() = NAN; }},
                             {"mag_state of the first entry x 2", [](io::Fixture& f) { f.mag_final_state[0] *= 2; }}});
      // The variant and the mask are part of the options too (a forger drops the final state, laid out by them).
      io::Fixture other = good;
      other.problem.opt.variant = v == Variant::hla2 ? Variant::ahla : Variant::hla2;
      other.problem.opt.lambda = 0;
      other.final_state.clear(), other.mag_final_state.clear(), other.final_state_flags.clear();
      require_input_error([&] { (void)check_fixture(roundtrip(other), garbage(other)); }, {"does not match its inputs"});
      if (has_unmasked(v)) {
        io::Fixture unmasked = good;
        unmasked.problem.opt.masked = false;
        unmasked.mag_num_unmasked.clear(), unmasked.mag_den_unmasked.clear();
        unmasked.final_state.clear(), unmasked.mag_final_state.clear(), unmasked.final_state_flags.clear();
        require_input_error([&] { (void)check_fixture(roundtrip(unmasked), garbage(unmasked)); }, {"does not match its inputs"});
      }
    }
  }
}

TEST_CASE("trust: gradient fixtures verify, and edited gradients, upstream or magnitudes are refused", "[check][trust][gradients]") {
  for (Variant v : variants_where(is_kernel_variant)) {
    for (bool normalize : {false, true}) {
      const io::Fixture good = honest_grad(problem(v, normalize, 3), 7);
      INFO(to_string(v) << (normalize ? " normalized" : ""));
      REQUIRE(good.gradients);
      CHECK(good.reference_bits == 0);  // small heads: exact
      CHECK_NOTHROW(verify_fixture(roundtrip(good)));
      const Edits edits{
          {"one ref_dq element off by 1e-9 relative", [](io::Fixture& f) { f.ref_dq[3] *= 1 + 1e-9; }},
          {"ref_dk of the last token + 1", [](io::Fixture& f) { f.ref_dk.back() += 1; }},
          {"a NaN in ref_dv", [](io::Fixture& f) { f.ref_dv[0] = NAN; }},
          {"mag_dq x 1e10",
           [](io::Fixture& f) {
             for (auto& m : f.mag_dq) m *= 1e10;
           }},
          {"one mag_dk x 2", [](io::Fixture& f) { f.mag_dk[2] = 2 * f.mag_dk[2] + 1; }},
          {"do: one value changed", [](io::Fixture& f) { f.dout[1] = round_to(DType::f32, f.dout[1] + 0.5); }},
          {"dden added",
           [](io::Fixture& f) {
             if (f.dden.empty()) f.dden.assign(f.ref_den.size(), 1.0);
             else f.dden[0] = round_to(DType::f32, f.dden[0] + 1);
           }},
          {"ref_dk halved (one query head's share of the group's sum)",
           [](io::Fixture& f) {
             for (auto& x : f.ref_dk) x *= 0.5;
           }},
      };
      refused_after(good, edits);
    }
  }
}

TEST_CASE("trust: gradient fixtures from an initial state verify, and an edited state gradient or state is refused",
          "[check][trust][gradients]") {
  for (Variant v : variants_where(is_kernel_variant)) {
    for (bool normalize : {false, true}) {
      BatchProblem p = problem(v, normalize, 4);
      // A random f32 state (unused members zero), per sequence and query head.
      std::mt19937_64 rng(11);
      std::normal_distribution<double> N;
      const auto layout = state_layout(p.opt, p.d, p.dv);
      for (Index i = 0; i < p.sequence_count() * p.heads; ++i)
        for (const StatePart& m : layout)
          for (Index j = 0; j < m.size(); ++j) p.state.push_back(m.role == StatePart::Role::unused ? 0.0 : round_to(DType::f32, N(rng)));
      const io::Fixture good = honest_grad(p, 8);
      INFO(to_string(v) << (normalize ? " normalized" : ""));
      REQUIRE(good.ref_dstate.size() == p.state.size());
      CHECK_NOTHROW(verify_fixture(roundtrip(good)));
      CHECK_NOTHROW(verify_inputs(roundtrip(good)));
      size_t big = 0;  // the state gradient's largest element
      for (size_t j = 0; j < good.mag_dstate.size(); ++j)
        if (good.mag_dstate[j] > good.mag_dstate[big]) big = j;
      const Edits edits{
          {"one ref_dstate element off by 1e-9 relative", [big](io::Fixture& f) { f.ref_dstate[big] *= 1 + 1e-9; }},
          {"ref_dstate zero (a dropped state gradient)", [](io::Fixture& f) { std::fill(f.ref_dstate.begin(), f.ref_dstate.end(), 0.0); }},
          {"mag_dstate x 1e10",
           [](io::Fixture& f) {
             for (auto& m : f.mag_dstate) m *= 1e10;
           }},
          {"one mag_dstate element x 2", [big](io::Fixture& f) { f.mag_dstate[big] = 2 * f.mag_dstate[big] + 1; }},
          {"the initial state: one value changed",
           [big](io::Fixture& f) { f.problem.state[big] = round_to(DType::f32, f.problem.state[big] + 1); }},
      };
      refused_after(good, edits);
    }
  }
}

TEST_CASE("gradients: exact tier demands bit equality where every order is exact", "[check][gradients]") {
  // Small integers, no decay, scaling or normalization, integer upstream: every intermediate is an
  // integer below 2^24, so an honest f32 backward is exact in any order (SPEC §9).
  for (const Variant v : variants_where(is_kernel_variant)) {
    BatchProblem p = problem(v, false, 11, 7, 3);
    p.opt.gamma = 1;
    std::mt19937_64 rng(5);
    // Third order grows as (n d |x|^2)^3: entries in [-1, 1] keep its bound below 2^24.
    const int top = v == Variant::hla3 ? 1 : 3;
    std::uniform_int_distribution<int> small(-top, top);
    for (auto* x : {&p.q, &p.k, &p.v})
      for (double& e : *x) e = small(rng);
    Reference ref = compute_reference(p);
    std::vector<double> dout(static_cast<size_t>(p.batch * p.heads * p.n * p.dv));
    for (double& e : dout) e = small(rng);
    ref.grad = compute_gradient_reference(p, ref, dout, {});
    REQUIRE(ref.grad->bits == 0);
    CandidateOutputs c = engine::ours(p, Precision::f32, Form::streaming, 4, DType::f32);
    ours_gradients(p, dout, {}, BackwardForm::streaming, 4, DType::f32, c);
    CheckOptions opt;
    opt.exact_tier = true;
    opt.require_gradients = true;
    const Report good = check::check(p, ref, c, opt);
    INFO(to_string(v) << "\n" << good.text());
    REQUIRE(good.pass);
    for (const auto& g : good.gradients) CHECK(g.exact_tier);
    // One dq element one f32 ulp off: within the bound and rule 3 (two roundings of its value), not exact.
    size_t i = 0;
    while (i < c.dq.size() && c.dq[i] == 0) ++i;
    REQUIRE(i < c.dq.size());
    CandidateOutputs off = c;
    off.dq[i] = std::nextafter(static_cast<float>(off.dq[i]), 1e30f);
    const Report bad = check::check(p, ref, off, opt);
    INFO(bad.text());
    CHECK_FALSE(bad.pass);
    CHECK(bad.gradients[0].exact_mismatches == 1);
    CHECK(bad.gradients[0].over_bound == 0);
    CHECK_FALSE(bad.gradients[0].over_ratio);
    // Outside the tier (opt.exact_tier off) the same candidate passes.
    opt.exact_tier = false;
    CHECK(check::check(p, ref, off, opt).pass);
  }
}

TEST_CASE("gradients: the a priori bound K_g + 1 decides each element", "[check][gradients]") {
  for (bool normalize : {false, true}) {
    const io::Fixture f = roundtrip(honest_grad(problem(Variant::hla2, normalize, 5, 12, 3), 9));
    INFO((normalize ? "normalized" : "raw"));
    // K_g by hand: K_f = (2+1)(12+3)+16 = 61; K_b = K_f + dv + 1 = 65; K_q = K_f + dv + 4 = 68.
    CHECK(gradient_depth_bound(f.problem.opt, 12, 3, 3) == (normalize ? 65 + 68 : 65));
    CandidateOutputs c = engine::ours(f.problem, Precision::f64, Form::chunked_matmul, 4, DType::f64);
    ours_gradients(f.problem, f.dout, f.dden, BackwardForm::chunked_matmul, 4, DType::f64, c);
    CheckOptions opt;
    opt.precision = Precision::f64;
    opt.require_gradients = true;
    const Report good = check_fixture(f, candidate_of(c), opt);
    INFO(good.text());
    REQUIRE(good.pass);
    REQUIRE(good.gradients.size() == 3);
    // γ = 7/8 (depth_bound) lengthens every path by 3·12 + 2·12 + 2·(log(8/7)·12·14 + 2), twice with normalize.
    CHECK(good.gradient_bound ==
          Approx((normalize ? 134 : 66) + (normalize ? 2 : 1) * (3 * 12 + 2 * 12 + 2 * (std::log(8.0 / 7.0) * 12 * 14 + 2))));
    for (const auto& g : good.gradients) CHECK((g.checked && g.scored == g.elements && g.max_score < 4));
    // One dk element moved by s·u·M*, M* its yardstick (the magnitude, with normalize weighed by each token's conditioning).
    const Reference fr = reference_of(f);
    REQUIRE(fr.grad);
    const GradientYardstick y = gradient_yardstick(f.problem, fr, *fr.grad, FormClass::masked, 0x1p-53);
    size_t i = 0;
    for (size_t j = 0; j < f.mag_dk.size(); ++j)
      if (f.mag_dk[j] > f.mag_dk[i]) i = j;
    const double Mstar = y.k[i];
    REQUIRE(std::isfinite(Mstar));
    auto moved = [&](double s) {
      CandidateOutputs m = c;
      m.dk[i] = f.ref_dk[i] + s * 0x1p-53 * Mstar;
      return check_fixture(f, candidate_of(m), opt);
    };
    const double K = good.gradient_bound;
    const Report below = moved(K - 3), above = moved(K + 3);
    INFO(below.text() << above.text());
    CHECK(below.gradients[1].over_bound == 0);  // rule 2 alone passes it; rule 3 does not (below)
    CHECK_FALSE(above.pass);
    CHECK(above.gradients[1].over_bound == 1);
    CHECK(above.text().find("dk: 1 elements exceed the a priori gradient bound") != std::string::npos);
    // Rule 3 alone (normalized too): our own backward forms in f64 set the yardstick; a move just
    // inside limit × max(their worst, the element's floor) passes, just outside fails on the ratio only.
    const GradientRow& gk = good.gradients[1];
    REQUIRE(gk.baseline_applied);
    CHECK(gk.baseline_worst_form.size() > 0);
    const double yard = std::max({gk.baseline_max_score, kFloorRoundings * std::fabs(f.ref_dk[i]) / Mstar, kMinYardstick});
    const double limit = ratio_limit(gk.scored);
    REQUIRE(limit * yard * 1.1 < K);  // rule 3 is tighter than the bound here
    const Report inside = moved(0.9 * limit * yard), outside = moved(1.1 * limit * yard);
    INFO(inside.text() << outside.text());
    CHECK(inside.pass);
    CHECK_FALSE(outside.pass);
    CHECK(outside.gradients[1].over_bound == 0);
    CHECK(outside.gradients[1].over_ratio);
    CHECK(outside.text().find("times the larger of the worst of our own backward forms in f64") != std::string::npos);
    CHECK_FALSE(below.pass);
    CHECK(below.gradients[1].over_ratio);
    // A NaN in dq: non-finite where the reference is finite.
    CandidateOutputs nan = c;
    nan.dq[0] = NAN;
    const Report rn = check_fixture(f, candidate_of(nan), opt);
    CHECK_FALSE(rn.pass);
    CHECK(rn.gradients[0].nonfinite == 1);
    // Without gradients: not checked (PASS), or FAIL when required.
    CandidateOutputs plain = c;
    plain.dq.clear(), plain.dk.clear(), plain.dv.clear();
    opt.require_gradients = false;
    const Report r0 = check_fixture(f, candidate_of(plain), opt);
    CHECK(r0.pass);
    CHECK(r0.text().find("gradients not checked") != std::string::npos);
    opt.require_gradients = true;
    CHECK_FALSE(check_fixture(f, candidate_of(plain), opt).pass);
  }
}

TEST_CASE("trust: the honest candidate passes the honest fixture, garbage fails it", "[check][trust]") {
  const io::Fixture f = roundtrip(honest(problem(Variant::hla2, true, 5, 20, 4)));
  io::Candidate ours = candidate_of(engine::ours(f.problem, Precision::f32, Form::chunked_matmul, 8, DType::f32));
  const Report good = check_fixture(f, ours);
  INFO(good.text());
  CHECK(good.pass);
  const Report bad = check_fixture(f, garbage(f));
  CHECK_FALSE(bad.pass);
  CHECK_FALSE(bad.inconclusive);
}

TEST_CASE("trust: a report never passes on nothing", "[check][trust]") {
  // n = 0: no element at all.
  BatchProblem empty = problem(Variant::la1, false, 1, 0, 2);
  const Report r0 = check::check(empty, CandidateOutputs{{}, {}, DType::f32});
  CHECK_FALSE(r0.pass);
  CHECK(r0.inconclusive);
  CHECK(r0.verdict() == "INCONCLUSIVE");
  CHECK(r0.text().rfind("INCONCLUSIVE", 0) == 0);
  // Every output depends on a NaN input (token 0 of a causal sum reaches all).
  BatchProblem nan = problem(Variant::la1, false, 2, 4, 2);
  nan.heads = nan.kv_heads = 1;
  nan.q.resize(8);
  nan.k[0] = NAN;
  const Reference ref = compute_reference(nan);
  const Report r1 = check::check(nan, ref, CandidateOutputs{std::vector<double>(8, 1.0), {}, DType::f32});
  INFO(r1.text());
  CHECK(r1.scored == 0);
  CHECK(r1.inconclusive);
  CHECK_FALSE(r1.pass);
  // Most elements beyond the output dtype's range: too little scored.
  BatchProblem big = problem(Variant::la1, false, 3, 6, 2);
  for (auto& x : big.v) x = round_to(DType::f32, 3e38);
  for (auto& x : big.q) x = 1;
  for (auto& x : big.k) x = 1;
  const Reference rb = compute_reference(big);
  CandidateOutputs cb{std::vector<double>(rb.out.size(), 0.0), {}, DType::f32};
  for (size_t i = 0; i < cb.out.size(); ++i) cb.out[i] = std::isfinite(round_to(DType::f32, rb.out[i])) ? rb.out[i] : INFINITY;
  const Report r2 = check::check(big, rb, cb);
  INFO(r2.text());
  CHECK(r2.out_of_range > r2.elements / 2);
  CHECK(r2.inconclusive);
  // The reason names the cause, the dtype's limit and what to do instead.
  REQUIRE(r2.reasons.size() == 1);
  CHECK(r2.reasons[0].find(std::to_string(r2.out_of_range) +
                           " have a reference beyond f32's largest finite value 3.40282e+38: store them in a wider dtype") !=
        std::string::npos);
}

TEST_CASE("trust: --verify-inputs demands the recomputed reference", "[check][trust]") {
  const io::Fixture f = roundtrip(honest(problem(Variant::hla3, true, 9)));
  CHECK_NOTHROW(verify_inputs(f));
  io::Fixture g = f;
  g.ref_out[3] = std::nextafter(g.ref_out[3], INFINITY);  // one ulp: within verify_fixture's bound, not the same double
  CHECK_NOTHROW(verify_fixture(g));
  require_input_error([&] { verify_inputs(g); }, {"--verify-inputs", "ref_out[3]"});
  // The budget stops long work with a message.
  BatchProblem long_one = problem(Variant::hla3, false, 4, 200, 8);
  long_one.heads = 64, long_one.kv_heads = 64;
  long_one.q.assign(static_cast<size_t>(64 * 200 * 8), 0.5);
  long_one.k = long_one.q;
  long_one.v = long_one.q;
  require_input_error([&] { (void)compute_reference(long_one, 48, 1e-3); }, {"exceeded its budget"});
}

TEST_CASE("trust: the unmasked-order magnitudes are proven where the verdict reads them", "[check][trust]") {
  const BatchProblem p = problem(Variant::hla2, true, 11, 40, 4);
  const io::Fixture good = roundtrip(honest(p));
  REQUIRE_FALSE(good.mag_num_unmasked.empty());
  io::Fixture bad = good;
  for (double& x : bad.mag_num_unmasked) x *= 1e10;
  require_input_error([&] { verify_fixture(bad); }, {"does not match its inputs", "mag_num_unmasked"});
  CHECK_NOTHROW(verify_fixture(bad, {}, false));
  // An honest candidate (our streaming form in f32): refused on the forged
  // fixture where the state-difference class reads the forged tensor ...
  const io::Candidate c = candidate_of(ours(p, Precision::f32, Form::streaming, 1, DType::f32));
  CheckOptions sd;
  sd.form_class = FormClass::state_difference;
  require_input_error([&] { (void)check_fixture(bad, c, sd); }, {"mag_num_unmasked"});
  // ... and judged exactly as on the honest one by the masked class, which never reads it (also by the moving overload).
  const Report a = check_fixture(good, c);
  CHECK(a.pass);
  CHECK(check_fixture(bad, c).text() == a.text());
  io::Fixture moved = bad;
  io::Candidate cm = c;
  CHECK(check_fixture(std::move(moved), std::move(cm)).text() == a.text());
}

TEST_CASE("trust: every committed golden fixture verifies", "[check][trust][committed]") {
  const std::filesystem::path dir = std::filesystem::path(HLA_SOURCE_DIR) / "fixtures";
  size_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    INFO(e.path().filename().string());
    const io::Fixture f = io::read_fixture(e.path());
    CHECK(f.warnings.empty());
    CHECK_NOTHROW(verify_fixture(f));
    ++n;
  }
  CHECK(n >= 100);
  WARN(n << " golden fixtures verified in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
}

TEST_CASE("trust: shape limits hold without overflow", "[check][trust][limits]") {
  BatchProblem p = problem(Variant::la1, false, 1, 0, 1);
  p.q.clear(), p.k.clear(), p.v.clear();
  p.heads = p.kv_heads = Index{1} << 40;
  require_input_error([&] { p.validate(); }, {"heads = 1099511627776 exceeds the limit"});
  p.heads = p.kv_heads = Index{1} << 20;
  p.batch = Index{1} << 20;
  require_input_error([&] { p.validate(); }, {"batch·heads"});
  p = problem(Variant::la1, false, 1, 0, 1);
  p.n = Index{1} << 30, p.d = Index{1} << 16, p.batch = 1 << 10;
  require_input_error([&] { p.validate(); }, {"elements per tensor"});
}
