// The fast engine (hla/fast/engine.hpp): its algebra equals the naive
// definition exactly (evaluated in rationals); its running error bound holds
// in double-double and in double (exact comparison with the rational value);
// the bound is not vacuous (a double-precision answer violates the
// double-double bound); the certified reference built on it equals the
// correctly rounded exact value on random instances and on every golden fixture.
#include "hla/engine/fast_reference.hpp"
#include "hla/check/fixture.hpp"
#include "hla/fast/engine.hpp"
#include "hla/check/check.hpp"

#include "../../properties/generators.hpp"
#include "engine_exact.hpp"
#include "../../properties/harness.hpp"

#include <cstring>
#include <filesystem>
#include <random>

using namespace hla;
using namespace hla::test;
using fast::DD;

namespace {

rc::Gen<Problem<Rational>> double_problem_gen(Variant v) {
  return rc::gen::apply(
      [](Options o, Index n, Index d, Index dv, uint64_t seed) {
        o.normalize = false;  // the engine computes num and den; normalization is the caller's
        return gaussian_problem(o, n, d, dv, seed);
      },
      options_gen({.variant = v, .random_scale = true}), rc::gen::inRange<Index>(0, 41), rc::gen::inRange<Index>(1, 9),
      rc::gen::inRange<Index>(1, 7), rc::gen::arbitrary<uint64_t>());
}

// |computed − exact| ≤ phi·unit·M + alpha (alpha where `tiny`), for values and magnitudes.
template <class S> std::string bound_violation(const fast::HeadResult<S>& r, const Output<Rational>& exact, const Output<Rational>& mag) {
  const Rational unit = to_rational(fast::Arith<S>::unit);
  for (Index t = 0; t < exact.num.rows(); ++t) {
    const Rational phi = to_rational(r.phi[static_cast<size_t>(t)]);
    const Rational alpha = r.tiny ? to_rational(r.alpha[static_cast<size_t>(t)]) : Rational(0);
    for (Index c = 0; c <= exact.num.cols(); ++c) {
      const bool den = c == exact.num.cols();
      const Rational& x = den ? exact.den(t) : exact.num(t, c);
      const Rational& M = den ? mag.den(t) : mag.num(t, c);
      const Rational e = phi * unit * M + alpha;
      if (abs_r(rat(get(r.val, t, c)) - x) > e)
        return "value t=" + std::to_string(t) + " c=" + std::to_string(c) + ": error " +
               std::to_string(to_double(abs_r(rat(get(r.val, t, c)) - x))) + " > bound " + std::to_string(to_double(e));
      if (abs_r(rat(get(r.mag, t, c)) - M) > e) return "magnitude t=" + std::to_string(t) + " c=" + std::to_string(c) + " beyond its bound";
    }
  }
  return "";
}

void per_variant(Variant v) {
  const std::string name = to_string(v);
  prop(name + ": the fast engine's algebra equals the naive definition (exact rationals), magnitudes too", [v] {
    auto p = *problem_gen({.variant = v, .random_scale = true});
    p.opt.normalize = false;
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 3);
    const fast::HeadResult<Rational> r = fast::evaluate_head(head_of<Rational>(p, w));
    const std::string bad = engine_mismatch(r, evaluate(p, Form::naive), magnitude(p));
    if (!bad.empty()) RC_FAIL(bad);
  });
  prop(name + ": double-double engine within its running bound (exact comparison)", [v] {
    const auto p = *double_problem_gen(v);
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 3);
    const fast::HeadResult<DD> r = fast::evaluate_head(head_of<DD>(p, w));
    RC_ASSERT(r.finite);
    const std::string bad = bound_violation(r, evaluate(p, Form::streaming), magnitude(p));
    if (!bad.empty()) RC_FAIL(bad);
  });
  prop(name + ": double engine within its running bound (exact comparison)", [v] {
    const auto p = *double_problem_gen(v);
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 3);
    const fast::HeadResult<double> r = fast::evaluate_head(head_of<double>(p, w));
    RC_ASSERT(r.finite);
    const std::string bad = bound_violation(r, evaluate(p, Form::streaming), magnitude(p));
    if (!bad.empty()) RC_FAIL(bad);
  });
}

}  // namespace

