// Causality, homogeneity, the ridge link and `scale`, exactly.
#include "generators.hpp"
#include "harness.hpp"

using namespace hla;
using namespace hla::test;

namespace {

Rational pow(const Rational& a, int e) {
  Rational r(1);
  for (int i = 0; i < e; ++i) r *= a;
  return r;
}

rc::Gen<Rational> nonzero_rational() {
  return rc::gen::suchThat(rational_entry(), [](const Rational& x) { return x != 0; });
}

void causality(Variant v) {
  for (Form f : forms_of(v))
    prop(to_string(v) + " " + to_string(f) + ": changing tokens after t leaves outputs <= t unchanged", [v, f] {
      const auto p = *problem_gen({.variant = v});
      RC_PRE(p.n() >= 1);
      const Index t = *rc::gen::inRange<Index>(0, p.n());
      const auto p2 = with_future_redrawn(p, t);
      const Index w = *rc::gen::inRange<Index>(1, p.n() + 2);
      RC_ASSERT(same_rows_upto(evaluate(p, f, w), evaluate(p2, f, w), t));
    });
}

void homogeneity(Variant v) {
  prop(to_string(v) + ": num(αq) = α^deg num(q), likewise k; num(αv) = α num, den(αv) = den", [v] {
    const auto p = *problem_gen({.variant = v, .random_ridge = false, .random_normalize = false});
    const Rational a = *nonzero_rational();
    // num has degree order in q and in k, is linear in v; den does not depend on v.
    const int dq = order_of(v), dk = order_of(v);
    const auto base = evaluate(p, Form::naive);
    auto pq = p, pk = p, pv = p;
    pq.q *= a;
    pk.k *= a;
    pv.v *= a;
    const auto oq = evaluate(pq, Form::naive), ok = evaluate(pk, Form::naive), ov = evaluate(pv, Form::naive);
    RC_ASSERT(oq.num == Mat<Rational>(pow(a, dq) * base.num));
    RC_ASSERT(oq.den == Vec<Rational>(pow(a, dq) * base.den));
    RC_ASSERT(ok.num == Mat<Rational>(pow(a, dk) * base.num));
    RC_ASSERT(ok.den == Vec<Rational>(pow(a, dk) * base.den));
    RC_ASSERT(ov.num == Mat<Rational>(a * base.num));
    RC_ASSERT(ov.den == base.den);
  });
}

void scale_is_query_scaling(Variant v) {
  prop(to_string(v) + ": option scale = α equals multiplying q by α", [v] {
    auto p = *problem_gen({.variant = v});
    const Rational a = *nonzero_rational();
    auto pq = p;
    p.opt.scale = a;
    pq.q *= a;
    RC_ASSERT(same(evaluate(p, Form::streaming), evaluate(pq, Form::streaming)));
  });
}

}  // namespace

TEST_CASE("causality", "[causality]") {
  for (Variant v : all_variants()) causality(v);
}

TEST_CASE("homogeneity", "[homogeneity]") {
  for (Variant v : all_variants()) homogeneity(v);
}

TEST_CASE("scale option", "[scale]") {
  for (Variant v : all_variants()) scale_is_query_scaling(v);
}

TEST_CASE("ridge link: hla2(lambda) - hla2(0) = lambda * la1(k := q)", "[ridge][hla2]") {
  prop("hla2 with λ minus hla2 with λ = 0 equals λ · la1 with keys := queries", [] {
    auto p = *problem_gen({.variant = Variant::hla2, .random_normalize = false});
    p.opt.lambda = *nonneg_rational();
    auto p0 = p;
    p0.opt.lambda = 0;
    Problem<Rational> l{p0.opt, p.q, p.q, p.v};
    l.opt.variant = Variant::la1;
    l.opt.masked = true;
    const auto a = evaluate(p, Form::naive), b = evaluate(p0, Form::naive), c = evaluate(l, Form::naive);
    RC_ASSERT(Mat<Rational>(a.num - b.num) == Mat<Rational>(p.opt.lambda * c.num));
    RC_ASSERT(Vec<Rational>(a.den - b.den) == Vec<Rational>(p.opt.lambda * c.den));
  });
}
