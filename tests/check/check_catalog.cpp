// Differential diagnosis (issue 40): the catalog of known mistakes names what
// a failing candidate computes. Candidates built independently of the catalog
// (the paper's forms as the reference library evaluates them, outputs
// renormalized by hand) are named by their row; our honest orders, failing
// only because they are judged in a precision finer than they compute, are
// named nothing. The zoo campaign (tests/zoo/zoo_campaigns.py) names the
// zoo's members.
#include "hla/check/check.hpp"
#include "hla/error.hpp"

#include "../../properties/harness.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>

using namespace hla;
using namespace hla::check;
using namespace hla::engine;

namespace {

BatchProblem cat_problem(Variant v, DType dtype, Index heads, Index kv_heads, Index n, Index d, uint64_t seed = 5) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  BatchProblem p;
  p.opt.variant = v;
  p.opt.gamma = Rational(15, 16);
  p.dtype = dtype;
  p.heads = heads, p.kv_heads = kv_heads, p.n = n, p.d = d, p.dv = d;
  p.resize_buffers();
  for (auto* x : {&p.q, &p.k, &p.v})
    for (double& e : *x) e = round_to(dtype, N(rng) / std::sqrt(static_cast<double>(d)));
  p.validate();
  return p;
}

std::string cat_named(const Report& r) { return r.diagnosis.empty() ? "nothing" : r.diagnosis.front().id; }

}  // namespace

TEST_CASE("diagnosis: hla eval --paper E1 on a [1, 4, 512, 64] bf16 fixture is named E1", "[check][diagnosis]") {
  const BatchProblem p = cat_problem(Variant::hla2, DType::bf16, 4, 4, 512, 64);
  const Reference ref = compute_reference(p);
  // What `hla eval --paper E1` writes by default: precision f32, out f32.
  const Report r = check::check(p, ref, ours_paper(p, Precision::f32, PaperForm::E1_hla2_streaming, 64, DType::f32));
  INFO(r.text());
  REQUIRE(!r.pass);
  CHECK(cat_named(r) == "E1");
  CHECK(r.diagnosis.front().fraction >= 0.9);
  CHECK(r.json()["diagnosis"][0]["id"] == "E1");
  CHECK(r.text().find("diagnosis: matches E1") != std::string::npos);
  CHECK(r.html().find("data-id=\"E1\"") != std::string::npos);
}

TEST_CASE("diagnosis: the paper's E5 and E6 chunk forms are named with their width", "[check][diagnosis]") {
  for (Variant v : {Variant::hla2, Variant::ahla}) {
    const BatchProblem p = cat_problem(v, DType::f32, 2, 2, 96, 8);
    const PaperForm f = v == Variant::hla2 ? PaperForm::E5_hla2_chunked : PaperForm::E6_ahla_chunked;
    const Report r = check::check(p, ours_paper(p, Precision::f32, f, 32, DType::f32));
    INFO(r.text());
    CHECK(cat_named(r) == (v == Variant::hla2 ? "E5/32" : "E6/32"));
  }
}

TEST_CASE("diagnosis: a max(den, eps) normalizer is named den_max_eps", "[check][diagnosis]") {
  BatchProblem p = cat_problem(Variant::la1, DType::f32, 2, 2, 64, 8);
  p.opt.normalize = true, p.opt.eps = Rational(1, 100);
  const Reference ref = compute_reference(p);
  CandidateOutputs c = ours(p, Precision::f32, Form::streaming, 16, DType::f32);
  const double eps = 0.01;
  for (size_t i = 0; i < c.out.size(); ++i) {  // by hand: num / max(den, ε), in float
    const double den = c.den[i / static_cast<size_t>(p.dv)], D = den + eps;
    c.out[i] = static_cast<float>(c.out[i] * static_cast<float>(D) / static_cast<float>(std::max(den, eps)));
  }
  const Report r = check::check(p, ref, c);
  INFO(r.text());
  REQUIRE(!r.pass);
  CHECK(cat_named(r) == "den_max_eps");
}