TEST_CASE("fast engine: la1", "[fast]") { per_variant(Variant::la1); }
TEST_CASE("fast engine: hla2", "[fast]") { per_variant(Variant::hla2); }
TEST_CASE("fast engine: ahla", "[fast]") { per_variant(Variant::ahla); }
TEST_CASE("fast engine: hla3", "[fast]") { per_variant(Variant::hla3); }

// Control: the bound is tight enough to reject an answer computed in double.
TEST_CASE("fast engine: the double-double bound rejects a double-precision answer (control)", "[fast]") {
  for (Variant v : variants_where([](const VariantInfo& r) { return r.fast_engine; })) {
    Options o;
    o.variant = v;
    o.gamma = Rational(7, 8);
    const auto p = gaussian_problem(o, 40, 8, 4, 2026);
    const auto dd = fast::evaluate_head(head_of<DD>(p, 16));
    const auto dbl = fast::evaluate_head(head_of<double>(p, 16));
    const auto exact = evaluate(p, Form::streaming), mag = magnitude(p);
    INFO(to_string(v));
    CHECK(bound_violation(dd, exact, mag).empty());
    // The double answer, with the double-double bound: violated somewhere.
    fast::HeadResult<DD> as_dd = dd;
    for (Index t = 0; t < p.n(); ++t)
      for (Index c = 0; c <= p.dv(); ++c) as_dd.val.set(t, c, DD{dbl.val.at(t, c), 0});
    CHECK_FALSE(bound_violation(as_dd, exact, mag).empty());
    // And the bound is a small multiple of 2^-106 of the magnitude (it certifies).
    for (double phi : dd.phi) CHECK(phi < 0x1p14);
  }
}

namespace {

// Every element of ref the engine certified equals the correctly rounded
// exact value; returns how many were compared (and counts the certified).
struct Tally {
  size_t compared = 0, certified = 0, mismatched = 0;
  std::string first;
};

void compare_certified(const BatchProblem& p, const engine::Reference& ref, Tally& tally) {
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    const Problem<Rational> ph = p.head<Rational>(b, h, t0, t1);
    Output<Rational> ex;
    try {
      ex = evaluate(ph, Form::streaming);
    } catch (const std::domain_error&) {
      return;  // den + ε = 0 exactly: no correctly rounded quotient
    }
    for (Index t = t0; t < t1; ++t) {
      const size_t di = p.den_index(b, h, t);
      ++tally.compared;
      if (!(ref.den_flags[di] & engine::kUncertified)) {
        ++tally.certified;
        if (!(ref.den[di] == to_double(ex.den(t - t0)))) {
          if (tally.mismatched++ == 0) tally.first = "den head " + std::to_string(h) + " token " + std::to_string(t);
        }
      }
      for (Index c = 0; c < p.dv; ++c) {
        const size_t i = p.out_index(b, h, t, c);
        ++tally.compared;
        if (ref.flags[i] & engine::kUncertified) continue;
        ++tally.certified;
        if (!(ref.out[i] == to_double(ex.out(t - t0, c))) && tally.mismatched++ == 0)
          tally.first = "out head " + std::to_string(h) + " token " + std::to_string(t) + " column " + std::to_string(c);
      }
    }
  });
}

engine::ReferenceOptions engine_only() {
  engine::ReferenceOptions o;
  o.exact_max_n = 0;     // never exact rationals
  o.recompute_work = 0;  // never binary128: every certified element is the engine's
  return o;
}

}  // namespace

