// The adjoint identity (SPEC §9), which needs no hand-derived algebra: for a
// random direction h = (h_q, h_k, h_v),
//   ⟨dq, h_q⟩ + ⟨dk, h_k⟩ + ⟨dv, h_v⟩ = d/dε L(x + εh) at ε = 0,
// the right side computed exactly by the existing forward forms (naive and
// streaming) evaluated in dual numbers over rationals, through the loss with
// the forward's own normalizer. Every option: masked/unmasked, γ, λ, scale,
// normalize off/add/clamp.
#include "hla/backward.hpp"
#include "hla/evaluate.hpp"
#include "hla/state.hpp"

#include "backward_gen.hpp"
#include "dual.hpp"
#include "harness.hpp"
#include "per_backward.hpp"

using namespace hla;
using namespace hla::test;

namespace {

using D = Dual<Rational>;

Mat<D> lift(const Mat<Rational>& x, const Mat<Rational>& dx) {
  Mat<D> m(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j) m(i, j) = D(x(i, j), dx(i, j));
  return m;
}
Mat<D> lift(const Mat<Rational>& x) { return lift(x, Mat<Rational>::Zero(x.rows(), x.cols())); }

// The head of p moved to x + εh (h_q before scale, as the problem's q).
Head<D> dual_head(const Problem<Rational>& p, const Mat<Rational>& hq, const Mat<Rational>& hk, const Mat<Rational>& hv) {
  const Head<Rational> r = make_head(p);
  Mat<Rational> hv1 = Mat<Rational>::Zero(p.n(), p.dv() + 1);
  hv1.leftCols(p.dv()) = hv;
  Head<D> h{lift(r.q, p.opt.scale * hq), lift(r.k, hk), lift(r.v, hv1), D(r.gamma), D(r.lambda), r.masked, {}, {}};
  for (const Rational& g : r.gpow) h.gpow.emplace_back(g);
  return h;
}

struct Direction {
  Mat<Rational> q, k, v;
};
Direction direction_gen(const Problem<Rational>& p) {
  return {full_matrix(p.n(), p.d()), full_matrix(p.n(), p.d()), full_matrix(p.n(), p.dv())};
}

// ⟨∇L, h⟩ from a gradient.
Rational pairing(const Gradient<Rational>& g, const Direction& h) { return inner(g.dq, h.q) + inner(g.dk, h.k) + inner(g.dv, h.v); }

// d/dε L(x + εh) by operator V's forward form f in dual numbers.
template <class V> Rational dual_derivative(const Problem<Rational>& p, const Upstream& up, const Direction& dir, Form f) {
  const Head<D> h = dual_head(p, dir.q, dir.k, dir.v);
  const Mat<D> Y = f == Form::naive ? V::naive(h) : V::streaming(h);
  const Mat<D> dden = lift(Mat<Rational>(up.dden));
  return loss(p.opt, Y, lift(up.dout), Vec<D>(dden.col(0)), D(p.opt.eps)).tan;
}

template <class V> struct AdjointIdentity {
  static void run() {
    prop(to_string(V::variant) + ": ⟨∇L, h⟩ = d/dε L(x + εh) through the dual-number forward (naive, streaming)", [] {
      const auto p = backward_problem(V::variant);
      const auto up = upstream_gen(p);
      const auto dir = direction_gen(p);
      const Rational want = pairing(backward(p, up.dout, up.dden, BackwardForm::naive), dir);
      RC_ASSERT(dual_derivative<V>(p, up, dir, Form::naive) == want);
      RC_ASSERT(dual_derivative<V>(p, up, dir, Form::streaming) == want);
      RC_CLASSIFY(want != 0, "derivative nonzero");
      RC_TAG(p.opt.normalize ? to_string(p.opt.eps_mode) : std::string("unnormalized"));
      if (p.opt.normalize && p.opt.eps_mode == EpsMode::clamp) {
        const Vec<Rational> den = evaluate(p, Form::naive).den.cwiseAbs();
        RC_CLASSIFY((den.array() < p.opt.eps).any(), "clamp: a row with |den| < eps");
        RC_CLASSIFY((den.array() == p.opt.eps).any(), "clamp: a row at the kink |den| = eps");
      }
    });
  }
};

[[maybe_unused]] const bool dual_registered = per_backward<AdjointIdentity>("adjoint identity through dual numbers");

}  // namespace

