// The fuzzer's gradient cases (SPEC §9) in process: upstream gradients are
// drawn only for candidates with a backward (deterministically, in the
// dtype); the judge reports `gradient` and `gradient_nan_causality` findings
// and passes our own backward; a finding shrinks with its upstream in step,
// and its fixture carries gradients that check_fixture (`hla check`) fails.
#include "hla/fuzz/campaign.hpp"
#include "hla/fuzz/cases.hpp"
#include "hla/fuzz/gradients.hpp"
#include "hla_impl.h"

#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/fixture.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>

#include <unistd.h>

namespace hla {
namespace {

namespace fs = std::filesystem;

enum class Bug {
  none,
  dk_off,   // dk 1e-3·(1 + |dk|) off
  dk_rel,   // dk 1e-3 relative off (exact where dk = 0: no zero-magnitude element fails)
  leak,     // a non-finite upstream makes every dq NaN
  own_nan,  // dq of token 0 NaN, whatever the upstream (as 0/0 in a padded row)
};

fuzz::Supports backward_supports() {
  fuzz::Supports s;
  s.name = "in-process backward";
  s.variants = variants_where(is_kernel_variant);
  s.dtypes = {DType::f64, DType::f32};
  s.features = HLA_FEAT_NORMALIZE | HLA_FEAT_DECAY | HLA_FEAT_SCALE | HLA_FEAT_GQA | HLA_FEAT_VARLEN | HLA_FEAT_DEN |
               HLA_FEAT_BACKWARD;
  s.max_n = 64;
  s.precision = engine::PrecisionMap{engine::Precision::f64, {}};
  return s;
}

// Our streaming forms in float64; bugs planted in the gradients only.
class Grads : public fuzz::Adapter {
 public:
  explicit Grads(Bug bug, fuzz::Supports s = backward_supports()) : bug_(bug), s_(std::move(s)) {}
  const fuzz::Supports& supports() const override { return s_; }
  fuzz::RunResult run(const BatchProblem& p, const engine::Reference*, const std::vector<double>*, bool) override {
    fuzz::RunResult r;
    r.out = engine::ours(p, engine::Precision::f64, Form::streaming, 64, DType::f64);
    return r;
  }
  fuzz::RunResult run_backward(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) override {
    fuzz::RunResult r;
    engine::ours_gradients(p, dout, dden, BackwardForm::streaming, 16, DType::f64, r.out);
    bool finite = true;
    for (const auto* x : {&dout, &dden})
      for (double e : *x) finite = finite && std::isfinite(e);
    if (bug_ == Bug::dk_off)  // far beyond K_g·u·M of every element with a magnitude
      for (double& e : r.out.dk) e += 1e-3 * (1 + std::fabs(e));
    if (bug_ == Bug::dk_rel)
      for (double& e : r.out.dk) e *= 1 + 1e-3;
    if (bug_ == Bug::leak && !finite) std::fill(r.out.dq.begin(), r.out.dq.end(), std::nan(""));
    if (bug_ == Bug::own_nan)
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < p.heads; ++h) r.out.dq[p.q_index(b, h, 0, 0)] = std::nan("");
    return r;
  }