TEST_CASE("diagnosis: honest orders failing only by a declared precision are named nothing", "[check][diagnosis]") {
  for (Variant v : {Variant::la1, Variant::hla2, Variant::ahla, Variant::hla3}) {
    BatchProblem p = cat_problem(v, DType::f32, 2, 1, 64, 8);
    p.opt.scale = Rational(1, 2), p.opt.normalize = v == Variant::hla2;
    const Reference ref = compute_reference(p);
    for (Form f : {Form::streaming, Form::chunked_matmul}) {
      CheckOptions o;
      o.precision = Precision::f64;  // they compute in bf16: far beyond an f64 kernel's error
      const Report r = check::check(p, ref, ours(p, Precision::bf16, f, 16, DType::f64), o);
      INFO(to_string(v) << " " << to_string(f) << "\n" << r.text());
      REQUIRE(!r.pass);
      CHECK(cat_named(r) == "nothing");
    }
  }
}

TEST_CASE("diagnosis: none on a pass, and none when turned off", "[check][diagnosis]") {
  const BatchProblem p = cat_problem(Variant::hla2, DType::f32, 2, 2, 48, 8);
  const Reference ref = compute_reference(p);
  CHECK(check::check(p, ref, ours(p, Precision::f32, Form::streaming, 16, DType::f32)).diagnosis.empty());
  CheckOptions o;
  o.diagnose = false;
  const Report r = check::check(p, ref, ours_paper(p, Precision::f32, PaperForm::E1_hla2_streaming, 16, DType::f32), o);
  CHECK((!r.pass && r.diagnosis.empty()));
}

TEST_CASE("diagnosis: a kernel declaring f32 that computes in f16 is named low_precision_accumulation/f16", "[check][diagnosis]") {
  for (Variant v : {Variant::la1, Variant::hla2}) {
    const BatchProblem p = cat_problem(v, DType::f32, 2, 2, 64, 8);
    const Reference ref = compute_reference(p);
    CheckOptions o;
    o.precision = Precision::f32;
    const Report r = check::check(p, ref, ours(p, Precision::f16, Form::streaming, 16, DType::f32), o);
    INFO(to_string(v) << "\n" << r.text());
    REQUIRE(!r.pass);
    CHECK(cat_named(r) == "low_precision_accumulation/f16");
  }
  // A mistake whose effect is near f16's rounding (ε added twice, ε = 1/1000) is named by its row, which
  // the candidate matches as well as the precision row: that one ranks after every mistake row.
  BatchProblem p = cat_problem(Variant::la1, DType::f32, 2, 2, 64, 8);
  p.opt.normalize = true, p.opt.eps = Rational(1, 1000);
  const Reference ref = compute_reference(p);
  BatchProblem twice = p;
  twice.opt.eps = p.opt.eps * 2;
  CheckOptions o;
  o.precision = Precision::f32;
  const Report r = check::check(p, ref, ours(twice, Precision::f32, Form::streaming, 16, DType::f32), o);
  INFO(r.text());
  REQUIRE(!r.pass);
  CHECK(cat_named(r) == "eps_twice");
  CHECK(std::any_of(r.diagnosis.begin(), r.diagnosis.end(), [](const Diagnosis& d) { return d.id.rfind("low_precision", 0) == 0; }));
}