namespace {

// Initial states (SPEC §8, §9): B's forward recurrence from a state, and the
// gradient of that state that the reverse recurrence hands back.
template <class B> StateOf<B, Rational> random_state(const Head<Rational>& h) {
  auto X = B::zero_state(h);
  std::apply([](auto&... m) { ((m = full_matrix(m.rows(), m.cols())), ...); }, X.members());
  return X;
}

// f(member I of each state).
template <size_t I, class F, class Tied> void call_on_member(F& f, const Tied& tied) {
  std::apply([&](const auto&... m) { f(std::get<I>(m)...); }, tied);
}
// f(member of a, member of b, ...) for each member, in order.
template <class F, class... St> void zip_members(F&& f, St&... states) {
  const auto tied = std::make_tuple(states.members()...);
  constexpr size_t k = std::tuple_size_v<std::remove_cvref_t<decltype(std::get<0>(tied))>>;
  [&]<size_t... I>(std::index_sequence<I...>) { (call_on_member<I>(f, tied), ...); }
  (std::make_index_sequence<k>{});
}

// d/dε L(x + εh; X0 + εH) of B's forward from X0 in dual numbers.
template <class B>
Rational dual_derivative_from(const Problem<Rational>& p, const Upstream& up, const Direction& dir, const StateOf<B, Rational>& X0,
                              const StateOf<B, Rational>& H) {
  const Head<D> hd = dual_head(p, dir.q, dir.k, dir.v);
  auto Xd = B::zero_state(hd);
  zip_members([](Mat<D>& x, const Mat<Rational>& v, const Mat<Rational>& t) { x = lift(v, t); }, Xd, X0, H);
  const Mat<D> dden = lift(Mat<Rational>(up.dden));
  return loss(p.opt, forward_from<B>(hd, Xd), lift(up.dout), Vec<D>(dden.col(0)), D(p.opt.eps)).tan;
}

template <class V> struct StateGradient {
  using B = BackwardOf<V::variant>;
  static void run() {
    prop(to_string(V::variant) + ": the forward from a state continues the sequence (zero state: the streaming form)", [] {
      const auto p = backward_problem(V::variant);
      const Head<Rational> h = make_head(p);
      const Mat<Rational> Y = forward_from<B>(h, B::zero_state(h));
      RC_ASSERT(Y == V::streaming(h));
      const Index m = *rc::gen::inRange<Index>(0, p.n() + 1);
      auto X = B::zero_state(h);
      for (Index t = 0; t < m; ++t) B::advance(h, X, t);
      const Index rest = p.n() - m;
      const Problem<Rational> suffix{p.opt, p.q.bottomRows(rest), p.k.bottomRows(rest), p.v.bottomRows(rest)};
      RC_ASSERT(forward_from<B>(make_head(suffix), X) == Y.bottomRows(rest));
    });
    prop(to_string(V::variant) + ": ⟨∇L, h⟩ + ⟨dX0, H⟩ = d/dε L(x + εh; X0 + εH) from a random initial state X0 (any chunk width)", [] {
      const auto p = backward_problem(V::variant);
      const auto up = upstream_gen(p);
      const auto dir = direction_gen(p);
      const Head<Rational> h = make_head(p);
      const auto X0 = random_state<B>(h), H = random_state<B>(h);
      const Index w = *rc::gen::inRange<Index>(1, p.n() + 2);
      const Rational eps = p.opt.eps;
      const auto r = reverse_chunked<B>(h,
                                        output_adjoint(
                                            p.opt, [&] { return forward_from<B>(h, X0); }, up.dout, up.dden, eps),
                                        w, X0);
      Rational want = pairing(problem_gradient(p.opt, r.grad), dir);
      zip_members([&](const Mat<Rational>& g, const Mat<Rational>& d) { want += inner(g, d); }, r.dX0, H);
      RC_ASSERT(dual_derivative_from<B>(p, up, dir, X0, H) == want);
      RC_CLASSIFY(w < p.n(), "several chunks");
    });
    prop(to_string(V::variant) +
             ": the check layer's backward_from (X0 in the state layout, its dstate) satisfies the same identity, every reverse form",
         [] {
           const auto p = backward_problem(V::variant);
           const auto up = upstream_gen(p);
           const auto dir = direction_gen(p);
           const Head<Rational> h = make_head(p);
           const auto X0 = random_state<B>(h), H = random_state<B>(h);
           const StateMats<Rational> X0m =
               std::apply([](const auto&... m) { return StateMats<Rational>{Mat<Rational>(m)...}; }, X0.members());
           BackwardForm f = *rc::gen::element(BackwardForm::streaming, BackwardForm::chunked, BackwardForm::chunked_matmul);
           if (!has_backward_form(V::variant, f)) f = BackwardForm::chunked;
           const GradientFrom<Rational> g = backward_from(p, X0m, up.dout, up.dden, f, *rc::gen::inRange<Index>(1, p.n() + 2));
           // Its symmetric members' gradient is along symmetric directions (SPEC §9): H symmetrized there.
           const std::vector<StatePart> layout = state_layout(p.opt, p.d(), p.dv());
           auto Hs = H;
           size_t j = 0;
           zip_members(
               [&](Mat<Rational>& d) {
                 if (layout[j++].symmetric) d = Mat<Rational>((d + d.transpose()) / Rational(2));
               },
               Hs);
           Rational want = pairing(g.tokens, dir);
           size_t i = 0;
           zip_members([&](const Mat<Rational>& d) { want += inner(g.dstate[i++], d); }, Hs);
           RC_ASSERT(dual_derivative_from<B>(p, up, dir, X0, Hs) == want);
           RC_TAG(to_string(f));
         });
  }
};

[[maybe_unused]] const bool state_registered = per_backward<StateGradient>("initial state: forward and gradient");

}  // namespace

