// The segment operators of SPEC §4 are associative with a two-sided identity,
// and every scan schedule gives the serial fold's states, exactly.
#include "hla/evaluate_impl.hpp"

#include "harness.hpp"
#include "operators.hpp"

using namespace hla;
using namespace hla::test;

namespace {

template <class Op> void operator_laws(const std::string& name, Spec s) {
  prop(name + ": (A ⊕ B) ⊕ C == A ⊕ (B ⊕ C) on random multi-token segments", associativity<Op>(s));
  prop(name + ": E ⊕ X == X == X ⊕ E", identity_neutral<Op>(s));
  prop(name + ": every bracketing of the fold gives the same summary", bracketing_equals_fold<Op>(s));
  prop(name + ": Blelloch scan and chunked scan (every w in 1..n+1) == serial fold", scans_equal_fold<Op>(s));
}

}  // namespace

TEST_CASE("la1 operator laws", "[scan][la1]") { operator_laws<la1::Op<Rational>>("la1", {.variant = Variant::la1}); }
TEST_CASE("hla2 masked operator laws", "[scan][hla2]") {
  operator_laws<hla2::Op<Rational>>("hla2 masked", {.variant = Variant::hla2, .random_masked = false});
}
TEST_CASE("hla2 operator laws, masked or unmasked", "[scan][hla2]") {
  operator_laws<hla2::Op<Rational>>("hla2 (masked or unmasked at random)", {.variant = Variant::hla2});
}
TEST_CASE("ahla operator laws", "[scan][ahla]") { operator_laws<ahla::Op<Rational>>("ahla", {.variant = Variant::ahla}); }
TEST_CASE("hla3 compact operator laws", "[scan][hla3]") {
  operator_laws<hla3::Op<Rational>>("hla3 masked", {.variant = Variant::hla3, .random_masked = false});
}
TEST_CASE("hla3 compact operator laws, masked or unmasked", "[scan][hla3]") {
  operator_laws<hla3::Op<Rational>>("hla3 (masked or unmasked at random)", {.variant = Variant::hla3});
}
TEST_CASE("hla3_paper operator laws (Eqs. 7.6-7.7)", "[scan][hla3_paper]") {
  operator_laws<hla3_paper::Op<Rational>>("hla3_paper", {.variant = Variant::hla3_paper});
}

TEST_CASE("hla3_paper: the paper's scan reproduces Algorithm 3 under every bracketing (Thm 7.2)", "[scan][hla3_paper]") {
  prop("hla3_paper: q_tᵀF of any bracketing of T_0 ⊗3 … ⊗3 T_t == Algorithm 3 at every t", [] {
    const auto p = *problem_gen({.variant = Variant::hla3_paper, .random_normalize = false});
    const Head<Rational> h = make_head(p);
    const hla3_paper::Op<Rational> op{h};
    const auto tok = token_summaries(op, h.n());
    const Mat<Rational> alg3 = hla3_paper::streaming(h);
    for (Index t = 0; t < h.n(); ++t) {
      const auto picks = *rc::gen::container<std::vector<size_t>>(static_cast<size_t>(t), rc::gen::inRange<size_t>(0, 1000));
      const auto X = scan::reduce_bracketed(op, {tok.begin(), tok.begin() + t + 1}, picks);
      RC_ASSERT(op.readout(X, t) == RowVec<Rational>(alg3.row(t)));
    }
  });
}

TEST_CASE("hla3_paper: dense maps and the contraction form are the same summary", "[scan][hla3_paper]") {
  prop("hla3_paper: fold with dense M^KQP == fold with per-token M^KQP (every field; M applied to a random Z)", [] {
    const auto p = *problem_gen({.variant = Variant::hla3_paper, .random_normalize = false});
    const Head<Rational> h = make_head(p);
    const hla3_paper::Op<Rational> op{h};
    const hla3_paper::OpDense<Rational> dense{h};
    const auto ta = token_summaries(op, h.n());
    const auto tb = token_summaries(dense, h.n());
    const auto a = scan::reduce(op, ta.begin(), ta.end());
    const auto b = scan::reduce(dense, tb.begin(), tb.end());
    const auto Z = *rational_matrix(p.d(), p.d());
    RC_ASSERT(a.SK == b.SK && a.SQ == b.SQ && a.P == b.P && a.F == b.F && a.R == b.R && a.U == b.U);
    RC_ASSERT(a.M.apply(Z) == b.M.apply(Z));
  });
}

TEST_CASE("Blelloch exclusive scan on a non-commutative toy operator", "[scan]") {
  // String concatenation: associative, not commutative, identity "".
  struct Concat {
    using Summary = std::string;
    Summary identity() const { return ""; }
    Summary combine(const Summary& a, const Summary& b) const { return a + b; }
  };
  for (size_t n = 0; n <= 19; ++n) {
    std::vector<std::string> tok;
    for (size_t i = 0; i < n; ++i) tok.push_back(std::string(1, char('a' + i)));
    const auto ex = scan::exclusive_blelloch(Concat{}, tok);
    REQUIRE(ex.size() == n);
    for (size_t t = 0; t < n; ++t) REQUIRE(ex[t] == std::string("abcdefghijklmnopqrs").substr(0, t));
    for (size_t w = 1; w <= n + 1; ++w) REQUIRE(scan::inclusive_chunked(Concat{}, tok, w) == scan::inclusive_fold(Concat{}, tok));
  }
}
