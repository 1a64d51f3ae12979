// The segment operators of SPEC §4 are associative with a two-sided identity,
// and every scan schedule gives the serial fold's states, exactly.
#include "hla/evaluate_impl.hpp"

#include "harness.hpp"
#include "operators.hpp"
#include "per_operator.hpp"

#include <set>
#include <string>

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

// Each operator's laws; with an unmasked form, also on masked problems alone.
template <class V> struct OperatorLaws {
  static void run() {
    using Op = typename V::template Op<Rational>;
    const std::string name = to_string(V::variant);
    if (has_unmasked(V::variant)) {
      operator_laws<Op>(name + " masked", {.variant = V::variant, .random_masked = false});
      operator_laws<Op>(name + " (masked or unmasked at random)", {.variant = V::variant});
    } else {
      operator_laws<Op>(name, {.variant = V::variant});
    }
  }
};
[[maybe_unused]] const bool laws_registered = per_operator<OperatorLaws>("operator laws", "[scan]");

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

TEST_CASE("reduce_bracketed follows its picks: a non-associative toy operator", "[scan]") {
  // combine(A, B) = "(" A B ")": neither associative nor commutative, so the
  // result spells out the bracketing that reduce_bracketed chose; merging the
  // adjacent pair at picks[i] mod (size - 1), picks missing: 0.
  struct Tree {
    using Summary = std::string;
    Summary identity() const { return ""; }
    Summary combine(const Summary& a, const Summary& b) const { return "(" + a + b + ")"; }
  };
  const std::vector<std::string> tok{"a", "b", "c", "d"};
  CHECK(scan::reduce_bracketed(Tree{}, tok, {0, 0, 0}) == "(((ab)c)d)");
  CHECK(scan::reduce_bracketed(Tree{}, tok, {1, 0, 0}) == "((a(bc))d)");
  CHECK(scan::reduce_bracketed(Tree{}, tok, {2, 1, 0}) == "(a(b(cd)))");
  CHECK(scan::reduce_bracketed(Tree{}, tok, {2, 0, 0}) == "((ab)(cd))");
  CHECK(scan::reduce_bracketed(Tree{}, tok, {5, 3, 7}) == "(a(b(cd)))");  // 5 mod 3 = 2, 3 mod 2 = 1
  CHECK(scan::reduce_bracketed(Tree{}, tok, {}) == "(((ab)c)d)");
  CHECK(scan::reduce_bracketed(Tree{}, {"a"}, {3}) == "a");
  CHECK(scan::reduce_bracketed(Tree{}, {}, {}) == "");
  // Every bracketing of 6 tokens arises from some picks: the Catalan number C5 = 42 of them.
  const std::vector<std::string> six{"a", "b", "c", "d", "e", "f"};
  std::set<std::string> seen;
  for (size_t p0 = 0; p0 < 5; ++p0)
    for (size_t p1 = 0; p1 < 4; ++p1)
      for (size_t p2 = 0; p2 < 3; ++p2)
        for (size_t p3 = 0; p3 < 2; ++p3) seen.insert(scan::reduce_bracketed(Tree{}, six, {p0, p1, p2, p3}));
  CHECK(seen.size() == 42);
}