TEST_CASE("fast reference: certified elements are the correctly rounded exact value (random instances)", "[fast]") {
  // Control: certification is not vacuous. Not per instance: inputs rounded
  // to f32 make short exact sums land on a rounding tie now and then (no
  // bound can certify a tie), so the fraction is taken over the whole run.
  size_t certified = 0, compared = 0;
  for (Variant v : variants_where([](const VariantInfo& r) { return r.fast_engine; }))
    prop(to_string(v) + ": certified == RN(exact)", [v, &certified, &compared] {
      const Options o = *options_gen({.variant = v, .random_scale = true});
      BatchProblem p;
      p.opt = o;
      p.dtype = DType::f32;
      p.batch = 1, p.heads = *rc::gen::inRange<Index>(1, 3), p.kv_heads = 1;
      p.n = *rc::gen::inRange<Index>(1, 40), p.d = *rc::gen::inRange<Index>(1, 9), p.dv = *rc::gen::inRange<Index>(1, 5);
      const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
      std::mt19937_64 rng(seed);
      std::normal_distribution<double> N;
      p.resize_buffers();
      for (auto* x : {&p.q, &p.k, &p.v})
        for (double& e : *x) e = static_cast<float>(N(rng));
      auto ro = engine_only();
      ro.chunk = *rc::gen::inRange<Index>(1, p.n + 2);
      // Half the cases take magnitudes from the double engine (as large heads do).
      if (*rc::gen::arbitrary<bool>()) ro.double_magnitudes_above = 0;
      const engine::Reference ref = engine::compute_reference(p, ro);
      RC_ASSERT(ref.stats.fast == ref.stats.heads);
      Tally tally;
      compare_certified(p, ref, tally);
      if (tally.mismatched) RC_FAIL(std::to_string(tally.mismatched) + " certified elements differ from RN(exact), first " + tally.first);
      RC_CLASSIFY(tally.certified < tally.compared, "some elements not certified");
      if (!o.normalize) certified += tally.certified, compared += tally.compared;
    });
  std::cout << "certified " << certified << " of " << compared << " elements of unnormalized problems\n";
  CHECK(certified >= compared * 99 / 100);
}

TEST_CASE("fast reference: certified elements equal every golden fixture's certified values", "[fast][golden]") {
  size_t files = 0, compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HLA_SOURCE_DIR) + "/fixtures")) {
    if (entry.path().extension() != ".safetensors") continue;
    const io::Fixture f = io::read_fixture(entry.path());
    const BatchProblem& p = f.problem;
    if (!p.all_finite() || !fast::supports(p.opt.variant)) continue;
    const engine::Reference ref = engine::compute_reference(p, engine_only());
    INFO(entry.path().filename().string());
    REQUIRE(ref.stats.fast == ref.stats.heads);
    size_t mismatched = 0, both = 0;
    auto cmp = [&](const std::vector<double>& mine, const std::vector<uint8_t>& my_flags, const std::vector<double>& theirs,
                   const std::vector<uint8_t>& their_flags) {
      for (size_t i = 0; i < mine.size(); ++i) {
        const bool theirs_certified = f.reference_bits == 0 || their_flags.empty() || !(their_flags[i] & engine::kUncertified);
        if ((my_flags[i] & engine::kUncertified) || !theirs_certified) continue;
        ++both;
        if (!(mine[i] == theirs[i])) ++mismatched;
      }
    };
    cmp(ref.out, ref.flags, f.ref_out, f.flags);
    cmp(ref.den, ref.den_flags, f.ref_den, f.den_flags);
    CHECK(mismatched == 0);
    compared += both;
    ++files;
  }
  std::cout << "fast reference vs golden: " << files << " fixtures, " << compared << " elements certified by both, compared bit for bit\n";
  CHECK(files > 50);
}

// ---- The checker's baseline at scale (check.hpp fast_ours): emulated precisions. ----

namespace {

template <class E> float eigen_round(float x) { return static_cast<float>(E(x)); }

float round_kind(int kind, float x) {
  if (kind == 1) return eigen_round<Eigen::bfloat16>(x);
  if (kind == 2) return eigen_round<Eigen::half>(x);
  return x;
}

// A finite float of kind `kind`: random bits for f32/bf16; for f16 a random
// significand and an exponent in f16's range (subnormals, and near 65504, included).
rc::Gen<float> kind_value(int kind) {
  return rc::gen::map(rc::gen::pair(rc::gen::arbitrary<uint32_t>(), rc::gen::inRange(-26, 17)), [kind](std::pair<uint32_t, int> r) {
    float x;
    std::memcpy(&x, &r.first, 4);
    if (!std::isfinite(x)) x = 1.5f;
    if (kind == 2) x = std::ldexp(std::frexp(x, &r.second), r.second);
    return round_kind(kind, x);
  });
}

}  // namespace

