// A case is exact-tier only when every option and every
// intermediate of every legal order is representable — so the exact result
// rounded to the output dtype must pass, bit for bit, every exact-tier case
// the fuzzer and the suites generate (and an f32 kernel of ours in any order).
#include "hla/fuzz/cases.hpp"
#include "hla/gen/suite.hpp"
#include "hla_impl.h"

#include <catch2/catch.hpp>

namespace hla {
namespace {

// The exact reference rounded to f32: what an exact-tier kernel must write.
engine::CandidateOutputs rounded(const engine::Reference& ref) {
  engine::CandidateOutputs c{ref.out, ref.den, DType::f32, DType::f32};
  for (double& x : c.out) x = round_to(DType::f32, x);
  for (double& x : c.den) x = round_to(DType::f32, x);
  return c;
}

void require_exact(const BatchProblem& p, const std::string& what) {
  const engine::Reference ref = engine::compute_reference(p);
  INFO(what);
  REQUIRE(ref.bits == 0);
  const check::Report r = check::check(p, ref, rounded(ref), {.precision = engine::Precision::f32, .exact_tier = true});
  INFO(r.text());
  CHECK(r.pass);
  CHECK(r.exact_mismatches == 0);
  // And our own f32 forms, in their own orders, are exact too.
  for (Form f : {Form::streaming, Form::naive}) {
    const check::Report o = check::check(p, ref, engine::ours(p, engine::Precision::f32, f, 16, DType::f32),
                                         {.precision = engine::Precision::f32, .exact_tier = true});
    INFO(to_string(f) << "\n" << o.text());
    CHECK(o.exact_mismatches == 0);
  }
}

TEST_CASE("exact tier: every fuzz case marked exact is exact in f32", "[fuzz][exact]") {
  fuzz::Supports s;
  s.variants = variants_where(is_kernel_variant);
  s.dtypes = {DType::f32};
  s.features = HLA_FEAT_UNMASKED | HLA_FEAT_RIDGE | HLA_FEAT_DECAY | HLA_FEAT_SCALE | HLA_FEAT_NORMALIZE | HLA_FEAT_GQA;
  size_t exact = 0, with_ridge = 0;
  for (uint64_t seed = 1; seed <= 4000 && exact < 60; ++seed) {
    const fuzz::FuzzCase c = fuzz::make_case(s, gen::derive_seed(20261130, seed));
    if (!c.exact_tier) continue;
    ++exact;
    with_ridge += c.p.opt.lambda != 0;
    require_exact(c.p, c.describe());
  }
  INFO("exact-tier cases " << exact << ", with ridge " << with_ridge);
  CHECK(exact >= 20);
}

TEST_CASE("exact tier: the golden suite's exact cases are exact in f32", "[fuzz][exact]") {
  size_t exact = 0;
  for (const gen::Case& c : gen::make_suite("golden", 0))
    if (c.exact_tier) ++exact, require_exact(c.problem, c.name);
  CHECK(exact >= 4);
}

TEST_CASE("exact tier: a non-integer ridge does not qualify", "[fuzz][exact]") {
  BatchProblem p;
  p.opt.variant = Variant::hla2;
  p.opt.lambda = Rational(1, 10);
  p.n = 1, p.d = 1, p.dv = 1;
  p.q = {1}, p.k = {1}, p.v = {1};
  CHECK_FALSE(gen::qualifies_exact_tier(p));
  p.opt.lambda = 1;
  CHECK(gen::qualifies_exact_tier(p));
  p.opt.lambda = Rational(1, 4);
  CHECK(gen::qualifies_exact_tier(p));
  p.opt.lambda = Rational(3, 4);
  CHECK_FALSE(gen::qualifies_exact_tier(p));
}

}  // namespace
}  // namespace hla
