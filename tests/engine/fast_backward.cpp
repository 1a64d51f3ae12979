// The fast engine's backward (hla/fast/backward.hpp): its algebra equals the
// naive gradient exactly (rationals), from any initial state too, with the
// state's gradient; its magnitudes are the SPEC §9 magnitudes; its running
// error bound holds in double-double and in double (exact comparison with the
// rational gradient); and the bound is not vacuous (a double-precision
// gradient violates the double-double bound); the certified gradient
// reference built on it equals the correctly rounded exact gradient wherever
// it certifies, on random instances (GQA, packed sequences, initial states,
// normalize add and clamp) and on every golden gradient fixture.
#include "hla/backward.hpp"
#include "hla/check/gradient.hpp"
#include "hla/fast/backward.hpp"
#include "hla/io/fixture.hpp"
#include "hla/state.hpp"

#include "../../properties/backward_gen.hpp"
#include "engine_exact.hpp"
#include "../../properties/harness.hpp"

#include <filesystem>

using namespace hla;
using namespace hla::test;
using fast::DD;

namespace {

const std::vector<Variant> kEngineVariants = variants_where([](const VariantInfo& r) { return r.fast_engine && r.has_backward; });

template <class S> S scalar_of(const Rational& x) {
  if constexpr (std::is_same_v<S, Rational>) return x;
  else if constexpr (std::is_same_v<S, DD>) return DD{to_double(x), 0};
  else return to_double(x);
}

// The upstream ∂L/∂Y = [do | dden] (n × (dv + 1)) as an exact engine input.
template <class S> fast::BMat<S> upstream_of(const Mat<Rational>& G) {
  fast::Dense<S> m = fast::Dense<S>::zero(G.rows(), G.cols());
  for (Index t = 0; t < G.rows(); ++t)
    for (Index c = 0; c < G.cols(); ++c) fast::put_entry(m, t, c, scalar_of<S>(G(t, c)));
  return fast::exact_input(std::move(m));
}

template <class S> Mat<Rational> rational_of(const fast::Dense<S>& m, Index cols) {
  Mat<Rational> x(m.rows, cols);
  for (Index i = 0; i < m.rows; ++i)
    for (Index j = 0; j < cols; ++j) x(i, j) = rat(get(m, i, j));
  return x;
}

// A state for the problem: every used member random, unused members zero.
StateMats<Rational> random_state(const Problem<Rational>& p) {
  StateMats<Rational> X;
  for (const StatePart& m : state_layout(p.opt, p.d(), p.dv()))
    X.push_back(m.role == StatePart::Role::unused ? Mat<Rational>(Mat<Rational>::Zero(m.rows, m.width())) : full_matrix(m.rows, m.width()));
  return X;
}

// The engine's head, from a state when X0 is given.
template <class S> fast::FastHead<S> engine_head(const Problem<Rational>& p, Index w, const StateMats<Rational>* X0) {
  fast::FastHead<S> h = head_of<S>(p, w);
  if (X0)
    fast::set_initial_carry(h, state_layout(p.opt, p.d(), p.dv()),
                            [&](size_t i, Index r, Index c) { return scalar_of<S>((*X0)[i](r, c)); });
  return h;
}

template <class S> fast::HeadGradient<S> engine_backward(const fast::FastHead<S>& h, const Mat<Rational>& G) {
  return fast::backward_head(h, fast::forward_tape(h, false), upstream_of<S>(G));
}

// The first difference between the engine's gradient and the wanted one ("" when none).
std::string gradient_mismatch(const fast::HeadGradient<Rational>& r, const Gradient<Rational>& want, const Gradient<Rational>& mag) {
  const Index dv = want.dv.cols();
  struct Part {
    const char* name;
    const fast::HeadResult<Rational>& got;
    const Mat<Rational>& want;
    const Mat<Rational>& mag;
  };
  for (const Part& x : {Part{"dq", r.dq, want.dq, mag.dq}, Part{"dk", r.dk, want.dk, mag.dk}, Part{"dv", r.dv, want.dv, mag.dv}}) {
    const Index cols = x.want.cols();
    if (rational_of(x.got.val, cols) != x.want) {
      for (Index t = 0; t < x.want.rows(); ++t)
        for (Index c = 0; c < cols; ++c)
          if (x.got.val.at(t, c) != x.want(t, c))
            return std::string(x.name) + "[t=" + std::to_string(t) + ", c=" + std::to_string(c) + "]: engine " +
                   to_string(x.got.val.at(t, c)) + ", want " + to_string(x.want(t, c));
    }
    if (rational_of(x.got.mag, cols) != x.mag) return std::string(x.name) + ": magnitudes differ";
  }
  (void)dv;
  return "";
}

Mat<Rational> upstream_matrix(const Problem<Rational>& p) {
  Mat<Rational> G(p.n(), p.dv() + 1);
  const Upstream u = upstream_gen(p);
  G.leftCols(p.dv()) = u.dout;
  G.col(p.dv()) = u.dden;
  return G;
}

void per_variant(Variant v) {
  const std::string name = to_string(v);
  prop(name + ": the engine's backward equals the naive gradient (exact rationals), magnitudes too", [v] {
    auto p = backward_problem(v);
    p.opt.normalize = false;  // the upstream is ∂L/∂Y as given (the caller forms it for a normalized problem)
    const Mat<Rational> G = upstream_matrix(p);
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 3);
    const auto r = engine_backward(engine_head<Rational>(p, w, nullptr), G);
    const Mat<Rational> dout = G.leftCols(p.dv());
    const Vec<Rational> dden = G.col(p.dv());
    const std::string bad = gradient_mismatch(r, backward(p, dout, dden, BackwardForm::naive), backward_magnitude(p, dout, dden));
    if (!bad.empty()) RC_FAIL(bad);
    RC_CLASSIFY(w < p.n(), "several chunks");
  });
  prop(name + ": from any initial state, the engine's backward equals the streaming backward, dstate included (exact)", [v] {
    auto p = backward_problem(v);
    p.opt.normalize = false;
    const Mat<Rational> G = upstream_matrix(p);
    const StateMats<Rational> X0 = random_state(p);
    const Index w = *rc::gen::inRange<Index>(1, p.n() + 3);
    const auto r = engine_backward(engine_head<Rational>(p, w, &X0), G);
    const Mat<Rational> dout = G.leftCols(p.dv());
    const Vec<Rational> dden = G.col(p.dv());
    const GradientFrom<Rational> want = backward_from(p, X0, dout, dden, BackwardForm::streaming);
    const GradientFrom<Rational> mag = backward_magnitude_from(p, X0, dout, dden);
    const std::string bad = gradient_mismatch(r, want.tokens, mag.tokens);
    if (!bad.empty()) RC_FAIL(bad);
    const auto layout = state_layout(p.opt, p.d(), p.dv());
    StateMats<Rational> ds, dm;
    for (size_t i = 0; i < r.dstate.size(); ++i) {
      ds.push_back(rational_of(r.dstate[i].val, r.dstate[i].cols()));
      dm.push_back(rational_of(r.dstate[i].mag, r.dstate[i].cols()));
    }
    symmetrize_gradient(layout, ds);
    symmetrize_gradient(layout, dm);
    for (size_t i = 0; i < layout.size(); ++i) {
      if (layout[i].role == StatePart::Role::unused) continue;
      if (ds[i] != want.dstate[i]) RC_FAIL("dstate." + layout[i].name + " differs");
      if (dm[i] != mag.dstate[i]) RC_FAIL("dstate." + layout[i].name + ": magnitudes differ");
    }
    RC_CLASSIFY(p.n() > 0, "tokens after the state");
  });
}

