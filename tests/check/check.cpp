// The checker judges right candidates PASS and wrong ones FAIL.
#include "hla/check/check.hpp"
#include "hla/check/fixture.hpp"
#include "hla/evaluate.hpp"

#include "../../properties/harness.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <random>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;

namespace {

// Gaussian inputs rounded to `dt`, deterministic in the seed.
BatchProblem gaussian(Variant v, Index n, Index d, uint64_t seed, DType dt = DType::f32) {
  BatchProblem p;
  p.opt.variant = v;
  p.opt.gamma = needs_unit_gamma(v) ? Rational(1) : Rational(7, 8);
  p.dtype = dt;
  p.batch = 2, p.heads = 2, p.kv_heads = 1, p.n = n, p.d = d, p.dv = d;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  auto fill = [&](std::vector<double>& x, Index size) {
    x.resize(static_cast<size_t>(size));
    for (auto& e : x) e = round_to(dt, N(rng));
  };
  fill(p.q, p.batch * p.heads * n * d);
  fill(p.k, p.batch * p.kv_heads * n * d);
  fill(p.v, p.batch * p.kv_heads * n * d);
  return p;
}

}  // namespace

TEST_CASE("check: every form of ours passes in f64 and f32, judged in its class", "[check]") {
  for (Variant v : variants_where(is_kernel_variant)) {
    for (bool normalize : {false, true}) {
      auto p = gaussian(v, 40, 8, 11);
      p.opt.normalize = normalize;
      const Reference ref = compute_reference(p);
      for (Form f : forms_of(v)) {
        const FormClass cls = subtracts_partial_sums(p.opt, f) ? FormClass::state_difference : FormClass::masked;
        INFO(to_string(v) << " " << to_string(f) << " normalize=" << normalize << " class " << to_string(cls));
        const Report r64 = check::check(p, ref, engine::ours(p, Precision::f64, f, 16, DType::f64), {.form_class = cls});
        INFO(r64.text());
        CHECK(r64.pass);
        const Report r32 = check::check(p, ref, engine::ours(p, Precision::f32, f, 16, DType::f32), {.form_class = cls});
        INFO(r32.text());
        CHECK(r32.pass);
      }
    }
  }
}

TEST_CASE("check: the paper-literal forms fail", "[check][errata]") {
  for (PaperForm f : {PaperForm::E1_hla2_streaming, PaperForm::E2_hla2_scan, PaperForm::E3_ahla_scan, PaperForm::E5_hla2_chunked,
                      PaperForm::E6_ahla_chunked}) {
    const auto p = gaussian(variant_of(f), 40, 8, 12);
    const Report r = check::check(p, ours_paper(p, Precision::f64, f, 16, DType::f64));
    INFO(to_string(f) << "\n" << r.text());
    CHECK_FALSE(r.pass);
    CHECK(r.over_bound > 0);
  }
}

TEST_CASE("check: a failing case is dumped as a fixture that reproduces the verdict", "[check]") {
  const auto p = gaussian(Variant::hla2, 40, 8, 17);
  const auto bad = ours_paper(p, Precision::f64, PaperForm::E5_hla2_chunked, 16, DType::f64);
  const std::string stem = (std::filesystem::temp_directory_path() / "hla_check_dump_test").string();
  const Report r = check::check(p, bad, {.precision = Precision::f32, .dump_on_failure = stem});
  REQUIRE_FALSE(r.pass);
  REQUIRE(r.dumped == stem + ".safetensors");
  const io::Fixture f = io::read_fixture(r.dumped);
  const Report again = check_fixture(f, io::read_candidate(stem + ".candidate.safetensors", f), {.precision = Precision::f32});
  CHECK_FALSE(again.pass);
  CHECK(again.max_score == r.max_score);
  std::filesystem::remove(stem + ".safetensors");
  std::filesystem::remove(stem + ".candidate.safetensors");
}

TEST_CASE("check: lower precision than declared fails the a priori bound and the baseline ratio", "[check]") {
  // The streaming form computed in f16 (rounding after every operation) but
  // declared f32: its errors are ~2^13 f32 units, beyond both numeric rules.
  // (Rule 3 deciding alone: check_rules.cpp.)
  const auto p = gaussian(Variant::hla2, 64, 8, 13, DType::f16);
  const auto cand = engine::ours(p, Precision::f16, Form::streaming, 16, DType::f32);
  const Report bad = check::check(p, cand, {.precision = Precision::f32});
  INFO(bad.text());
  CHECK_FALSE(bad.pass);
  CHECK(bad.over_bound > 0);
  CHECK(bad.baseline_ratio > bad.ratio_limit);
}

