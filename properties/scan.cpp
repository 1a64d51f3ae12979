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