// A gradient problem of doubles: Gaussian inputs and upstream rounded to f32.
struct DoubleCase {
  Problem<Rational> p;
  Mat<Rational> G;
  Index w;
};
rc::Gen<DoubleCase> double_case(Variant v) {
  return rc::gen::apply(
      [](Options o, Index n, Index d, Index dv, uint64_t seed, Index w) {
        o.normalize = false;
        DoubleCase c{gaussian_problem(o, n, d, dv, seed), Mat<Rational>(n, dv + 1), std::max<Index>(1, w)};
        const Problem<Rational> up = gaussian_problem(o, n, dv + 1, 1, seed ^ 0x9e3779b97f4a7c15ull);
        c.G = up.q;
        return c;
      },
      options_gen({.variant = v, .random_scale = true}), rc::gen::inRange<Index>(0, 41), rc::gen::inRange<Index>(1, 9),
      rc::gen::inRange<Index>(1, 7), rc::gen::arbitrary<uint64_t>(), rc::gen::inRange<Index>(1, 44));
}

// |computed − exact| ≤ phi·unit·M + alpha for every element of dq, dk, dv ("" when it holds).
template <class S>
std::string bound_violation(const fast::HeadGradient<S>& r, const Gradient<Rational>& exact, const Gradient<Rational>& mag) {
  const Rational unit = to_rational(fast::Arith<S>::unit);
  struct Part {
    const char* name;
    const fast::HeadResult<S>& got;
    const Mat<Rational>& want;
    const Mat<Rational>& mag;
  };
  for (const Part& x : {Part{"dq", r.dq, exact.dq, mag.dq}, Part{"dk", r.dk, exact.dk, mag.dk}, Part{"dv", r.dv, exact.dv, mag.dv}})
    for (Index t = 0; t < x.want.rows(); ++t) {
      const Rational phi = to_rational(x.got.phi[static_cast<size_t>(t)]);
      const Rational alpha = x.got.tiny ? to_rational(x.got.alpha[static_cast<size_t>(t)]) : Rational(0);
      for (Index c = 0; c < x.want.cols(); ++c) {
        const Rational e = phi * unit * x.mag(t, c) + alpha;
        if (abs_r(rat(get(x.got.val, t, c)) - x.want(t, c)) > e)
          return std::string(x.name) + "[t=" + std::to_string(t) + ", c=" + std::to_string(c) + "]: error " +
                 std::to_string(to_double(abs_r(rat(get(x.got.val, t, c)) - x.want(t, c)))) + " > bound " + std::to_string(to_double(e));
      }
    }
  return "";
}

