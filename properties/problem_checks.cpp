// Problem validation, option parsing and scalar conversions (plain cases).
#include "hla/evaluate.hpp"
#include "hla/head.hpp"
#include "hla/options.hpp"

#include <catch2/catch.hpp>

using namespace hla;

namespace {

Problem<Rational> small(Variant v) {
  Problem<Rational> p;
  p.opt.variant = v;
  p.q = Mat<Rational>::Ones(3, 2);
  p.k = Mat<Rational>::Ones(3, 2);
  p.v = Mat<Rational>::Ones(3, 1);
  return p;
}

void require_error(const Problem<Rational>& p, const std::string& needle) {
  try {
    (void)evaluate(p, Form::naive);
    FAIL("expected InputError mentioning '" << needle << "'");
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("invalid options are rejected with a message naming them", "[problem]") {
  auto p = small(Variant::hla2);
  p.opt.gamma = 0;
  require_error(p, "gamma = 0");
  p.opt.gamma = Rational(3, 2);
  require_error(p, "gamma = 3/2");
  p = small(Variant::hla2);
  p.opt.eps = 0;
  require_error(p, "eps = 0");
  p = small(Variant::hla2);
  p.opt.lambda = -1;
  require_error(p, "lam = -1 must be >= 0");
  p = small(Variant::la1);
  p.opt.lambda = 1;
  require_error(p, "hla2 only");
  p = small(Variant::ahla);
  p.opt.masked = false;
  require_error(p, "no unmasked form");
  p = small(Variant::hla3_paper);
  p.opt.gamma = Rational(1, 2);
  require_error(p, "gamma = 1 only");
}

// The table of options (hla/options.hpp) against Options: one default, lossless text, names and aliases.
TEST_CASE("each option's row holds Options' default and reads back its own text", "[problem]") {
  Options o;
  o.variant = Variant::hla3, o.masked = false, o.gamma = Rational(7, 8), o.normalize = true, o.eps_mode = EpsMode::clamp;
  o.eps = Rational(1, 3), o.lambda = Rational(1, 4), o.scale = Rational(-2, 5);  // not validated here
  Options read;
  for (const OptionInfo& r : kOptions) {
    INFO(r.name);
    CHECK(r.text(Options{}) == r.default_text);
    CHECK(r.text(o) != r.default_text);  // every option differs, so that each row below is tested
    set_option(read, r, r.text(o));
    CHECK(r.text(read) == r.text(o));
    CHECK(find_option(r.name) == &r);
  }
  CHECK(read == o);
  CHECK(find_option("lambda") == &info(Option::lam));  // the old spelling, for one release
  CHECK(find_option("eps_mode") == nullptr);
  try {
    set_option(read, info(Option::normalize), "sometimes");
    FAIL("normalize=sometimes was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "normalize: 'sometimes' is not none, add or clamp");
  }
}

TEST_CASE("invalid shapes are rejected with a message naming them", "[problem]") {
  auto p = small(Variant::hla2);
  p.k = Mat<Rational>::Ones(2, 2);
  require_error(p, "k has shape (2, 2) but q has (3, 2)");
  p = small(Variant::hla2);
  p.v = Mat<Rational>::Ones(4, 1);
  require_error(p, "v has 4 tokens but q has 3");
  p = small(Variant::hla2);
  p.q = Mat<Rational>::Ones(3, 0);
  p.k = Mat<Rational>::Ones(3, 0);
  require_error(p, "head dimension d must be >= 1");
  p = small(Variant::hla2);
  p.v = Mat<Rational>::Ones(3, 0);
  require_error(p, "value dimension dv must be >= 1");
  CHECK_THROWS_AS(evaluate(small(Variant::hla2), Form::chunked_matmul, 0), InputError);
  CHECK_THROWS_AS(evaluate(small(Variant::la1), Form::streaming_paper_state), InputError);
  CHECK_THROWS_AS(evaluate(small(Variant::hla3_paper), Form::chunked_matmul), InputError);
}

TEST_CASE("empty sequences are valid", "[problem]") {
  Problem<Rational> p;
  p.q = Mat<Rational>(0, 3);
  p.k = Mat<Rational>(0, 3);
  p.v = Mat<Rational>(0, 2);
  for (Form f : forms_of(Variant::hla2)) {
    const auto o = evaluate(p, f, 4);
    CHECK(o.num.rows() == 0);
    CHECK(o.num.cols() == 2);
  }
}

TEST_CASE("parse_rational is exact and strict", "[problem]") {
  CHECK(parse_rational("3") == 3);
  CHECK(parse_rational("-3/4") == Rational(-3, 4));
  CHECK(parse_rational("0.9") == Rational(9, 10));
  CHECK(parse_rational("1e-6") == Rational(1, 1000000));
  CHECK(parse_rational("-2.5E+3") == -2500);
  CHECK(parse_rational(".5") == Rational(1, 2));
  for (const char* bad : {"", "abc", "1/0", "1.5/2", "1e", "2x", "--1", "1e9999999"}) CHECK_THROWS_AS(parse_rational(bad), InputError);
  CHECK(parse_rational(to_string(Rational(-7, 13))) == Rational(-7, 13));
}

TEST_CASE("conversions round to nearest and back exactly", "[scalar]") {
  CHECK(from_rational<double>(Rational(1, 3)) == 1.0 / 3.0);
  CHECK(from_rational<float>(Rational(1, 3)) == 1.0f / 3.0f);
  CHECK(to_rational(0.1) != Rational(1, 10));
  CHECK(from_rational<double>(to_rational(0.1)) == 0.1);
  const f113 third = from_rational<f113>(Rational(1, 3));
  CHECK(third == f113(1) / f113(3));
  const Rational back = to_rational(third);
  CHECK(back != Rational(1, 3));
  // |1/3 - round(1/3)| <= 2^-114 * (1/3) < 2^-115 (half an ulp of a number in [1/4, 1/2)).
  const Rational err = back > Rational(1, 3) ? Rational(back - Rational(1, 3)) : Rational(Rational(1, 3) - back);
  CHECK(err <= Rational(1) / Rational(mp::mpz_int(1) << 115));
  CHECK(from_rational<bf16>(Rational(1, 3)) == bf16(1.0f / 3.0f));
  CHECK_THROWS_AS(to_rational(std::numeric_limits<double>::quiet_NaN()), std::domain_error);
}

TEST_CASE("a decay power beyond the variant's table is a logic_error, not a silent read", "[problem]") {
  Problem<Rational> p = small(Variant::hla2);
  p.opt.gamma = Rational(1, 2);
  const Head<Rational> h = make_head(p);
  REQUIRE(!h.gpow.empty());
  CHECK(h.g(0) == Rational(1));
  CHECK(h.g(static_cast<Index>(h.gpow.size()) - 1) == h.gpow.back());
  for (Index e : {Index(-1), static_cast<Index>(h.gpow.size())}) {
    INFO("e = " << e);
    try {
      (void)h.g(e);
      FAIL("expected std::logic_error");
    } catch (const std::logic_error& err) {
      CHECK(std::string(err.what()).find("beyond the variant's decay bound (" + std::to_string(h.gpow.size() - 1) + ")") !=
            std::string::npos);
    }
  }
}
