// Every form of every operator equals its naive definition, exactly; hla3 by
// state difference also from a state.
#include "generators.hpp"
#include "harness.hpp"
#include "per_operator.hpp"

#include "hla/state.hpp"

using namespace hla;
using namespace hla::test;

namespace {

void every_form_equals_naive(Variant v) {
  for (Form f : forms_of(v)) {
    if (f == Form::naive) continue;
    prop(to_string(v) + ": form " + to_string(f) + " == naive (num, den, out; every token)", [v, f] {
      const auto p = *problem_gen({.variant = v});
      const Index w = is_chunked(f) ? *rc::gen::inRange<Index>(1, p.n() + 2) : 1;
      RC_TAG(p.opt.masked ? "masked" : "unmasked", p.opt.gamma == 1 ? "gamma=1" : "gamma<1");
      HLA_ASSERT_SAME(evaluate(p, f, w), evaluate(p, Form::naive), to_string(f).c_str(), "naive");
    });
  }
}

}  // namespace

template <class V> struct EveryFormEqualsNaive {
  static void run() { every_form_equals_naive(V::variant); }
};
[[maybe_unused]] const bool every_form_registered = per_operator<EveryFormEqualsNaive>("every form equals the naive definition", "[forms]");

TEST_CASE("hla2 masked with gamma = 1 is ((W Wt) . L) V", "[forms][hla2]") {
  prop("hla2: naive == ((W Wᵀ) ⊙ L) V for γ = 1, masked (SPEC §2)", [] {
    auto p = *problem_gen({.variant = Variant::hla2, .random_masked = false, .random_ridge = false, .random_normalize = false});
    p.opt.gamma = 1;
    const auto [W, L] = masked_scores(p);
    RC_ASSERT(evaluate(p, Form::naive).num == Mat<Rational>((W * W.transpose()).cwiseProduct(L) * p.v));
  });
}

TEST_CASE("ahla with gamma = 1 is ((W W) . L) V", "[forms][ahla]") {
  prop("ahla: naive == ((W W) ⊙ L) V for γ = 1 (SPEC §2)", [] {
    auto p = *problem_gen({.variant = Variant::ahla, .random_normalize = false});
    p.opt.gamma = 1;
    const auto [W, L] = masked_scores(p);
    RC_ASSERT(evaluate(p, Form::naive).num == Mat<Rational>((W * W).cwiseProduct(L) * p.v));
  });
}

TEST_CASE("hla3 masked with gamma = 1 is (((W Wt) . L) W) V", "[forms][hla3]") {
  prop("hla3: naive == (((W Wᵀ) ⊙ L) W) V for γ = 1, masked (SPEC §2)", [] {
    auto p = *problem_gen({.variant = Variant::hla3, .random_masked = false, .random_normalize = false});
    p.opt.gamma = 1;
    const auto [W, L] = masked_scores(p);
    RC_ASSERT(evaluate(p, Form::naive).num == Mat<Rational>((W * W.transpose()).cwiseProduct(L) * W * p.v));
  });
}

TEST_CASE("hla3 by state difference from a state: S*SQ*P - G with SQ0 = 0, G0 = -F0", "[forms][hla3][state]") {
  // The carry our state-difference backward order starts from (engine
  // gradient_paper_state.cpp): a state (S0, P0, F0) without SQ continues as
  // the masked operator with SQ0 = 0 and G0 = −F0, since F_t = S_tSQ_tP_t − G_t
  // obeys F_t = γ³F_{t−1} + (S_tq_t)(q_tᵀP_t) from any (S, SQ, P, G).
  prop("hla3: S·SQ·P − G from (S0, 0, P0, −F0) == the streaming recurrence from (S0, P0, F0) (SPEC §3, §8)", [] {
    const auto p = *problem_gen({.variant = Variant::hla3, .max_n = 10, .max_d = 4, .random_masked = false, .random_normalize = false});
    const Index d = p.d(), dv1 = p.dv() + 1;
    StateMats<Rational> X0;  // layout S, P|z, F|f
    for (const StatePart& m : state_layout(p.opt, d, p.dv())) X0.push_back(*rational_matrix(m.rows, m.width()));
    RC_PRE(X0.size() == 3u);
    const Rational g = p.opt.gamma;
    Mat<Rational> S = X0[0], SQ = Mat<Rational>::Zero(d, d), P = X0[1], G = -X0[2], Y(p.n(), dv1);
    for (Index t = 0; t < p.n(); ++t) {
      const Vec<Rational> q = p.q.row(t).transpose(), k = p.k.row(t).transpose();
      RowVec<Rational> v(dv1);
      v << p.v.row(t), Rational(1);
      const Vec<Rational> a = SQ * k, c = S * a;
      S = g * S + k * k.transpose();
      SQ = g * SQ + q * q.transpose();
      P = g * P + k * v;
      G = g * g * g * G + g * k * (a.transpose() * P) + g * g * c * v;
      Y.row(t) = ((q.transpose() * S) * SQ) * P - q.transpose() * G;
    }
    const Output<Rational> want = evaluate_from(p, X0);
    RC_ASSERT(Mat<Rational>(Y.leftCols(p.dv())) == want.num);
    RC_ASSERT(Vec<Rational>(Y.col(p.dv())) == want.den);
  });
}
