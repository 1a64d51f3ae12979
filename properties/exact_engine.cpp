// The fast exact engine (hla/exact.hpp, hla/ffrational.hpp) gives the same
// rationals as the evaluation in GMP's mpq, compared with `==`:
// - FFRational's arithmetic (+, −, ·, /, comparisons) on random rationals,
//   and on sums that cancel whole limbs;
// - every form of every variant, every option (masked/unmasked, γ, ridge λ,
//   scale, normalize off/add/clamp), magnitudes included;
// - every backward form of every variant with a backward, its magnitudes;
// - from an initial state: outputs, final state, magnitudes, the backward
//   with dstate and its magnitudes;
// - float-like dyadic inputs with the options kernels use (γ = 9/10, ε = 10⁻⁶,
//   scale = 17677669529663687/10¹⁷): B-power alignment over long sums.
// Failures and exceptions alike must agree (a pole throws in both).
#include "hla/exact.hpp"
#include "hla/ffrational.hpp"

#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "../tests/float_inputs.hpp"
#include "backward_gen.hpp"
#include "generators.hpp"
#include "harness.hpp"
#include "per_backward.hpp"
#include "per_operator.hpp"

using namespace hla;
using namespace hla::test;

namespace {

// What a computation gave: its value, or the type and message of what it threw.
template <class T> struct Outcome {
  std::optional<T> value;
  std::string thrown;
};
template <class F> auto outcome(F&& f) -> Outcome<decltype(f())> {
  try {
    return {f(), ""};
  } catch (const InputError& e) {
    return {std::nullopt, std::string("InputError: ") + e.what()};
  } catch (const std::domain_error& e) {
    return {std::nullopt, std::string("domain_error: ") + e.what()};
  }
}

std::string cell(const char* what, Index t, Index c, const Rational& x, const Rational& y) {
  return std::string(what) + "[" + std::to_string(t) + ", " + std::to_string(c) + "]: engine " + to_string(x) + ", mpq " + to_string(y);
}
// The first entry where matrices differ ("" when equal).
template <class M> std::string diff(const char* what, const M& a, const M& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return std::string(what) + ": shapes differ";
  for (Index t = 0; t < a.rows(); ++t)
    for (Index c = 0; c < a.cols(); ++c)
      if (a(t, c) != b(t, c)) return cell(what, t, c, a(t, c), b(t, c));
  return "";
}
std::string diff(const Output<Rational>& a, const Output<Rational>& b) {
  for (const std::string& d : {diff("num", a.num, b.num), diff("den", a.den, b.den), diff("out", a.out, b.out)})
    if (!d.empty()) return d;
  return "";
}
std::string diff(const Gradient<Rational>& a, const Gradient<Rational>& b) {
  for (const std::string& d : {diff("dq", a.dq, b.dq), diff("dk", a.dk, b.dk), diff("dv", a.dv, b.dv)})
    if (!d.empty()) return d;
  return "";
}
std::string diff(const StateMats<Rational>& a, const StateMats<Rational>& b) {
  if (a.size() != b.size()) return "state: member counts differ";
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string d = diff(("state member " + std::to_string(i)).c_str(), a[i], b[i]);
    if (!d.empty()) return d;
  }
  return "";
}
std::string diff(const GradientFrom<Rational>& a, const GradientFrom<Rational>& b) {
  const std::string d = diff(a.tokens, b.tokens);
  return d.empty() ? diff(a.dstate, b.dstate) : d;
}

// RC_FAIL unless the engine's outcome equals mpq's (values `==`, or the same exception).
template <class T> void assert_same(const std::string& what, const Outcome<T>& engine, const Outcome<T>& mpq) {
  if (engine.thrown != mpq.thrown)
    RC_FAIL(what + ": engine " + (engine.thrown.empty() ? "returned" : "threw " + engine.thrown) + ", mpq " +
            (mpq.thrown.empty() ? "returned" : "threw " + mpq.thrown));
  if (engine.value) {
    const std::string d = diff(*engine.value, *mpq.value);
    if (!d.empty()) RC_FAIL(what + ": " + d);
  }
}