TEST_CASE("check: perturbations above the noise floor fail, below pass", "[check]") {
  const auto p = gaussian(Variant::hla2, 32, 8, 14);
  const Reference ref = compute_reference(p);
  CandidateOutputs c{ref.out, ref.den, DType::f32};
  const double u = unit_roundoff(Precision::f32);
  const double K = depth_bound(p.opt.variant, p.n, p.d);
  for (size_t i = 0; i < c.out.size(); ++i) c.out[i] += 0.5 * u * ref.mag_num[i];
  {
    const Report r = check::check(p, ref, c);
    INFO(r.text());
    CHECK(r.pass);
  }
  c.out[7] = ref.out[7] + 2.5 * std::sqrt(K) * u * ref.mag_num[7];  // above 2x the noise floor
  {
    const Report r = check::check(p, ref, c);
    INFO(r.text());
    CHECK_FALSE(r.pass);
    REQUIRE(!r.worst.empty());
    CHECK(r.worst.front().t == 7 / p.dv);
    CHECK(r.worst.front().c == 7 % p.dv);
  }
  c = CandidateOutputs{ref.out, ref.den, DType::f32};
  c.den[3] = ref.den[3] * (1 + 1e-3);
  CHECK_FALSE(check::check(p, ref, c).pass);
  c = CandidateOutputs{ref.out, {}, DType::f32};
  c.out[5] = std::nan("");
  const Report r = check::check(p, ref, c);
  CHECK_FALSE(r.pass);
  CHECK(r.nonfinite == 1);
}

TEST_CASE("check: exact tier demands bit equality", "[check][exact]") {
  BatchProblem p = gaussian(Variant::hla2, 24, 4, 15);
  p.opt.gamma = 1;
  std::mt19937_64 rng(3);
  for (auto* x : {&p.q, &p.k, &p.v})
    for (auto& e : *x) e = static_cast<double>(static_cast<int>(rng() % 5) - 2);
  const Reference ref = compute_reference(p);
  REQUIRE(ref.bits == 0);  // exact rationals
  // Small integers and γ = 1: every term and partial sum is an integer below
  // the unmasked magnitude < 2^24, so float is exact in any order.
  const auto f32 = engine::ours(p, Precision::f32, Form::chunked_matmul, 16, DType::f32);
  const Report ok = check::check(p, ref, f32, {.exact_tier = true});
  INFO(ok.text());
  CHECK(ok.pass);
  auto off = f32;
  off.out[10] = std::nextafter(static_cast<float>(off.out[10]), 1e30f);
  const Report bad = check::check(p, ref, off, {.exact_tier = true});
  CHECK_FALSE(bad.pass);
  CHECK(bad.exact_mismatches == 1);
}

TEST_CASE("check: shape mismatch is an input error", "[check]") {
  const auto p = gaussian(Variant::la1, 8, 2, 16);
  CandidateOutputs c{std::vector<double>(3), {}, DType::f32};
  CHECK_THROWS_AS(check::check(p, c), InputError);
}

TEST_CASE("check: normalized outputs at the pole are judged by their residual", "[check]") {
  // One token whose denominator is exactly -eps: den + eps = 0. A kernel's
  // quotient is then anything between ±num/(u·M_den) and ±inf: the residual
  // o·(den + eps) − num judges it without a pole exclusion.
  BatchProblem p;
  p.opt.variant = Variant::la1;
  p.opt.normalize = true;
  p.opt.eps = Rational(1, 4);
  p.dtype = DType::f32;
  p.n = 3, p.d = 1, p.dv = 1;
  // Token 0: den = q·k = -1/4 = -eps, num = -1/4. Tokens 1 and 2 (den 3/4 and
  // 7/4, outputs 3/4 and 7/8) are there so that something is scored.
  p.q = {1, 1, 1}, p.k = {-0.25, 1, 1}, p.v = {1, 1, 1};
  const Reference ref = compute_reference(p);
  auto run = [&](double out) {
    return check::check(p, ref, CandidateOutputs{{out, 0.75, 0.875}, {}, DType::f32}, {.precision = Precision::f32});
  };
  const Report inf = run(-INFINITY);  // what f32 computes: -1/4 / 0
  INFO(inf.text());
  CHECK(inf.pass);
  CHECK(inf.at_pole == 1);
  // den off by one f32 rounding of its magnitude (1/2 · 2^-24): out = num / that.
  const Report near = run(-0.25 / std::ldexp(0.5, -24));
  INFO(near.text());
  CHECK(near.pass);
  CHECK(near.scored == 3);
  const Report wrong = run(123.0);  // would need den off by 2^-8 of its magnitude
  INFO(wrong.text());
  CHECK_FALSE(wrong.pass);
  CHECK(wrong.scored == 3);
}