TEST_CASE("fast baseline: emulated products and sums round as Eigen::bfloat16 / Eigen::half / float", "[fast]") {
  for (int kind : {0, 1, 2})
    prop("kind " + std::to_string(kind) + ": the kernels' rounding (scalar and vector) equals Eigen's, ties and overflow included", [kind] {
      const float a1 = *kind_value(kind), b1 = *kind_value(kind), a2 = *kind_value(kind), b2 = *kind_value(kind);
      // Eigen: every operation in the 16-bit type (float for kind 0).
      auto eig = [&](float x, float y, float z, float w) {
        if (kind == 1) return static_cast<float>(Eigen::bfloat16(x) * Eigen::bfloat16(y) + Eigen::bfloat16(z) * Eigen::bfloat16(w));
        if (kind == 2) return static_cast<float>(Eigen::half(x) * Eigen::half(y) + Eigen::half(z) * Eigen::half(w));
        return x * y + z * w;
      };
      const float want = eig(a1, b1, a2, b2), want1 = eig(a1, b1, 0, 0);
      // Vector path: gemm_f with k = 2 (C = R(R(C + R(a1 b1)) + R(a2 b2)), C = 0) in lane 5 of 16.
      std::vector<float> A{a1, a2}, B(2 * fast::kPadF, 0.0f), C(fast::kPadF, 0.0f);
      B[5] = b1, B[fast::kPadF + 5] = b2;
      fast::kernels().gemm_f(kind, 1, fast::kPadF, 2, A.data(), 2, false, B.data(), fast::kPadF, C.data(), fast::kPadF, false, false);
      // Scalar path: mul_f then add_f.
      float x = a1, y = b1, z = a2, w = b2;
      fast::kernels().mul_f(kind, 1, &x, &y);
      fast::kernels().mul_f(kind, 1, &z, &w);
      float s = 0.0f;
      fast::kernels().add_f(kind, 1, &s, &x);
      fast::kernels().add_f(kind, 1, &s, &z);
      auto same = [](float p, float q) { return (std::isnan(p) && std::isnan(q)) || std::memcmp(&p, &q, 4) == 0 || (p == 0 && q == 0); };
      RC_ASSERT(same(x, want1));
      RC_ASSERT(same(C[5], want));
      RC_ASSERT(same(s, want));
    });
}

TEST_CASE("fast baseline: our orders at scale are honest (rule 2 holds) in every precision", "[fast]") {
  for (Variant v : variants_where([](const VariantInfo& r) { return r.fast_engine; }))
    prop(to_string(v) + ": fast streaming and chunked orders within the a priori bound", [v] {
      BatchProblem p;
      p.opt = *options_gen({.variant = v, .random_scale = true});
      p.dtype = DType::f32;
      p.batch = 1, p.heads = 2, p.kv_heads = *rc::gen::element<Index>(1, 2);
      p.n = *rc::gen::inRange<Index>(1, 60), p.d = *rc::gen::inRange<Index>(1, 12), p.dv = *rc::gen::inRange<Index>(1, 6);
      std::mt19937_64 rng(*rc::gen::arbitrary<uint64_t>());
      std::normal_distribution<double> N;
      p.resize_buffers();
      for (auto* x : {&p.q, &p.k, &p.v})
        for (double& e : *x) e = static_cast<float>(N(rng));
      const engine::Reference ref = engine::compute_reference(p);
      for (engine::Precision prec : {engine::Precision::f64, engine::Precision::f32, engine::Precision::bf16, engine::Precision::f16})
        for (const engine::BaselineForm f :
             {engine::BaselineForm{Form::streaming}, engine::BaselineForm{Form::chunked_matmul, 8},
              engine::BaselineForm{Form::chunked_matmul, 16}, engine::BaselineForm{Form::streaming_paper_state}}) {
          if (f.form == Form::streaming_paper_state && v != Variant::hla2) continue;
          check::CheckOptions co;
          co.precision = prec;
          // The paper state subtracts partial sums: judged in its own class.
          if (f.form == Form::streaming_paper_state) co.form_class = engine::FormClass::state_difference;
          const check::Report r = check::check(p, ref, engine::fast_ours(p, prec, f), co);
          // f16's range is small: a third-order state may overflow it (as ours() does); that is not an error of the order.
          RC_CLASSIFY(r.nonfinite > 0, "an f16/bf16 state overflowed");
          if (r.nonfinite > 0) continue;
          if (r.over_bound > 0) RC_FAIL(f.name() + " in " + engine::to_string(prec) + ": " + r.text());
        }
    });
}