template <class S> void bound_holds(Variant v) {
  const auto c = *double_case(v);
  const auto r = engine_backward(engine_head<S>(c.p, c.w, nullptr), c.G);
  RC_ASSERT(r.finite);
  const Mat<Rational> dout = c.G.leftCols(c.p.dv());
  const Vec<Rational> dden = c.G.col(c.p.dv());
  const std::string bad = bound_violation(r, backward(c.p, dout, dden, BackwardForm::streaming), backward_magnitude(c.p, dout, dden));
  if (!bad.empty()) RC_FAIL(bad);
}

}  // namespace

TEST_CASE("fast backward: la1", "[fast][backward]") { per_variant(Variant::la1); }
TEST_CASE("fast backward: hla2", "[fast][backward]") { per_variant(Variant::hla2); }
TEST_CASE("fast backward: ahla", "[fast][backward]") { per_variant(Variant::ahla); }
TEST_CASE("fast backward: hla3", "[fast][backward]") { per_variant(Variant::hla3); }

TEST_CASE("fast backward: the running bound holds in double-double and in double (exact comparison)", "[fast][backward]") {
  for (Variant v : kEngineVariants) {
    prop(to_string(v) + ": double-double within its bound", [v] { bound_holds<DD>(v); });
    prop(to_string(v) + ": double within its bound", [v] { bound_holds<double>(v); });
  }
}

// Control: the double-double bound is tight enough to reject a gradient computed in double.
TEST_CASE("fast backward: the double-double bound rejects a double-precision gradient (control)", "[fast][backward]") {
  for (Variant v : kEngineVariants) {
    Options o;
    o.variant = v;
    o.gamma = Rational(7, 8);
    const auto p = gaussian_problem(o, 40, 8, 4, 2026);
    const Mat<Rational> G = gaussian_problem(o, 40, 5, 1, 7).q;
    const auto dd = engine_backward(engine_head<DD>(p, 16, nullptr), G);
    const auto dbl = engine_backward(engine_head<double>(p, 16, nullptr), G);
    const Mat<Rational> dout = G.leftCols(p.dv());
    const Vec<Rational> dden = G.col(p.dv());
    const auto exact = backward(p, dout, dden, BackwardForm::streaming);
    const auto mag = backward_magnitude(p, dout, dden);
    INFO(to_string(v));
    CHECK(bound_violation(dd, exact, mag).empty());
    fast::HeadGradient<DD> as_dd = dd;
    for (auto [to, from] : {std::pair{&as_dd.dq, &dbl.dq}, {&as_dd.dk, &dbl.dk}, {&as_dd.dv, &dbl.dv}})
      for (Index t = 0; t < from->val.rows; ++t)
        for (Index c = 0; c < from->val.cols; ++c) to->val.set(t, c, DD{from->val.at(t, c), 0});
    CHECK_FALSE(bound_violation(as_dd, exact, mag).empty());
    // And the bound is a small multiple of 2^-106 of the magnitude (it certifies).
    for (const auto* x : {&dd.dq, &dd.dk, &dd.dv})
      for (double phi : x->phi) CHECK(phi < 0x1p16);
  }
}

