// Every form of every operator equals its naive definition, exactly.
#include "generators.hpp"
#include "harness.hpp"
#include "per_operator.hpp"

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