 private:
  Bug bug_;
  fuzz::Supports s_;
};

fuzz::FuzzCase grad_case(Variant v, Index n, uint64_t seed, Index heads = 2, Index kv_heads = 1) {
  fuzz::FuzzCase c;
  BatchProblem& p = c.p;
  p.opt.variant = v;
  p.opt.gamma = Rational(7, 8);
  p.dtype = DType::f32;
  p.heads = heads, p.kv_heads = kv_heads;
  p.n = n, p.d = 3, p.dv = 2;
  p.resize_buffers();
  gen::Rng rng(seed);
  gen::fill(p, gen::Dist::gaussian, rng);
  c.grad = true;
  c.dout.resize(static_cast<size_t>(p.batch * p.heads * p.n * p.dv));
  for (double& e : c.dout) e = round_to(DType::f32, rng.normal());
  return c;
}

// The verdict on c: its kind and failed rules ("" and "": a pass), never inconclusive.
void expect(fuzz::Adapter& a, const fuzz::FuzzCase& c, const std::string& kind, const std::string& rules = "") {
  const fuzz::Verdict v = fuzz::judge(a, c);
  INFO(v.message);
  CHECK(v.kind == kind);
  CHECK(v.rules == rules);
  CHECK_FALSE(v.inconclusive);
}

// Bit for bit (NaN included): same seed, same bytes.
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("generator: upstream gradients only with a backward, in the dtype, deterministic", "[fuzz][grad]") {
  fuzz::Supports without = backward_supports();
  without.features &= ~HLA_FEAT_BACKWARD;
  const fuzz::Supports with = backward_supports();
  size_t grads = 0, nan_probe = 0, with_dden = 0;
  for (uint64_t i = 0; i < 400; ++i) {
    const uint64_t seed = gen::derive_seed(7, i);
    const fuzz::FuzzCase a = fuzz::make_case(without, seed), c = fuzz::make_case(with, seed);
    CHECK_FALSE(a.grad);
    // The backward's draws come last: the problem is the one a forward-only candidate gets.
    CHECK(same_bits(a.p.q, c.p.q));
    CHECK(same_bits(fuzz::make_case(with, seed).dout, c.dout));
    if (!c.grad) continue;
    ++grads;
    with_dden += !c.dden.empty();
    REQUIRE(c.dout.size() == static_cast<size_t>(c.p.batch * c.p.heads * c.p.n * c.p.dv));
    for (double e : c.dout) CHECK((!std::isfinite(e) || round_to(c.p.dtype, e) == e));
    if (c.probe != fuzz::Probe::grad_nan_causality) continue;
    ++nan_probe;
    CHECK_FALSE(fuzz::upstream_finite(c));
  }
  std::cout << "[generator] 400 cases: " << grads << " with gradients, " << with_dden << " with dden, " << nan_probe
            << " grad_nan_causality" << std::endl;
  CHECK(grads > 100);
  CHECK(with_dden == grads);
  CHECK(nan_probe > 10);
}

TEST_CASE("judge: gradient findings, our backward passes", "[fuzz][grad]") {
  Grads honest(Bug::none), dk_off(Bug::dk_off), leak(Bug::leak);
  fuzz::FuzzCase c = grad_case(Variant::hla2, 9, 3);
  expect(honest, c, "");
  expect(dk_off, c, "gradient", "grad_bound,grad_ratio");
  CHECK(fuzz::judge(dk_off, c).outputs.dk.size() == static_cast<size_t>(c.p.kv_heads * c.p.n * c.p.d));  // for the candidate file
  // A NaN in dout at token 2 of query head 1: rows ≤ 2 of dq (head 1), dk and dv (the one kv head) are not judged.
  c.probe = fuzz::Probe::grad_nan_causality;
  c.dout[c.p.out_index(0, 1, 2, 1)] = NAN;
  expect(honest, c, "");
  expect(leak, c, "gradient_nan_causality", "grad_nonfinite,grad_bound");  // a non-finite element also scores inf
  // The rule hides exactly the reachable rows: dq of head 0 and rows 3.. stay judged.
  const engine::Reference ref = fuzz::with_gradients(c, engine::compute_reference(c.p), true);
  for (Index t = 0; t < c.p.n; ++t) {
    CHECK(std::isnan(ref.grad->dq[c.p.q_index(0, 1, t, 0)]) == (t <= 2));
    CHECK(std::isfinite(ref.grad->dq[c.p.q_index(0, 0, t, 0)]));
    CHECK(std::isnan(ref.grad->dk[c.p.k_index(0, 0, t, 0)]) == (t <= 2));
  }
}

TEST_CASE("judge: a NaN the backward makes by itself is a gradient finding, not a causality one", "[fuzz][grad]") {
  // SPEC §9: gradient_nan_causality only where a non-finite element the rule
  // forbids turns finite with the planted NaN as 0 (backward_pad_nan's 0/0).
  Grads own(Bug::own_nan), leak(Bug::leak);
  fuzz::FuzzCase c = grad_case(Variant::hla2, 9, 3);
  c.probe = fuzz::Probe::grad_nan_causality;
  c.dout[c.p.out_index(0, 1, 2, 1)] = NAN;  // reaches dq of head 1 at tokens ≤ 2: token 0 of head 0 is forbidden
  const fuzz::Verdict v = fuzz::judge(own, c);
  INFO(v.message);
  CHECK(v.kind == "gradient");
  CHECK(v.rules.find("grad_nonfinite") != std::string::npos);
  fuzz::FuzzCase zero = c;  // the same without the NaN
  zero.probe = fuzz::Probe::plain;
  zero.dout[c.p.out_index(0, 1, 2, 1)] = 0;
  CHECK(fuzz::judge(own, zero).kind == "gradient");
  CHECK(fuzz::judge(leak, c).kind == "gradient_nan_causality");
}

// The first case of stream `seed` (index printed) that `want` accepts and `a` fails.
std::pair<size_t, fuzz::FuzzCase> first_failing(fuzz::Adapter& a, uint64_t seed, const std::function<bool(const fuzz::FuzzCase&)>& want) {
  for (size_t i = 0; i < 400; ++i) {
    fuzz::FuzzCase c = fuzz::make_case(a.supports(), gen::derive_seed(seed, i));
    if (want(c) && !fuzz::judge(a, c).kind.empty()) {
      std::cout << "[first failing] seed " << seed << ", case " << i << ": " << c.describe() << std::endl;
      return {i, c};
    }
  }
  FAIL("no such case in 400");
  return {};
}

// A campaign of exactly case `index` of stream `seed` (its shard's first), shrunk.
fuzz::Finding shrink_one(fuzz::Adapter& a, uint64_t seed, size_t index) {
  const fs::path dir = fs::temp_directory_path() / ("hla_fuzz_grad_one_" + std::to_string(::getpid()));
  fuzz::CampaignOptions o;
  o.seed = seed, o.shard = index, o.shards = index + 1, o.max_cases = 1, o.findings_dir = dir.string();
  const fuzz::Summary s = fuzz::run_campaign(a, o);
  std::error_code ec;
  fs::remove_all(dir, ec);
  REQUIRE(s.findings.size() == 1);
  std::cout << "  " << s.findings.front().original << "\n  -> " << s.findings.front().shrunk << " (needs " << s.findings.front().needs
            << ")" << std::endl;
  return s.findings.front();
}

TEST_CASE("shrinker: a gradient finding from a NaN upstream drops the NaN", "[fuzz][grad][shrink]") {
  // dk off on every case: the planted NaN has nothing to do with it, so the shrunk case is plain.
  Grads dk_off(Bug::dk_off);
  const auto [index, c] = first_failing(dk_off, 21, [](const fuzz::FuzzCase& k) { return k.probe == fuzz::Probe::grad_nan_causality; });
  const fuzz::Finding f = shrink_one(dk_off, 21, index);
  CHECK(f.kind == "gradient");
  CHECK(f.original.find("probe grad_nan_causality") != std::string::npos);
  CHECK(f.shrunk.find("probe plain") != std::string::npos);
  // A causality finding keeps it.
  Grads leak(Bug::leak);
  const fuzz::Finding g = shrink_one(leak, 21, index);
  CHECK(g.kind == "gradient_nan_causality");
  CHECK(g.shrunk.find("probe grad_nan_causality") != std::string::npos);
}

TEST_CASE("shrinker: a gradient finding with normalize drops it where the same rules fail", "[fuzz][grad][shrink]") {
  // Rule 3 judges normalized gradients too (SPEC §9), so a relative dk error fails
  // the same rules with and without normalize, and the shrinker drops it (dk off
  // needs no normalize). Relative only: an element of zero magnitude (score inf,
  // exempt from rule 3) offers no way around it.
  Grads dk_off(Bug::dk_rel);
  const auto [index, c] = first_failing(dk_off, 22, [](const fuzz::FuzzCase& k) {
    return k.probe == fuzz::Probe::plain && k.grad && k.p.opt.normalize && k.p.opt.eps_mode == EpsMode::add &&
           (k.p.dtype == DType::f32 || k.p.dtype == DType::f64);
  });
  const fuzz::Verdict v = fuzz::judge(dk_off, c);
  INFO(v.message);
  REQUIRE(v.rules == "grad_bound,grad_ratio");
  fuzz::FuzzCase plain = c;
  plain.p.opt.normalize = false;
  const fuzz::Verdict w = fuzz::judge(dk_off, plain);
  REQUIRE(w.rules == v.rules);
  const fuzz::Finding f = shrink_one(dk_off, 22, index);
  CHECK(f.kind == "gradient");
  CHECK(f.needs.find("normalize") == std::string::npos);
  CHECK(f.shrunk.find("normalize") == std::string::npos);
}

TEST_CASE("campaign: a gradient finding shrinks, and its fixture fails check_fixture", "[fuzz][grad]") {
  Grads dk_off(Bug::dk_off);
  const fs::path dir = fs::temp_directory_path() / ("hla_fuzz_grad_" + std::to_string(::getpid()));
  fuzz::CampaignOptions o;
  o.seed = 3, o.max_cases = 40, o.stop_after = 1, o.findings_dir = dir.string();
  const fuzz::Summary s = fuzz::run_campaign(dk_off, o);
  std::cout << s.text() << std::endl;
  REQUIRE(s.findings.size() == 1);
  const fuzz::Finding& f = s.findings.front();
  CHECK(f.kind == "gradient");
  CHECK(f.shrink_steps > 0);
  CHECK(f.shrunk.find("B=1 H=1 Hkv=1 n=") != std::string::npos);
  CHECK(f.shrunk.find(" d=1 dv=1") != std::string::npos);
  const io::Fixture fx = io::read_fixture(f.fixture);
  CHECK(fx.gradients);
  check::CheckOptions opt;
  opt.precision = engine::Precision::f64;
  opt.require_gradients = true;
  const check::Report r = check::check_fixture(fx, io::read_candidate(f.candidate, fx), opt);
  CHECK_FALSE(r.pass);
  bool dk_fails = false;
  for (const auto& g : r.gradients) dk_fails = dk_fails || (g.name == "dk" && g.over_bound > 0);
  CHECK(dk_fails);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace hla

namespace hla {

TEST_CASE("function adapter: a backward function is judged, its shapes checked", "[fuzz][grad]") {
  fuzz::Supports s = backward_supports();
  s.features &= ~HLA_FEAT_BACKWARD;  // the backward function declares it
  auto forward = [](const BatchProblem& p, const std::vector<double>*, bool) {
    fuzz::RunResult r;
    r.out = engine::ours(p, engine::Precision::f64, Form::streaming, 64, DType::f64);
    return r;
  };
  auto backward = [](double dk_shift, bool drop_row) {
    return [=](const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) {
      fuzz::RunResult r;
      engine::ours_gradients(p, dout, dden, BackwardForm::streaming, 16, DType::f64, r.out);
      for (double& e : r.out.dk) e += dk_shift * (1 + std::fabs(e));
      if (drop_row) r.out.dv.resize(r.out.dv.size() - static_cast<size_t>(p.dv));
      return r;
    };
  };
  const fuzz::FuzzCase c = grad_case(Variant::la1, 7, 5);
  CHECK_FALSE(fuzz::make_function_adapter(s, forward)->supports().has(HLA_FEAT_BACKWARD));
  const auto honest = fuzz::make_function_adapter(s, forward, backward(0, false));
  CHECK(honest->supports().has(HLA_FEAT_BACKWARD));
  expect(*honest, c, "");
  const auto off = fuzz::make_function_adapter(s, forward, backward(1e-3, false));
  expect(*off, c, "gradient", "grad_bound,grad_ratio");
  const auto short_dv = fuzz::make_function_adapter(s, forward, backward(0, true));
  const fuzz::Verdict v = fuzz::judge(*short_dv, c);
  CHECK(v.kind == "bad_output");
  CHECK(v.message.find("dv has") != std::string::npos);
  // A forward-only function adapter asked for gradients: an error, not a pass.
  CHECK(fuzz::judge(*fuzz::make_function_adapter(s, forward), c).kind == "error");
}

TEST_CASE("campaign: gradients returned with the forward are judged without a backward call", "[fuzz][grad]") {
  // An exec candidate writes dq, dk, dv into its candidate file (the fixture carries do):
  // run() returns them, run_backward() is never asked.
  class WithForward : public Grads {
   public:
    WithForward() : Grads(Bug::none) {}
    fuzz::RunResult run(const BatchProblem& p, const engine::Reference* ref, const std::vector<double>* s, bool w) override {
      fuzz::RunResult r = Grads::run(p, ref, s, w);
      REQUIRE(ref);
      REQUIRE(ref->grad);  // the reference handed over carries the upstream
      fuzz::RunResult g = Grads::run_backward(p, ref->grad->dout, ref->grad->dden);
      r.out.dq = g.out.dq, r.out.dk = g.out.dk, r.out.dv = g.out.dv;
      for (double& e : r.out.dq) e *= 1 + shift;
      return r;
    }
    fuzz::RunResult run_backward(const BatchProblem&, const std::vector<double>&, const std::vector<double>&) override {
      ++backward_calls;
      return {};
    }
    double shift = 0;
    int backward_calls = 0;
  };
  const fuzz::FuzzCase c = grad_case(Variant::hla2, 6, 9);
  WithForward a;
  expect(a, c, "");
  a.shift = 1e-3;
  expect(a, c, "gradient", "grad_bound,grad_ratio");
  CHECK(a.backward_calls == 0);
}

}  // namespace hla