namespace {

// A batch problem of f32 Gaussian inputs: B, H query heads over Hkv K/V heads,
// packed sequences sometimes, an f32 initial state sometimes.
struct BatchCase {
  BatchProblem p;
  std::vector<double> dout, dden;
};
rc::Gen<BatchCase> batch_case(Variant v) {
  return rc::gen::apply(
      [v](Options o, Index B, Index Hkv, Index group, Index n, Index d, Index dv, uint64_t seed, int shape, bool with_dden) {
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> N;
        auto f32 = [&] { return static_cast<double>(static_cast<float>(N(rng))); };
        BatchCase c;
        BatchProblem& p = c.p;
        p.opt = o, p.dtype = DType::f32;
        const bool packed = shape == 1 && n >= 2;
        p.batch = packed ? 1 : B, p.kv_heads = Hkv, p.heads = Hkv * group, p.n = n, p.d = d, p.dv = dv;
        p.resize_buffers();
        for (auto* x : {&p.q, &p.k, &p.v})
          for (double& e : *x) e = f32();
        if (packed) p.offsets = {0, n / 2, n};
        if (shape == 2) {  // an initial state per sequence and query head
          p.state_dtype = DType::f32;
          const auto layout = state_layout(o, d, dv);
          p.state.resize(static_cast<size_t>(p.sequence_count() * p.heads * state_size(layout)));
          size_t at = 0;
          while (at < p.state.size())
            for (const StatePart& m : layout)
              for (Index i = 0; i < m.size(); ++i) p.state[at++] = m.role == StatePart::Role::unused ? 0.0 : f32() / 4;
        }
        c.dout.resize(static_cast<size_t>(p.batch * p.heads * p.n * p.dv));
        for (double& e : c.dout) e = f32();
        if (o.normalize || with_dden) {
          c.dden.resize(static_cast<size_t>(p.batch * p.heads * p.n));
          for (double& e : c.dden) e = f32();
        }
        (void)v;
        return c;
      },
      options_gen({.variant = v, .random_scale = true}), rc::gen::inRange<Index>(1, 3), rc::gen::inRange<Index>(1, 3),
      rc::gen::inRange<Index>(1, 3), rc::gen::inRange<Index>(1, 40), rc::gen::inRange<Index>(1, 9), rc::gen::inRange<Index>(1, 6),
      rc::gen::arbitrary<uint64_t>(), rc::gen::element(0, 1, 2), rc::gen::arbitrary<bool>());
}

std::string hexf(double x) {
  char b[40];
  std::snprintf(b, sizeof b, "%a", x);
  return b;
}

engine::GradientOptions engine_gradients_only() {
  engine::GradientOptions g;
  g.recompute_work = 0;  // never binary128: every certified element is the engine's
  return g;
}

// Counts the certified elements of g (values, dstate) that differ from want; names the first.
struct GradTally {
  size_t compared = 0, certified = 0, mismatched = 0;
  std::string first;
  void add(const char* name, const std::vector<double>& got, const std::vector<uint8_t>& flags, const std::vector<double>& want) {
    for (size_t i = 0; i < got.size(); ++i) {
      ++compared;
      if (flags[i] & engine::kUncertified) continue;
      ++certified;
      if (!(got[i] == want[i]) && mismatched++ == 0)
        first = std::string(name) + "[" + std::to_string(i) + "]: " + hexf(got[i]) + ", exact " + hexf(want[i]);
    }
  }
};

}  // namespace