// At the clamp's kink |den_t| = ε the forward takes D = den (SPEC §9): the
// gradient must follow that branch (D' = 1), as the dual evaluation does.
TEST_CASE("clamp at the kink |den| = eps", "[backward]") {
  prop("hla2: the adjoint identity holds with eps = |den_t| of some row t (clamp)", [] {
    auto p = backward_problem(Variant::hla2);
    p.opt.normalize = true;
    p.opt.eps_mode = EpsMode::clamp;
    const Vec<Rational> den = evaluate(p, Form::naive).den.cwiseAbs();
    RC_PRE((den.array() != 0).any());
    Index t = *rc::gen::inRange<Index>(0, p.n());
    while (den(t) == 0) t = (t + 1) % p.n();
    p.opt.eps = den(t);
    const auto up = upstream_gen(p);
    const auto dir = direction_gen(p);
    RC_ASSERT(dual_derivative<hla2>(p, up, dir, Form::streaming) == pairing(backward(p, up.dout, up.dden), dir));
  });
}

// The identity tells a wrong gradient apart: the gradients of slightly
// different problems (no normalization, no decay) must fail it.
TEST_CASE("the adjoint identity is not vacuous", "[backward]") {
  prop_falsified("hla2: the gradient without normalization passes the identity of the normalized loss", [] {
    auto p = backward_problem(Variant::hla2);
    p.opt.normalize = true;
    const auto up = upstream_gen(p);
    const auto dir = direction_gen(p);
    auto unnormalized = p;
    unnormalized.opt.normalize = false;
    RC_ASSERT(dual_derivative<hla2>(p, up, dir, Form::streaming) == pairing(backward(unnormalized, up.dout, up.dden), dir));
  });
  prop_falsified("ahla: the gradient without decay passes the identity of the decayed loss", [] {
    const auto p = backward_problem({.variant = Variant::ahla, .max_n = 7, .max_d = 3, .force_decay = true});
    const auto up = upstream_gen(p);
    const auto dir = direction_gen(p);
    auto undecayed = p;
    undecayed.opt.gamma = 1;
    RC_ASSERT(dual_derivative<ahla>(p, up, dir, Form::streaming) == pairing(backward(undecayed, up.dout, up.dden), dir));
  });
}
