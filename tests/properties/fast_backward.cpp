// The fast engine's backward (hla/fast/backward.hpp): its algebra equals the
// naive gradient exactly (rationals), from any initial state too, with the
// state's gradient; its magnitudes are the SPEC §9 magnitudes; its running
// error bound holds in double-double and in double (exact comparison with the
// rational gradient); and the bound is not vacuous (a double-precision
// gradient violates the double-double bound).
#include "hla/backward.hpp"
#include "hla/fast/backward.hpp"
#include "hla/state.hpp"

#include "backward_gen.hpp"
#include "engine_exact.hpp"
#include "harness.hpp"

using namespace hla;
using namespace hla::test;
using fast::DD;

namespace {

constexpr Variant kEngineVariants[] = {Variant::la1, Variant::hla2, Variant::ahla, Variant::hla3};

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
  if (X0) fast::set_initial_carry(h, state_layout(p.opt, p.d(), p.dv()), [&](size_t i, Index r, Index c) { return scalar_of<S>((*X0)[i](r, c)); });
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
            return std::string(x.name) + "[t=" + std::to_string(t) + ", c=" + std::to_string(c) + "]: engine " + to_string(x.got.val.at(t, c)) +
                   ", want " + to_string(x.want(t, c));
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
template <class S> std::string bound_violation(const fast::HeadGradient<S>& r, const Gradient<Rational>& exact, const Gradient<Rational>& mag) {
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