TEST_CASE("fast engine: every kernel target computes the same bits", "[fast]") {
  prop("generic, AVX2 and AVX-512 kernels agree bit for bit (double-double, double, emulated f32/bf16/f16)", [] {
    const Variant v = *rc::gen::elementOf(variants_where([](const VariantInfo& r) { return r.fast_engine; }));
    Options o = *options_gen({.variant = v, .random_scale = true});
    o.normalize = false;
    const auto p = gaussian_problem(o, *rc::gen::inRange<Index>(1, 70), *rc::gen::inRange<Index>(1, 20), *rc::gen::inRange<Index>(1, 12),
                                    *rc::gen::arbitrary<uint64_t>());
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 2);
    std::vector<std::vector<double>> runs;
    for (const char* name : {"generic", "avx2", "avx512"}) {
      const fast::Kernels* k = fast::kernels_named(name);
      if (!k) continue;
      fast::use_kernels(k);
      std::vector<double> bits;
      const auto dd = fast::evaluate_head(head_of<DD>(p, w));
      bits.insert(bits.end(), dd.val.hi.begin(), dd.val.hi.end());
      bits.insert(bits.end(), dd.val.lo.begin(), dd.val.lo.end());
      bits.insert(bits.end(), dd.mag.hi.begin(), dd.mag.hi.end());
      const auto db = fast::evaluate_head(head_of<double>(p, w));
      bits.insert(bits.end(), db.val.x.begin(), db.val.x.end());
      bits.insert(bits.end(), db.mag.x.begin(), db.mag.x.end());
      BatchProblem bp;
      bp.opt = o, bp.dtype = DType::f32, bp.batch = 1, bp.heads = 1, bp.kv_heads = 1, bp.n = p.n(), bp.d = p.d(), bp.dv = p.dv();
      bp.resize_buffers();
      for (Index t = 0; t < p.n(); ++t) {
        for (Index c = 0; c < p.d(); ++c)
          bp.q[bp.q_index(0, 0, t, c)] = to_double(p.q(t, c)), bp.k[bp.k_index(0, 0, t, c)] = to_double(p.k(t, c));
        for (Index c = 0; c < p.dv(); ++c) bp.v[bp.v_index(0, 0, t, c)] = to_double(p.v(t, c));
      }
      for (engine::Precision prec : {engine::Precision::f32, engine::Precision::bf16, engine::Precision::f16})
        for (const engine::BaselineForm f : {engine::BaselineForm{Form::streaming}, engine::BaselineForm{Form::chunked_matmul, w}}) {
          const auto c = engine::fast_ours(bp, prec, f);
          bits.insert(bits.end(), c.out.begin(), c.out.end());
          bits.insert(bits.end(), c.den.begin(), c.den.end());
        }
      runs.push_back(std::move(bits));
    }
    fast::use_kernels(nullptr);
    for (size_t i = 1; i < runs.size(); ++i) {
      RC_ASSERT(runs[i].size() == runs[0].size());
      RC_ASSERT(std::memcmp(runs[i].data(), runs[0].data(), runs[0].size() * sizeof(double)) == 0);
    }
  });
}