TEST_CASE("diagnosis: a causal mask strict inside chunks is named mask_strict with its width", "[check][diagnosis]") {
  // The candidate by the index sums of SPEC §2 with the strict mask as a predicate (independent of the
  // catalog's form, which subtracts the dropped terms from the reference): inside t's chunk of 8 a pair
  // of the chain t → x → y enters only when strictly ordered; before it (the carried summary) as SPEC says.
  constexpr Index W = 8;
  for (Variant v : {Variant::hla2, Variant::ahla}) {
    const BatchProblem p = cat_problem(v, DType::f32, 1, 1, 40, 4);
    const double g = to_double(p.opt.gamma);
    auto a = [&](Index t, Index i) {
      double s = 0;
      for (Index c = 0; c < p.d; ++c) s += p.q[p.q_index(0, 0, t, c)] * p.k[p.k_index(0, 0, i, c)];
      return s;
    };
    auto kept = [](Index t, Index x, Index y) {  // x ≤ t, y ≤ x: the chain t → x → y
      return x / W < t / W || (x < t && (y / W < x / W || y < x));
    };
    CandidateOutputs c{std::vector<double>(static_cast<size_t>(p.n * p.dv)), std::vector<double>(static_cast<size_t>(p.n)), DType::f32,
                       DType::f32};
    for (Index t = 0; t < p.n; ++t)
      for (Index i = 0; i <= t; ++i)
        for (Index j = 0; j <= t; ++j) {
          // hla2: i ≤ j ≤ t, γ^(2t−i−j) a_ti a_ji v_j; ahla: j ≤ i ≤ t, γ^(t−j) a_ti a_ij v_j.
          const bool hla2 = v == Variant::hla2;
          if (!(hla2 ? i <= j && kept(t, j, i) : j <= i && kept(t, i, j))) continue;
          const double w = hla2 ? std::pow(g, 2 * t - i - j) * a(t, i) * a(j, i) : std::pow(g, t - j) * a(t, i) * a(i, j);
          for (Index x = 0; x < p.dv; ++x) c.out[static_cast<size_t>(t * p.dv + x)] += w * p.v[p.v_index(0, 0, j, x)];
          c.den[static_cast<size_t>(t)] += w;
        }
    for (double& x : c.out) x = static_cast<float>(x);
    for (double& x : c.den) x = static_cast<float>(x);
    const Report r = check::check(p, c);
    INFO(to_string(v) << "\n" << r.text());
    REQUIRE(!r.pass);
    CHECK(cat_named(r) == "mask_strict/8");
  }
}

TEST_CASE("diagnosis: at scale, on the first heads, and across heads where the mistake reads across them", "[check][diagnosis]") {
  // [1, 4, 64, 16], 2 K/V heads, the diagnosis's work set to one K/V group's (2^16; default 2^27, a head of
  // [4096, 128]): a mistake of each head's own is judged on the first group only, a GQA mapping on every head.
  BatchProblem p = cat_problem(Variant::la1, DType::bf16, 4, 2, 64, 16);
  p.opt.scale = Rational(1, 2);
  const Reference ref = compute_reference(p);
  CheckOptions o;
  o.diagnosis_work = 0x1p16;
  BatchProblem unscaled = p;
  unscaled.opt.scale = 1;
  const Report r = check::check(p, ref, ours(unscaled, Precision::f32, Form::streaming, 16, DType::f32), o);
  INFO(r.text());
  REQUIRE(!r.pass);
  CHECK(cat_named(r) == "scale_missing");
  BatchProblem modulo = p;  // query head h reads K/V head h % 2, not h / 2
  modulo.kv_heads = 4;
  modulo.resize_buffers();
  modulo.q = p.q;
  for (Index h = 0; h < 4; ++h)
    for (Index t = 0; t < p.n; ++t)
      for (Index c = 0; c < p.d; ++c) {
        modulo.k[modulo.k_index(0, h, t, c)] = p.k[p.k_index(0, 2 * (h % 2), t, c)];
        modulo.v[modulo.v_index(0, h, t, c)] = p.v[p.v_index(0, 2 * (h % 2), t, c)];
      }
  const Report g = check::check(p, ref, ours(modulo, Precision::f32, Form::streaming, 16, DType::f32), o);
  INFO(g.text());
  REQUIRE(!g.pass);
  CHECK(cat_named(g) == "gqa_modulo");
  // A gradient mistake on the first group too: the upstream read as [B, H, dv, n].
  std::mt19937_64 rng(3);
  std::normal_distribution<double> N;
  std::vector<double> dout(ref.out.size()), transposed(ref.out.size());
  for (double& x : dout) x = round_to(p.dtype, N(rng));
  for (size_t head = 0; head < dout.size(); head += static_cast<size_t>(p.n * p.dv))
    for (Index t = 0; t < p.n; ++t)
      for (Index c = 0; c < p.dv; ++c) transposed[head + static_cast<size_t>(t * p.dv + c)] = dout[head + static_cast<size_t>(c * p.n + t)];
  Reference with_grad = ref;
  with_grad.grad = compute_gradient_reference(p, with_grad, dout, {});
  CandidateOutputs c = ours(p, Precision::f32, Form::streaming, 16, DType::f32);
  ours_gradients(p, transposed, {}, BackwardForm::streaming, 16, DType::f32, c, Precision::f32);
  const Report t = check::check(p, with_grad, c, o);
  INFO(t.text());
  REQUIRE(!t.pass);
  CHECK(cat_named(t) == "upstream_transposed");
}