void tag_options(const Options& o) {
  RC_TAG(o.masked ? "masked" : "unmasked", o.gamma == 1 ? "gamma=1" : "gamma<1",
         o.normalize ? (o.eps_mode == EpsMode::add ? "normalize add" : "normalize clamp") : "raw");
  RC_CLASSIFY(o.lambda != 0, "ridge");
  RC_CLASSIFY(o.scale != 1, "scale");
}

// ---------------------------------------------------------------- arithmetic

Rational rational_arg() {
  const int p = *rc::gen::inRange(-40, 41), q = *rc::gen::element(1, 2, 3, 4, 5, 8, 9, 10, 12, 15, 64, 100, 1000);
  return Rational(p, q);
}

TEST_CASE("FFRational: + - * / and comparisons equal mpq's, in a context and out of one", "[exact]") {
  prop("FFRational arithmetic == Rational arithmetic", [] {
    const Rational gamma = Rational(*rc::gen::inRange(1, 20), *rc::gen::element(1, 3, 10, 21, 1000));
    const bool in_context = *rc::gen::arbitrary<bool>();
    std::optional<FFContext> ctx;
    if (in_context) ctx.emplace(std::vector<Rational>{gamma, Rational(1, 1000)});
    // a chain of operations over a pool of values (powers of the base grow)
    std::vector<Rational> r{gamma, rational_arg(), rational_arg()};
    std::vector<FFRational> f;
    for (const Rational& x : r) f.push_back(FFRational::from(x));
    const int steps = *rc::gen::inRange(1, 40);
    for (int s = 0; s < steps; ++s) {
      const size_t i = *rc::gen::inRange<size_t>(0, r.size()), j = *rc::gen::inRange<size_t>(0, r.size());
      const int op = *rc::gen::inRange(0, 5);
      RC_ASSERT((f[i] < f[j]) == (r[i] < r[j]));
      RC_ASSERT((f[i] == f[j]) == (r[i] == r[j]));
      RC_ASSERT(abs(f[i]).to_rational() == abs(r[i]));
      if (op == 3 && r[j] == 0) continue;
      const Rational want = op == 0 ? r[i] + r[j] : op == 1 ? r[i] - r[j] : op == 2 ? r[i] * r[j] : op == 3 ? r[i] / r[j] : -r[i];
      const FFRational got = op == 0 ? f[i] + f[j] : op == 1 ? f[i] - f[j] : op == 2 ? f[i] * f[j] : op == 3 ? f[i] / f[j] : -f[i];
      RC_ASSERT(got.to_rational() == want);
      RC_ASSERT(FFRational::from(want) == got);
      r.push_back(want);
      f.push_back(got);
    }
  });
}

// Sums and differences that cancel whole 64-bit limbs (random small
// rationals never do): N must shrink to its odd part, the value stay exact,
// zero be zero, and comparisons agree — inline, on the heap (beyond kInline
// limbs) and in a context whose base is 5.
TEST_CASE("FFRational: sums and differences that cancel whole limbs equal mpq's, N normalized", "[exact]") {
  const mp::mpz_int one = 1, w = one << 64;
  // (a, b) with a + b small: whole limbs cancel, or leave a multiple of 2^64 or 2^128.
  const std::vector<std::pair<mp::mpz_int, mp::mpz_int>> pairs{
      {w * w + w + 1, -(w * w + w)},                  // 1
      {w * w * w + 1, -(w * w * w - w + 1)},          // 2^64
      {w * w * w + w * w, -(w * w * w)},              // 2^128
      {(one << (64 * 13)) + 3, -(one << (64 * 13))},  // 3, from 14 limbs on the heap
      {w * w + 7, -(w * w + 7)},                      // 0
  };
  for (const bool in_context : {false, true}) {
    std::optional<FFContext> ctx;
    if (in_context) ctx.emplace(std::vector<Rational>{Rational(1, 5)});
    const Rational scale = in_context ? Rational(1, 125) : Rational(1);  // B^3 = 125: the values a·5^-3
    for (const auto& [a, b] : pairs) {
      const Rational ra = Rational(a) * scale, rb = Rational(b) * scale, sum = ra + rb, diff = ra - Rational(-rb);
      const FFRational fa = FFRational::from(ra), fb = FFRational::from(rb), fnb = FFRational::from(Rational(-rb));
      INFO("a = " << a << ", b = " << b << (in_context ? " (over 5^3, in a context)" : ""));
      for (const FFRational& got : {fa + fb, fa - fnb, fb + fa, -(fnb - fa)}) {
        REQUIRE(got.to_rational() == sum);
        CHECK(diff == sum);
        CHECK(got.is_zero() == (sum == 0));
        CHECK(got.sign() == (sum > 0) - (sum < 0));
        CHECK((got == FFRational::from(sum)));
        CHECK((got < fa) == (sum < ra));
        CHECK((got > FFRational(0)) == (sum > 0));
        // N is the odd part of the numerator over 5^k: one limb here.
        CHECK(got.limbs() == (sum == 0 ? 0 : 1));
      }
      CHECK(((fa + fb) + fnb).to_rational() == Rational(sum - rb));  // and back: the big value again
    }
  }
}

