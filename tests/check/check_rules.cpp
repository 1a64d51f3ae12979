// The pass rule, rule by rule: each test decides a verdict by one rule alone
// (the others hold, and the test says so), with its numbers pinned from the
// formulas of docs/pass-rule.md worked out by hand; every skip category,
// the rounding allowance of the output dtype, the flags of the reference, and
// single-element perturbations anywhere in (batch, head, token, column, den).
#include "hla/check/check.hpp"
#include "hla/check/fixture.hpp"

#include "../../properties/harness.hpp"
#include "../io/io_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <random>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;
using hla::test::require_input_error;

namespace {

const double u32 = std::ldexp(1.0, -24);

// One problem from explicit values (γ = 1 unless set).
BatchProblem make(Variant v, Index n, Index d, Index dv, std::vector<double> q, std::vector<double> k, std::vector<double> val) {
  BatchProblem p;
  p.opt.variant = v;
  p.dtype = DType::f32;
  p.n = n, p.d = d, p.dv = dv;
  p.q = std::move(q), p.k = std::move(k), p.v = std::move(val);
  return p;
}

// Gaussian inputs rounded to f32, deterministic in the seed.
BatchProblem gaussian(Variant v, Index batch, Index heads, Index kv_heads, Index n, Index d, Index dv, uint64_t seed) {
  BatchProblem p;
  p.opt.variant = v;
  p.opt.gamma = needs_unit_gamma(v) ? Rational(1) : Rational(7, 8);
  p.dtype = DType::f32;
  p.batch = batch, p.heads = heads, p.kv_heads = kv_heads, p.n = n, p.d = d, p.dv = dv;
  p.resize_buffers();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  for (auto* x : {&p.q, &p.k, &p.v})
    for (auto& e : *x) e = round_to(DType::f32, N(rng));
  return p;
}

CandidateOutputs exactly(const Reference& ref, bool den = false) {
  return CandidateOutputs{ref.out, den ? ref.den : std::vector<double>{}, DType::f64, DType::f64};
}

bool mentions(const Report& r, const std::string& needle) {
  for (const auto& why : r.reasons)
    if (why.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("pinned: the a priori depth K = (p+1)(n+d)+16 and the bound K+1 on fixed shapes", "[check][pinned]") {
  // By hand: la1 (p = 1), n = 1, d = 1: 2·2 + 16 = 20; hla2 (p = 2), n = 37, d = 8: 3·45 + 16 = 151;
  // ahla, n = 40, d = 8: 3·48 + 16 = 160; hla3 and hla3_paper (p = 3), n = 8, d = 4: 4·12 + 16 = 64;
  // hla2, n = 4096, d = 64: 3·4160 + 16 = 12496.
  CHECK(depth_bound(Variant::la1, 1, 1) == 20);
  CHECK(depth_bound(Variant::hla2, 37, 8) == 151);
  CHECK(depth_bound(Variant::ahla, 40, 8) == 160);
  CHECK(depth_bound(Variant::hla3, 8, 4) == 64);
  CHECK(depth_bound(Variant::hla3_paper, 8, 4) == 64);
  CHECK(depth_bound(Variant::hla2, 4096, 64) == 12496);
  // The report's bound: K + 1 for the longest sequence, not the packed length.
  BatchProblem one = make(Variant::la1, 1, 1, 1, {1}, {1}, {1});
  CHECK(check::check(one, exactly(compute_reference(one))).bound == 21);
  BatchProblem packed = gaussian(Variant::la1, 1, 1, 1, 12, 2, 2, 5);
  packed.offsets = {0, 5, 12};  // longest sequence 7: K = 2·(7+2) + 16 = 34
  // γ = 7/8 adds (p+1)·n + p·n + p·(|log γ|·n·(n+2) + 2) (p = 1, n = 7): the multiplications
  // by γ, γ's own rounding, decay in log space.
  const double L = std::log(8.0 / 7.0);
  const Report r = check::check(packed, exactly(compute_reference(packed)));
  CHECK(r.bound == Approx(35 + 2 * 7 + 7 + (L * 7 * 9 + 2)));
  BatchProblem hla3 = gaussian(Variant::hla3, 1, 2, 1, 8, 4, 4, 6);  // K = 4·12 + 16 = 64, + 4·8 + 3·8 + 3·(L·8·10 + 2)
  CHECK(check::check(hla3, exactly(compute_reference(hla3))).bound == Approx(65 + 4 * 8 + 3 * 8 + 3 * (L * 8 * 10 + 2)));
  // The classes (SPEC §7): flat adds the literal terms of the longest sum, flat:W those of a chunk;
  // hla2 masked n = 37, d = 8, γ = 1: 151 + 37·38/2 = 854, flat:16: 151 + 16·17/2 = 287.
  Options o;
  o.variant = Variant::hla2;
  CHECK(depth_bound(o, 37, 8, FormClass::masked) == 151);
  CHECK(depth_bound(o, 37, 8, FormClass::state_difference) == 151);
  CHECK(depth_bound(o, 37, 8, FormClass::flat()) == 854);
  CHECK(depth_bound(o, 37, 8, FormClass::flat(16)) == 287);
  CHECK(depth_bound(o, 37, 8, FormClass::flat(64)) == 854);  // a chunk longer than the sequence: the sequence
  o.masked = false;                                          // unmasked: 37² pairs
  CHECK(depth_bound(o, 37, 8, FormClass::flat()) == 151 + 37 * 37);
  o.variant = Variant::hla3, o.masked = true;  // Σ_{u≤n} u² = n(n+1)(2n+1)/6: 8·9·17/6 = 204
  CHECK(depth_bound(o, 8, 4, FormClass::flat()) == 64 + 204);
  o.variant = Variant::la1;
  CHECK(depth_bound(o, 8, 4, FormClass::flat()) == 40 + 8);  // 2·(8 + 4) + 16 + 8 terms
}

TEST_CASE("pinned: rule 3's limit R(N) = max(4, 13·(64/N)^(1/4))", "[check][pinned]") {
  CHECK(ratio_limit(64) == 13);  // (64/64)^(1/4) = 1
  // 13·(64/N)^(1/4) = 4 at N = 64·(13/4)^4 = 7140.25: the floor 4 from N = 7141 on.
  CHECK(ratio_limit(7141) == 4);
  CHECK(ratio_limit(7140) > 4);
  CHECK(ratio_limit(7140) < 4 + 1e-4);
  CHECK(ratio_limit(100000) == 4);
  // 13·(1/64)^(1/4) = 13/(2√2) and 13·64^(1/4) = 26√2, within a few ulps of pow's rounding.
  CHECK(std::fabs(ratio_limit(4096) - 13 / (2 * std::sqrt(2.0))) <= 1e-14 * 5);
  CHECK(std::fabs(ratio_limit(1) - 26 * std::sqrt(2.0)) <= 1e-14 * 37);
  CHECK(ratio_limit(0) == ratio_limit(1));
}

TEST_CASE("pinned: normalize divides by den + ε (add) or sign(den)·max(|den|, ε) (clamp)", "[check][pinned]") {
  // la1, γ = 1, q = 1, k = (-1/8, 1/4, -17/8, 2), v = (2, 3, 5, 7), ε = 1/4:
  // den = (-1/8, 1/8, -2, 0), num = (-1/4, 1/2, -81/8, 31/8). By hand:
  //   add:   D = (1/8, 3/8, -7/4, 1/4),    out = (-2, 4/3, 81/14, 31/2);
  //   clamp: D = (-1/4, 1/4, -2, 1/4)  (sign(0) = +1),  out = (1, 2, 81/16, 31/2).
  BatchProblem p = make(Variant::la1, 4, 1, 1, {1, 1, 1, 1}, {-0.125, 0.25, -2.125, 2}, {2, 3, 5, 7});
  p.opt.normalize = true;
  p.opt.eps = Rational(1, 4);
  const std::vector<double> add{-2, 4.0 / 3, 81.0 / 14, 15.5}, clamp{1, 2, 81.0 / 16, 15.5};
  CHECK(compute_reference(p).out == add);
  CHECK(engine::ours(p, Precision::f64, Form::streaming).out == add);
  p.opt.eps_mode = EpsMode::clamp;
  CHECK(compute_reference(p).out == clamp);
  CHECK(engine::ours(p, Precision::f64, Form::streaming).out == clamp);
  CHECK(compute_reference(p).den == std::vector<double>{-0.125, 0.125, -2, 0});
}

TEST_CASE("rule 2 alone: a score just above K + 1 fails, just below passes", "[check][rule]") {
  // la1, one token, q = k = v = 1: num = 1 = M exactly, K + 1 = 21, our
  // orders are exact (baseline 0), the floor is 2·|num|/M = 2, N = 1 scored
  // element: R(1) = 26√2 ≈ 36.8. A candidate 1 + s·u (f32 declared, f64
  // output: no rounding allowance to speak of) scores s.
  const BatchProblem p = make(Variant::la1, 1, 1, 1, {1}, {1}, {1});
  const Reference ref = compute_reference(p);
  auto judge = [&](double s) {
    return check::check(p, ref, CandidateOutputs{{1 + s * u32}, {}, DType::f64}, {.precision = Precision::f32});
  };
  const Report over = judge(22);
  INFO(over.text());
  CHECK_FALSE(over.pass);
  CHECK(over.bound == 21);
  CHECK(over.over_bound == 1);
  CHECK(over.nonfinite == 0);
  CHECK(over.exact_mismatches == 0);
  CHECK(over.baseline_max_score == 0);
  CHECK(over.noise_floor == 2);
  CHECK(std::fabs(over.baseline_ratio - 11) < 1e-6);  // 22 / 2: within rule 3
  CHECK(over.baseline_ratio <= over.ratio_limit);
  REQUIRE(over.reasons.size() == 1);
  CHECK(mentions(over, "exceed the a priori bound 21"));
  const Report under = judge(20.5);  // between K and K + 1: the +1 is there
  INFO(under.text());
  CHECK(under.pass);
  CHECK(under.over_bound == 0);
}

TEST_CASE("flat classes on a head too long for our flat orders: the nested bar times the path ratio", "[check][rule]") {
  // hla2, n = 600, d = 4: flat's literal orders would add 600·(600·601/2)·5 > 2^28 term·columns, so none runs
  // (flat:64's chunked_pairs/64 does, 600·2080·5). The
  // bar is then our nested orders' worst times flat_path_ratio: honest kernels pass, a wrong one (the paper's
  // chunked form without its carry × chunk term, E5) fails in every class, not only by a bound that the flat
  // class's n²/2 terms make vacuous.
  const BatchProblem p = gaussian(Variant::hla2, 1, 1, 1, 600, 4, 4, 31);
  const Reference ref = compute_reference(p);
  const CandidateOutputs honest = engine::ours(p, Precision::f32, Form::chunked_matmul, 32, DType::f32);
  const CandidateOutputs wrong = engine::ours_paper(p, Precision::f32, PaperForm::E5_hla2_chunked, 32, DType::f32);
  const Report masked = check::check(p, ref, honest, {.precision = Precision::f32});
  const auto pairs = baseline_forms(p, FormClass::flat(64));
  CHECK(std::any_of(pairs.begin(), pairs.end(), [](const BaselineForm& f) { return f.form == Form::chunked_pairs && f.chunk == 64; }));
  for (const FormClass cls : {FormClass::flat()}) {
    const auto forms = baseline_forms(p, cls);
    CHECK(std::none_of(forms.begin(), forms.end(),
                       [](const BaselineForm& f) { return f.form == Form::literal || f.form == Form::chunked_pairs; }));
    const double k = flat_path_ratio(p.opt, 600, 4, cls);
    CHECK(k == Approx(1 + 600.0 * 601 / 2 / (3 * (600 + 4) + 16)));  // 1 + T(n) / the nested K
    const Report ok = check::check(p, ref, honest, {.precision = Precision::f32, .form_class = cls});
    INFO(ok.text());
    CHECK(ok.pass);
    CHECK(ok.baseline_max_score == Approx(masked.baseline_max_score * k));
    CHECK(ok.baseline_worst_form.find("longest path over the nested one") != std::string::npos);
    const Report bad = check::check(p, ref, wrong, {.precision = Precision::f32, .form_class = cls});
    INFO(bad.text());
    CHECK_FALSE(bad.pass);
    CHECK(bad.baseline_ratio > bad.ratio_limit);
  }
}

TEST_CASE("rule 3: a score of at most one rounding never fails it, even where our orders are exact", "[check][rule]") {
  // la1, n = 2, d = 1: out_1 = q_1k_0v_0 + q_1k_1v_1 = 3 − 3 = 0 exactly, magnitude 6; every order of ours is
  // exact here (baseline 0) and the element's floor is 0: without the fixed yardstick 1/4 any error failed.
  const BatchProblem p = make(Variant::la1, 2, 1, 1, {1, 1}, {1, -1}, {3, 3});
  const Reference ref = compute_reference(p);
  REQUIRE(ref.out[1] == 0);
  REQUIRE(ref.mag_num[1] == 6);
  auto judge = [&](double s) {
    CandidateOutputs c = exactly(ref);
    c.out[1] = s * u32 * 6;
    return check::check(p, ref, c, {.precision = Precision::f32});
  };
  const Report one = judge(1), tenth = judge(0.01), more = judge(1.2 * one.ratio_limit * kMinYardstick);
  INFO(one.text() << more.text());
  CHECK(one.baseline_max_score == 0);
  CHECK(one.pass);
  CHECK(tenth.pass);
  CHECK(std::fabs(one.baseline_ratio - 1 / kMinYardstick) < 1e-9);
  CHECK_FALSE(more.pass);  // beyond R(N)·(1/4) in units of u·M: rule 3 still fails it
  CHECK(more.over_bound == 0);
}

TEST_CASE("rule 3 alone: an error within the a priori bound but far beyond our orders fails", "[check][rule]") {
  // la1, 8 heads × 64 tokens × 16 columns = 8192 scored elements: R = 4.
  // K + 1 = 2·(64 + 16) + 16 + 1 = 177, + 2·64 + 64 + (log(8/7)·64·66 + 2) for γ = 7/8. One element off by 150 u·M: within
  // rule 2, and 150 / max(our worst, floor ≤ 2) ≫ 4·R whatever our worst is
  // below 9 (f32 orders on n = 64 err by a few units).
  const BatchProblem p = gaussian(Variant::la1, 1, 8, 8, 64, 16, 16, 21);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = exactly(ref);
  const size_t i = p.out_index(0, 3, 40, 5);
  c.out[i] = ref.out[i] + 150 * u32 * ref.mag_num[i];
  const Report r = check::check(p, ref, c, {.precision = Precision::f32});
  INFO(r.text());
  CHECK_FALSE(r.pass);
  CHECK(r.scored == 8192);
  CHECK(r.ratio_limit == 4);
  CHECK(r.bound == Approx(177 + 3 * 64 + std::log(8.0 / 7.0) * 64 * 66 + 2));
  CHECK(r.over_bound == 0);
  CHECK(r.nonfinite == 0);
  CHECK(r.baseline_max_score < 9);
  CHECK(r.baseline_ratio > 16);
  REQUIRE(r.reasons.size() == 1);
  CHECK(mentions(r, "the worst of our honest evaluation orders"));
  CHECK((r.ratio_element.h == 3 && r.ratio_element.t == 40 && r.ratio_element.c == 5));
  // Half our worst order's own score there: within rule 3, it passes.
  c.out[i] = ref.out[i] + 0.5 * r.baseline_max_score * u32 * ref.mag_num[i];
  const Report ok = check::check(p, ref, c, {.precision = Precision::f32});
  INFO(ok.text());
  CHECK(ok.pass);
}

TEST_CASE("rule 3: the bar is the worst of every one of our honest orders", "[check][rule]") {
  // Recomputed here form by form through the public API: the report's
  // baseline is the maximum over baseline_forms() (features reversed where a
  // form says so), and names the form that attains it.
  const BatchProblem p = gaussian(Variant::hla2, 1, 2, 1, 40, 8, 8, 22);
  const Reference ref = compute_reference(p);
  const Report r = check::check(p, ref, engine::ours(p, Precision::f32, Form::chunked_matmul, 8, DType::f32));
  double worst = 0;
  std::string name;
  for (const BaselineForm& f : baseline_forms(p)) {
    BatchProblem x = p;
    if (f.reversed_features)
      for (auto* m : {&x.q, &x.k})
        for (size_t row = 0; row < m->size(); row += static_cast<size_t>(x.d))
          std::reverse(m->begin() + static_cast<std::ptrdiff_t>(row), m->begin() + static_cast<std::ptrdiff_t>(row) + x.d);
    const Report o =
        check::check(p, ref, engine::ours(x, Precision::f32, f.form, f.chunk, DType::f64, f.log_decay), {.precision = Precision::f32});
    if (o.max_score > worst) worst = o.max_score, name = f.name();
  }
  INFO(r.text());
  CHECK(r.baseline_max_score == worst);
  CHECK(r.baseline_worst_form == name);
  CHECK(baseline_forms(p).size() >= 7);
}

TEST_CASE("rule 4 alone: exact tier, one ulp off in one element", "[check][rule][exact]") {
  BatchProblem p = gaussian(Variant::hla2, 1, 2, 1, 12, 4, 4, 23);
  std::mt19937_64 rng(3);
  for (auto* x : {&p.q, &p.k, &p.v})
    for (auto& e : *x) e = static_cast<double>(static_cast<int>(rng() % 5) - 2);
  p.opt.gamma = 1;
  const Reference ref = compute_reference(p);
  REQUIRE(ref.bits == 0);
  CandidateOutputs c{ref.out, {}, DType::f32};
  const size_t i = p.out_index(0, 1, 11, 3);  // last head, token, column
  REQUIRE(c.out[i] != 0);
  c.out[i] = std::nextafter(static_cast<float>(c.out[i]), 1e30f);
  const Report r = check::check(p, ref, c, {.precision = Precision::f32, .exact_tier = true});
  INFO(r.text());
  CHECK_FALSE(r.pass);
  CHECK(r.exact_mismatches == 1);
  CHECK(r.over_bound == 0);
  CHECK(r.nonfinite == 0);
  CHECK(r.baseline_ratio <= r.ratio_limit);
  REQUIRE(r.reasons.size() == 1);
  CHECK(mentions(r, "exact tier demands bit equality"));
  // check_fixture applies the fixture's own exact_tier.
  const io::Fixture f = make_fixture(p, ref, {"unit", "exact", 1, true});
  const Report rf = check_fixture(f, candidate_of(c), {.precision = Precision::f32});
  CHECK_FALSE(rf.pass);
  CHECK(rf.exact_mismatches == 1);
}

TEST_CASE("rule 1: a non-finite value where the reference is finite is named", "[check][rule]") {
  // (A non-finite value also scores +inf, so rule 2 fails with it: rule 1 is
  // the reason that says what happened.)
  const BatchProblem p = gaussian(Variant::ahla, 1, 1, 1, 6, 2, 2, 24);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = exactly(ref);
  c.out[p.out_index(0, 0, 5, 1)] = INFINITY;
  const Report r = check::check(p, ref, c);
  INFO(r.text());
  CHECK_FALSE(r.pass);
  CHECK(r.nonfinite == 1);
  CHECK(mentions(r, "1 non-finite values where the reference is finite"));
}

TEST_CASE("rule 2: single-element perturbations anywhere fail, at that element", "[check][rule][perturb]") {
  // B = 2, H = 3 over Hkv = 1, n = 7, dv = 3, with den: each case moves one
  // element — (batch, head, token, column or den) drawn from the seed, after
  // the corners (last batch, head, token, column, den) — by 4(K+1) u·M.
  const BatchProblem p = gaussian(Variant::hla2, 2, 3, 1, 7, 3, 3, 25);
  const Reference ref = compute_reference(p);
  const double K = depth_bound(p.opt.variant, p.n, p.d);
  const Report clean = check::check(p, ref, exactly(ref, true));
  INFO(clean.text());
  REQUIRE(clean.pass);
  struct Pos {
    Index b, h, t, c;
  };
  std::vector<Pos> pos{{1, 2, 6, 2}, {1, 2, 6, -1}, {1, 0, 0, 0}, {0, 2, 0, 0}, {0, 0, 6, 0}, {0, 0, 0, 2}, {0, 0, 0, -1}};
  const uint64_t seed = std::getenv("HLA_PERTURB_SEED") ? std::strtoull(std::getenv("HLA_PERTURB_SEED"), nullptr, 10) : 20261201;
  std::cout << "[perturb] seed " << seed << "; reproduce: HLA_PERTURB_SEED=" << seed << " " << hla::test::argv0
            << " \"rule 2: single-element perturbations anywhere fail, at that element\"" << std::endl;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 40; ++i)
    pos.push_back(
        {static_cast<Index>(rng() % 2), static_cast<Index>(rng() % 3), static_cast<Index>(rng() % 7), static_cast<Index>(rng() % 4) - 1});
  for (const Pos& e : pos) {
    CandidateOutputs c = exactly(ref, true);
    double& x = e.c < 0 ? c.den[p.den_index(e.b, e.h, e.t)] : c.out[p.out_index(e.b, e.h, e.t, e.c)];
    const double M = e.c < 0 ? ref.mag_den[p.den_index(e.b, e.h, e.t)] : ref.mag_num[p.out_index(e.b, e.h, e.t, e.c)];
    x += 4 * (K + 1) * u32 * M;
    const Report r = check::check(p, ref, c);
    INFO("seed " << seed << ": batch " << e.b << " head " << e.h << " token " << e.t
                 << (e.c < 0 ? " den" : " column " + std::to_string(e.c)) << "\n"
                 << r.text());
    CHECK_FALSE(r.pass);
    CHECK(r.over_bound == 1);
    REQUIRE(!r.worst.empty());
    CHECK((r.worst.front().b == e.b && r.worst.front().h == e.h && r.worst.front().t == e.t && r.worst.front().c == e.c));
  }
}

TEST_CASE("skip: the underflow regime is not scored, and more than half unscored is INCONCLUSIVE", "[check][skip]") {
  // la1, 4 batch entries of one token: q = k = v = 2^-70 gives num = M = 2^-210,
  // u·M = 2^-234 below f32's smallest normal 2^-126: underflow, not scored.
  auto problem = [](int tiny) {
    std::vector<double> x;
    for (int b = 0; b < 4; ++b) x.push_back(b < tiny ? std::ldexp(1.0, -70) : 1.0);
    BatchProblem p = make(Variant::la1, 1, 1, 1, x, x, x);
    p.batch = 4;
    return p;
  };
  const BatchProblem half = problem(2);
  const Report r2 = check::check(half, exactly(compute_reference(half)), {.precision = Precision::f32});
  INFO(r2.text());
  CHECK(r2.underflow == 2);
  CHECK(r2.scored == 2);
  CHECK(r2.pass);  // exactly half unscored: still a verdict
  CHECK_FALSE(r2.inconclusive);
  const BatchProblem most = problem(3);
  const Report r3 = check::check(most, exactly(compute_reference(most)), {.precision = Precision::f32});
  INFO(r3.text());
  CHECK(r3.underflow == 3);
  CHECK(r3.scored == 1);
  CHECK_FALSE(r3.pass);
  CHECK(r3.inconclusive);
  REQUIRE(r3.reasons.size() == 1);
  CHECK(r3.reasons[0].find("3 underflow (u·M below f32's smallest normal): test at a larger scale") != std::string::npos);
  // Two causes, the more frequent named first: two underflow, one reference beyond f32's range (q = k = 2, v = 3e38: 1.2e39).
  BatchProblem mixed = problem(2);
  mixed.q[2] = mixed.k[2] = 2, mixed.v[2] = round_to(DType::f32, 3e38);
  const Reference rm = compute_reference(mixed);
  const Report r4 = check::check(mixed, rm, CandidateOutputs{rm.out, {}, DType::f32}, {.precision = Precision::f32});
  INFO(r4.text());
  CHECK((r4.out_of_range == 1 && r4.underflow == 2 && r4.inconclusive));
  REQUIRE(r4.reasons.size() == 1);
  CHECK(r4.reasons[0].find("Of them, 2 underflow (u·M below f32's smallest normal): test at a larger scale; 1 have a reference "
                           "beyond f32's largest finite value 3.40282e+38: store them in a wider dtype") != std::string::npos);
}

TEST_CASE("skip: a non-finite output within K·u·M of the pole is accepted, beyond u·M too", "[check][skip]") {
  // la1 normalized (add), ε = 1/4. Token 0: den = q·k = -1/4 + 2^-22, so
  // D = den + ε = 2^-22, M_den + ε ≈ 1/2: D is 8 u·(M_den + ε) from the pole —
  // within K = 2·(3+1) + 16 = 24 of them, though not within one.
  BatchProblem p = make(Variant::la1, 3, 1, 1, {1, 1, 1}, {-0.25 + std::ldexp(1.0, -22), 1, 1}, {1, 1, 1});
  p.opt.normalize = true;
  p.opt.eps = Rational(1, 4);
  const Reference ref = compute_reference(p);
  const Report r =
      check::check(p, ref, CandidateOutputs{{-INFINITY, ref.out[1], ref.out[2]}, {}, DType::f32}, {.precision = Precision::f32});
  INFO(r.text());
  CHECK(r.pass);
  CHECK(r.at_pole == 1);
  CHECK(r.scored == 2);
}

TEST_CASE("skip: clamp mode near the pole accepts either sign of the divisor", "[check][skip]") {
  // la1 clamp, ε = 1/4, tokens q = (1, 1), k = (1, -1 + 2^-22), v = (1, -1).
  // Token 1: den = 2^-22, within K·u·M_den (K = 22, M_den ≈ 2) of 0 but not
  // within u·M_den; num = 2 - 2^-22 = M_num. A kernel whose den rounds to
  // the other side divides by -ε: its -num/ε is as right as num/ε.
  BatchProblem p = make(Variant::la1, 2, 1, 1, {1, 1}, {1, -1 + std::ldexp(1.0, -22)}, {1, -1});
  p.opt.normalize = true;
  p.opt.eps_mode = EpsMode::clamp;
  p.opt.eps = Rational(1, 4);
  const Reference ref = compute_reference(p);
  REQUIRE(ref.out[1] == 4 * (2 - std::ldexp(1.0, -22)));
  auto judge = [&](double o1) {
    return check::check(p, ref, CandidateOutputs{{ref.out[0], o1}, {}, DType::f32}, {.precision = Precision::f32});
  };
  const Report flipped = judge(-ref.out[1]);
  INFO(flipped.text());
  CHECK(flipped.pass);
  CHECK(flipped.scored == 2);
  CHECK(judge(ref.out[1]).pass);
  CHECK_FALSE(judge(123.0).pass);
}

TEST_CASE("rounding allowance: one rounding into the output dtype, not two", "[check][rounding]") {
  // la1, q = k = 1, v = 1 + 3·2^-9 (an f32 value): num = 1 + 3·2^-9. Its bf16
  // neighbours are 1 + 2^-7 (nearest, 2^-9 away) and 1 (3·2^-9 away). With
  // precision f32 declared and out stored in bf16, one rounding (u_bf16·|x| =
  // 2^-8·|x|) is allowed on top: the nearest passes; the far one is 2^-9 beyond
  // that, 2^14 f32 units: it fails (two roundings, 2^-7·|x|, would pass it).
  const double x = 1 + 3 * std::ldexp(1.0, -9);
  const BatchProblem p = make(Variant::la1, 1, 1, 1, {1}, {1}, {x});
  const Reference ref = compute_reference(p);
  REQUIRE(ref.out[0] == x);
  auto judge = [&](double c) { return check::check(p, ref, CandidateOutputs{{c}, {}, DType::bf16}, {.precision = Precision::f32}); };
  REQUIRE(round_to(DType::bf16, x) == 1 + std::ldexp(1.0, -7));
  const Report nearest = judge(1 + std::ldexp(1.0, -7));
  INFO(nearest.text());
  CHECK(nearest.pass);
  CHECK(nearest.max_score == 0);
  const Report far = judge(1.0);
  INFO(far.text());
  CHECK_FALSE(far.pass);
  CHECK(far.over_bound == 1);
  // Normalized (ε = 2^-30): the residual |o·D − num| gets the same allowance, |o|·u_bf16·|D|.
  BatchProblem pn = p;
  pn.opt.normalize = true;
  pn.opt.eps = Rational(1, 1 << 30);
  const Reference rn = compute_reference(pn);
  const Report nn =
      check::check(pn, rn, CandidateOutputs{{round_to(DType::bf16, rn.out[0])}, {}, DType::bf16}, {.precision = Precision::f32});
  INFO(nn.text());
  CHECK(nn.pass);
  CHECK(nn.max_score == 0);
}

TEST_CASE("rule 2 for normalized outputs: the residual is judged against M_num + |o|·(M_den + ε)", "[check][rule]") {
  // la1, q = k = v = 1, ε = 1/4: num = den = 1 = M_num = M_den, o = 0.8, and the
  // residual's magnitude is 1 + 0.8·(1 + 1/4) = 2. A candidate whose residual
  // o·(den + ε) − num is 40 u scores 20 ≤ K + 1 = 21 and passes; judged
  // against M_num + |o|·M_den = 1.8 it would score 22.2 and fail.
  BatchProblem p = make(Variant::la1, 1, 1, 1, {1}, {1}, {1});
  p.opt.normalize = true;
  p.opt.eps = Rational(1, 4);
  const Reference ref = compute_reference(p);
  const double c = (1 + 40 * u32) / 1.25;  // residual c·1.25 − 1 = 40u up to one rounding of c
  const Report r = check::check(p, ref, CandidateOutputs{{c}, {}, DType::f64}, {.precision = Precision::f32});
  INFO(r.text());
  CHECK(r.pass);
  // Exactly 40 u / (u·(1 + |o|·1.25)) with |o|·1.25 = 1 + 40 u, to rounding.
  CHECK(std::fabs(r.max_score - 40 / (2 + 40 * u32)) < 1e-9);
  const Report bad = check::check(p, ref, CandidateOutputs{{(1 + 44 * u32) / 1.25}, {}, DType::f64}, {.precision = Precision::f32});
  CHECK_FALSE(bad.pass);  // 22 > 21
}

TEST_CASE("flags: 'not certified to f64' on a cancellation, 'ill-conditioned' at the pole (binary128 path)", "[check][flags]") {
  // la1, q = (1, 1), k = (1, -1), v = (1, 1): num_1 = den_1 = 1 - 1 = 0 exactly,
  // from terms of magnitude 2. Binary128 carries an error bound of K·2^-112·2
  // around 0, which straddles the rounding boundaries of 0: not certified.
  // Token 0 (1, exactly) is certified. Exact rationals certify everything.
  const BatchProblem p = make(Variant::la1, 2, 1, 1, {1, 1}, {1, -1}, {1, 1});
  const Reference f113 = compute_reference(p, /*exact_max_n=*/0);
  REQUIRE(f113.bits == 113);
  CHECK(f113.flags == std::vector<uint8_t>{0, kUncertified});
  CHECK(f113.den_flags == std::vector<uint8_t>{0, kUncertified});
  const Reference exact = compute_reference(p);
  REQUIRE(exact.bits == 0);
  CHECK(exact.flags == std::vector<uint8_t>{0, 0});
  CHECK(exact.den_flags == std::vector<uint8_t>{0, 0});
  // Normalized, ε = 1/4, k = (1, -5/4): den_1 = -1/4 exactly, den_1 + ε = 0:
  // no error bound on the quotient: ill-conditioned and not certified (3);
  // den_1 itself is exact and certified.
  BatchProblem n = make(Variant::la1, 2, 1, 1, {1, 1}, {1, -1.25}, {1, 1});
  n.opt.normalize = true;
  n.opt.eps = Rational(1, 4);
  const Reference rn = compute_reference(n, 0);
  CHECK(rn.flags == std::vector<uint8_t>{0, kUncertified | kIllConditioned});
  CHECK(rn.den_flags == std::vector<uint8_t>{0, 0});
}

TEST_CASE("flags: --verify-inputs demands the flags a recomputation sets", "[check][flags][trust]") {
  // n = 50 > 48: binary128 both when generated and when verified. Pairs of
  // opposing keys with equal values cancel exactly at every odd token.
  const Index n = 50;
  std::vector<double> q(n, 1), k(n), v(n, 1);
  for (Index t = 0; t < n; ++t) k[static_cast<size_t>(t)] = t % 2 ? -static_cast<double>(t / 2 + 1) : static_cast<double>(t / 2 + 1);
  const BatchProblem p = make(Variant::la1, n, 1, 1, q, k, v);
  const Reference ref = compute_reference(p);
  REQUIRE(ref.bits == 113);
  REQUIRE(ref.flags[1] == kUncertified);
  const io::Fixture f = make_fixture(p, ref, {"unit", "flags", 1, false});
  CHECK(f.flags.size() == static_cast<size_t>(n));
  CHECK_NOTHROW(verify_inputs(f));
  io::Fixture no_flags = f, no_den_flags = f;
  no_flags.flags.clear();
  require_input_error([&] { verify_inputs(no_flags); }, {"--verify-inputs", " flags[1] = 0, recomputed 1"});
  no_den_flags.den_flags.clear();
  require_input_error([&] { verify_inputs(no_den_flags); }, {"--verify-inputs", "den_flags[1] = 0, recomputed 1"});
}

TEST_CASE("flags: a NaN input anywhere puts every head on the binary128 path", "[check][flags]") {
  // Two heads with their own keys: head 0 has a NaN at token 1, head 1 the
  // exact cancellation above (num_1 = 0 from terms of magnitude 2). The
  // reference is exact only when every input is finite; here head 1 too is
  // evaluated in binary128, where 0 is not certified.
  BatchProblem p = make(Variant::la1, 2, 1, 1, {1, 1, 1, 1}, {1, NAN, 1, -1}, {1, 1, 1, 1});
  p.heads = p.kv_heads = 2;
  const Reference ref = compute_reference(p);
  CHECK(ref.bits == 113);
  CHECK(ref.flags[p.out_index(0, 1, 0, 0)] == 0);
  CHECK(ref.flags[p.out_index(0, 1, 1, 0)] == kUncertified);
  CHECK(std::isnan(ref.out[p.out_index(0, 0, 1, 0)]));
}

TEST_CASE("trust: verify_fixture's bound is (K+2)·2^-53·M, no wider", "[check][trust]") {
  // la1 on small integers: the float64 evaluation is exact, so a stored
  // reference moved by δ differs from it by δ. K = 2·(3+1) + 16 = 24.
  const BatchProblem p = make(Variant::la1, 3, 1, 1, {1, 2, 1}, {1, 1, -1}, {2, 1, 1});
  const Reference ref = compute_reference(p);
  const io::Fixture f = make_fixture(p, ref, {"unit", "verify", 1, false});
  const double c = 26 * std::ldexp(1.0, -53) * ref.mag_num[2];
  io::Fixture near = f, far = f;
  near.ref_out[2] += 0.5 * c;
  far.ref_out[2] += 2 * c;
  REQUIRE(near.ref_out[2] != f.ref_out[2]);
  CHECK_NOTHROW(verify_fixture(near));
  require_input_error([&] { verify_fixture(far); }, {"does not match its inputs", "ref_out[0,0,2,0]"});
}

TEST_CASE("state difference: judged against the unmasked-order magnitude, with our subtracting forms, and hinted", "[check][class]") {
  // hla2 masked, d = 1, γ = 1, q = (1, 1), k = (2^-6, 2^6), v = (1, 0). At t = 1
  // the masked sum is 2·2^-12, the unmasked one adds 2^12: the paper's state
  // (S·C − G) loses the masked terms in f32. Judged as masked it fails by 2^24
  // units; as state_difference (magnitude 2^12) it passes, our subtracting
  // form being as far off; a masked verdict names the other class as a hint.
  BatchProblem p = make(Variant::hla2, 2, 1, 1, {1, 1}, {std::ldexp(1.0, -6), std::ldexp(1.0, 6)}, {1, 0});
  const Reference ref = compute_reference(p);
  REQUIRE(ref.mag_num_sd[1] > 1e3 * ref.mag_num[1]);
  const CandidateOutputs c = engine::ours(p, Precision::f32, Form::streaming_paper_state, 64, DType::f32);
  const Report masked = check::check(p, ref, c, {.precision = Precision::f32});
  INFO(masked.text());
  CHECK_FALSE(masked.pass);
  CHECK(masked.state_difference_would_pass);
  CHECK(mentions(masked, "hint: judged as CheckOptions::form_class = FormClass::state_difference"));
  const Report sd = check::check(p, ref, c, {.precision = Precision::f32, .form_class = FormClass::state_difference});
  INFO(sd.text());
  CHECK(sd.pass);
  CHECK(sd.max_score <= 2);
  // The bar of the state-difference class includes our subtracting form; the masked class's does not.
  auto has_paper_state = [&](FormClass cls) {
    for (const BaselineForm& f : baseline_forms(p, cls))
      if (f.form == Form::streaming_paper_state) return true;
    return false;
  };
  CHECK(has_paper_state(FormClass::state_difference));
  CHECK_FALSE(has_paper_state(FormClass::masked));
}

TEST_CASE("tensor-core precisions: rule 3's orders round their products' operands at every size", "[check][rule]") {
  // hla2, 2 × 2 heads of 40 tokens, d = 8, bf16 inputs (small: our library's f32 orders run, and the fast engine's
  // chunked ones). Declared bf16+f32 (tf32), the bar comes from a chunked order whose operands are rounded to bf16
  // (tf32): in the format's unit far above what f32 alone errs (2^-16 (2^-13) of an f32 order's score). A kernel so
  // rounding passes; the same values declared f32 fail rule 2: the declaration, not a loose bar, passes them.
  BatchProblem p = gaussian(Variant::hla2, 2, 2, 1, 40, 8, 8, 12);
  p.dtype = DType::bf16;
  for (auto* x : {&p.q, &p.k, &p.v})
    for (auto& e : *x) e = round_to(DType::bf16, e);
  const Reference ref = compute_reference(p);
  const Report f32 = check::check(p, ref, exactly(ref), {.precision = Precision::f32});
  for (const Precision tc : {Precision::bf16_f32, Precision::tf32}) {
    const double to_unit = unit_roundoff(Precision::f32) / unit_roundoff(tc);
    const CandidateOutputs kernel =
        engine::fast_ours(p, tc, BaselineForm{Form::chunked_matmul, 16, false, false, engine::LogAlong::none}, DType::bf16);
    const Report r = check::check(p, ref, kernel, {.precision = tc});
    INFO(r.text());
    CHECK(r.pass);
    CHECK(r.baseline_worst_form.rfind("chunked_matmul", 0) == 0);
    CHECK(r.baseline_max_score > 64 * f32.baseline_max_score * to_unit);
    if (tc == Precision::bf16_f32) CHECK_FALSE(check::check(p, ref, kernel, {.precision = Precision::f32}).pass);
  }
}