TEST_CASE("fast gradient reference: certified elements are the correctly rounded exact gradient (random instances)", "[fast][backward]") {
  size_t certified = 0, compared = 0;
  for (Variant v : kEngineVariants)
    prop(to_string(v) + ": certified == RN(exact gradient)", [v, &certified, &compared] {
      const BatchCase c = *batch_case(v);
      const BatchProblem& p = c.p;
      engine::ReferenceOptions exact, engine;
      exact.threads = engine.threads = 1;
      engine.exact_max_n = 0;
      engine::GradientReference e;
      try {
        e = engine::compute_gradient_reference(p, engine::compute_reference(p, exact), c.dout, c.dden);
      } catch (const std::domain_error&) {
        RC_DISCARD("den + eps = 0 exactly");
      }
      RC_ASSERT(e.bits == 0);
      const engine::GradientReference g =
          engine::compute_gradient_reference(p, engine::compute_reference(p, engine), c.dout, c.dden, engine_gradients_only());
      GradTally t;
      t.add("dq", g.dq, g.dq_flags, e.dq);
      t.add("dk", g.dk, g.dk_flags, e.dk);
      t.add("dv", g.dv, g.dv_flags, e.dv);
      t.add("dstate", g.dstate, g.dstate_flags, e.dstate);
      if (t.mismatched)
        RC_FAIL(std::to_string(t.mismatched) + " certified gradient elements differ from RN(exact), first " + t.first + "; " +
                p.opt.describe() + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
                " Hkv=" + std::to_string(p.kv_heads) + " n=" + std::to_string(p.n) + " d=" + std::to_string(p.d) +
                " dv=" + std::to_string(p.dv) + (p.has_state() ? " state" : "") + (p.offsets.empty() ? "" : " packed"));
      // Stored magnitudes bound the exact gradients.
      for (auto [x, m] : {std::pair{&e.dq, &g.mag_dq}, {&e.dk, &g.mag_dk}, {&e.dv, &g.mag_dv}, {&e.dstate, &g.mag_dstate}})
        for (size_t i = 0; i < x->size(); ++i) RC_ASSERT(std::fabs((*x)[i]) <= (*m)[i] * (1 + 0x1p-52));
      RC_CLASSIFY(p.has_state(), "from a state");
      RC_CLASSIFY(p.opt.normalize, "normalized");
      RC_CLASSIFY(t.certified < t.compared, "some elements not certified");
      certified += t.certified, compared += t.compared;
    });
  std::cout << "fast gradient reference: certified " << certified << " of " << compared << " elements\n";
  CHECK(certified >= compared * 99 / 100);  // control: certification is not vacuous
}

TEST_CASE("fast gradient reference: certified elements equal every golden gradient fixture's exact gradients", "[fast][backward][golden]") {
  size_t files = 0, compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HLA_SOURCE_DIR) + "/fixtures")) {
    if (entry.path().extension() != ".safetensors") continue;
    const io::Fixture f = io::read_fixture(entry.path());
    if (!f.gradients || !fast::supports(f.problem.opt.variant)) continue;
    const BatchProblem& p = f.problem;
    INFO(entry.path().filename().string());
    REQUIRE(f.reference_bits == 0);  // the golden gradients are exact rationals, rounded once
    engine::ReferenceOptions engine;
    engine.exact_max_n = 0;
    const engine::GradientReference g =
        engine::compute_gradient_reference(p, engine::compute_reference(p, engine), f.dout, f.dden, engine_gradients_only());
    GradTally t;
    t.add("dq", g.dq, g.dq_flags, f.ref_dq);
    t.add("dk", g.dk, g.dk_flags, f.ref_dk);
    t.add("dv", g.dv, g.dv_flags, f.ref_dv);
    if (p.has_state()) t.add("dstate", g.dstate, g.dstate_flags, f.ref_dstate);
    CHECK(t.mismatched == 0);
    if (t.mismatched) FAIL_CHECK(t.first);
    CHECK(t.certified * 100 >= t.compared * 99);
    compared += t.certified;
    ++files;
  }
  std::cout << "fast gradient reference vs golden: " << files << " fixtures, " << compared << " certified elements compared bit for bit\n";
  CHECK(files >= 20);
}