// ---------------------------------------------------------------- forward

template <class V> struct FormsEqualMpq {
  static void run() {
    constexpr Variant v = V::variant;
    prop(to_string(v) + ": every form and the magnitudes, engine == mpq", [] {
      const auto p =
          *problem_gen({.variant = v, .max_n = needs_unit_gamma(v) || order_of(v) > 2 ? 8 : 14, .max_d = 4, .random_scale = true});
      tag_options(p.opt);
      for (const Form f : forms_of(v)) {
        const Index w = is_chunked(f) ? *rc::gen::inRange<Index>(1, p.n() + 2) : 16;
        assert_same(to_string(f) + " (w = " + std::to_string(w) + ")", outcome([&] { return exact::evaluate(p, f, w); }),
                    outcome([&] { return evaluate(p, f, w); }));
      }
      for (const bool unmasked : {false, true})
        assert_same(std::string("magnitude") + (unmasked ? " (unmasked order)" : ""),
                    outcome([&] { return exact::magnitude(p, unmasked); }), outcome([&] { return magnitude(p, unmasked); }));
    });
  }
};
[[maybe_unused]] const bool forms_registered = per_operator<FormsEqualMpq>("fast exact engine: every form equals mpq", "[exact]");

// ---------------------------------------------------------------- backward

template <class V> struct BackwardEqualsMpq {
  static void run() {
    constexpr Variant v = V::variant;
    prop(to_string(v) + ": every backward form and its magnitudes, engine == mpq", [] {
      const auto p = backward_problem(v);
      const auto up = upstream_gen(p);
      const Index w = *rc::gen::inRange<Index>(1, p.n() + 2);
      tag_options(p.opt);
      for (const BackwardForm f : kBackwardForms) {
        if (!has_backward_form(v, f)) continue;
        assert_same(to_string(f) + " (w = " + std::to_string(w) + ")", outcome([&] { return exact::backward(p, up.dout, up.dden, f, w); }),
                    outcome([&] { return backward(p, up.dout, up.dden, f, w); }));
      }
      assert_same("backward_magnitude", outcome([&] { return exact::backward_magnitude(p, up.dout, up.dden); }),
                  outcome([&] { return backward_magnitude(p, up.dout, up.dden); }));
    });
  }
};
[[maybe_unused]] const bool backward_registered = per_backward<BackwardEqualsMpq>("fast exact engine: backward equals mpq");

// ---------------------------------------------------------------- states

StateMats<Rational> state_gen(const Problem<Rational>& p) {
  StateMats<Rational> X;
  for (const StatePart& m : state_layout(p.opt, p.d(), p.dv()))
    X.push_back(m.role == StatePart::Role::unused ? Mat<Rational>(Mat<Rational>::Zero(m.rows, m.width()))
                                                  : draw_full(rational_matrix(m.rows, m.width())));
  return X;
}

template <class V> struct StatesEqualMpq {
  static void run() {
    constexpr Variant v = V::variant;
    prop(to_string(v) + ": from a state, outputs, final state, backward with dstate and magnitudes, engine == mpq", [] {
      const auto p = backward_problem(v);
      const StateMats<Rational> X = state_gen(p);
      const auto up = upstream_gen(p);
      const Index w = *rc::gen::inRange<Index>(1, p.n() + 2);
      tag_options(p.opt);
      assert_same("evaluate_from", outcome([&] { return exact::evaluate_from(p, X); }), outcome([&] { return evaluate_from(p, X); }));
      assert_same("final_state", outcome([&] { return exact::final_state(p, X); }), outcome([&] { return final_state(p, X); }));
      assert_same("magnitude_from", outcome([&] { return exact::magnitude_from(p, X); }), outcome([&] { return magnitude_from(p, X); }));
      for (const BackwardForm f : kBackwardForms) {
        if (f == BackwardForm::naive || !has_backward_form(v, f)) continue;
        assert_same("backward_from " + to_string(f) + " (w = " + std::to_string(w) + ")",
                    outcome([&] { return exact::backward_from(p, X, up.dout, up.dden, f, w); }),
                    outcome([&] { return backward_from(p, X, up.dout, up.dden, f, w); }));
      }
      assert_same("backward_magnitude_from", outcome([&] { return exact::backward_magnitude_from(p, X, up.dout, up.dden); }),
                  outcome([&] { return backward_magnitude_from(p, X, up.dout, up.dden); }));
    });
  }
};
[[maybe_unused]] const bool states_registered = per_backward<StatesEqualMpq>("fast exact engine: from a state equals mpq");

// ---------------------------------------------------------------- float-like inputs

TEST_CASE("fast exact engine: float inputs with kernel options, forward and backward equal mpq", "[exact]") {
  prop("float inputs, gamma in {9/10, 99/100, 7/8}, eps 1e-6, scale 1/sqrt(32) decimal: engine == mpq", [] {
    std::mt19937_64 rng(*rc::gen::arbitrary<uint64_t>());
    Options o;
    o.variant = *rc::gen::elementOf(variants_where([](const VariantInfo& r) { return r.has_backward; }));
    o.masked = !(has_unmasked(o.variant) && *rc::gen::arbitrary<bool>());
    if (!needs_unit_gamma(o.variant)) o.gamma = *rc::gen::element(Rational(9, 10), Rational(99, 100), Rational(7, 8));
    o.normalize = *rc::gen::arbitrary<bool>();
    o.eps_mode = *rc::gen::element(EpsMode::add, EpsMode::clamp);
    o.eps = parse_rational("1e-6");
    if (*rc::gen::arbitrary<bool>()) o.scale = Rational(17677669529663687, 100000000000000000);
    if (has_ridge(o.variant) && *rc::gen::arbitrary<bool>()) o.lambda = Rational(1, 10);
    const Index n = *rc::gen::inRange<Index>(1, 25), d = *rc::gen::inRange<Index>(1, 9), dv = *rc::gen::inRange<Index>(1, 9);
    const Problem<Rational> p{o, gaussian_f32_matrix(rng, n, d), gaussian_f32_matrix(rng, n, d), gaussian_f32_matrix(rng, n, dv)};
    tag_options(o);
    assert_same("streaming", outcome([&] { return exact::evaluate(p); }), outcome([&] { return evaluate(p); }));
    assert_same("chunked_scan", outcome([&] { return exact::evaluate(p, Form::chunked_scan, 5); }),
                outcome([&] { return evaluate(p, Form::chunked_scan, 5); }));
    assert_same("magnitude", outcome([&] { return exact::magnitude(p, true); }), outcome([&] { return magnitude(p, true); }));
    const Mat<Rational> dout = gaussian_f32_matrix(rng, n, dv);
    const Vec<Rational> dden = gaussian_f32_matrix(rng, n, 1).col(0);
    assert_same("backward", outcome([&] { return exact::backward(p, dout, dden); }), outcome([&] { return backward(p, dout, dden); }));
    assert_same("backward chunked", outcome([&] { return exact::backward(p, dout, dden, BackwardForm::chunked, 4); }),
                outcome([&] { return backward(p, dout, dden, BackwardForm::chunked, 4); }));
  });
}

}  // namespace
