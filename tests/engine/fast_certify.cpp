// The certification screen of the double-double reference (engine/src/fast/
// engine.cpp: screen, screen_quotient; the binary128 fallback `certifies`;
// reference.cpp's binary128 recompute of an uncertified prefix), at its edge:
// exact values within 2^-100 (relative) of a rounding midpoint. Three subjects
// — a plain output (num), a den, a normalized quotient — and four instances
// each, all with the exact value midpoint(1, 1 + 2^-52) + tiny (so RN = 1 + 2^-52):
//   b128:   tiny = 2^-105 relative (2^-104 for the quotient): the engine holds
//           the value exactly, its bound (≈ 200·2^-106 here) cannot decide; binary128 can;
//   none:   tiny = 2^-120: binary128 cannot either: flagged whatever runs;
//   window: tiny = 0.75 × the screen's own error term (2^-99 to 2^-98 here):
//           the engine must not certify it, binary128 does; dropping or
//           halving the error term certifies it from double-double;
//   wrong:  tiny = 2^-110, and a cancellation (±2^60) makes double-double lose
//           2^-53 + tiny, so its value rounds to the wrong double: only the
//           error term stops it.
// Exact values are sums of products of doubles, computed here in rationals.
#include "hla/engine/fast_reference.hpp"
#include "hla/fast/engine.hpp"

#include "../../properties/harness.hpp"

#include <cmath>
#include <string>
#include <vector>

using namespace hla;

namespace certify_edges {

using fast::DD;
const double kU = std::ldexp(1.0, -53), kU2 = std::ldexp(1.0, -106);
const double kRounded = 1 + 2 * kU;  // RN of every instance's exact value

enum class Subject { num, den, quotient };
enum class Kind { b128, none, window, wrong };

const char* label(Subject s) { return s == Subject::num ? "num" : s == Subject::den ? "den" : "quotient"; }
const char* label(Kind k) { return k == Kind::b128 ? "b128" : k == Kind::none ? "none" : k == Kind::window ? "window" : "wrong"; }

struct Token {
  double k, v;
};

// la1, d = dv = 1, q = 1, γ = 1, f64 inputs: at token t, den = Σ_{j≤t} k_j and
// num = Σ_{j≤t} k_j·v_j; normalized (quotient): out = num/(den + 1).
BatchProblem problem(const std::vector<Token>& ts, bool normalize) {
  BatchProblem p;
  p.opt.variant = Variant::la1;
  p.opt.normalize = normalize;
  p.opt.eps = 1;
  p.dtype = DType::f64;
  p.n = static_cast<Index>(ts.size()), p.d = 1, p.dv = 1;
  for (const Token& t : ts) p.q.push_back(1), p.k.push_back(t.k), p.v.push_back(t.v);
  return p;
}

// The last token's exact value of the subject and its magnitudes, by hand.
struct Exact {
  Rational value, num, den, mag_num, mag_den;
};
Exact exact_last(const BatchProblem& p, Subject s) {
  Exact e;
  for (size_t j = 0; j < p.k.size(); ++j) {
    const Rational k = to_rational(p.k[j]), v = to_rational(p.v[j]);
    e.den += k, e.num += k * v;
    e.mag_den += k < 0 ? Rational(-k) : k;
    e.mag_num += (k * v < 0) ? Rational(-(k * v)) : Rational(k * v);
  }
  e.value = s == Subject::den ? e.den : s == Subject::num ? e.num : Rational(e.num / (e.den + 1));
  return e;
}

// The engine's double-double num and den at the last token, and its bound
// factor phi there, built as fast_head builds the head (chunk 64).
struct Engine {
  DD num, den;
  double phi;
  bool tiny;
};
Engine engine_last(const BatchProblem& p) {
  Options o = p.opt;
  o.normalize = false;  // the engine computes num and den; fast_head divides
  auto at = [](const std::vector<double>& x) { return [&x](Index t, Index) { return DD{x[static_cast<size_t>(t)], 0}; }; };
  const auto r = fast::evaluate_head(fast::make_fast_head<DD>(o, p.n, 1, 1, at(p.q), at(p.k), at(p.v), 64, true));
  REQUIRE(r.finite);
  const Index t = p.n - 1;
  return {r.val.at(t, 0), r.val.at(t, 1), r.phi[static_cast<size_t>(t)], r.tiny};
}
Rational dd_value(const DD& x) { return to_rational(x.hi) + to_rational(x.lo); }

// The screen's error term for the subject, estimated from phi and the exact
// magnitudes (fast_head rounds these up by factors 1 + 2^-40 and less): the
// bound of num or den, or the quotient's input term (|r| + g)·e_D' + e_N (e_D'
// also holds ε's rounding, far below; |r| + g ≈ 1).
double error_term(const Engine& e, const Exact& x, Subject s) {
  if (s == Subject::num) return e.phi * kU2 * to_double(x.mag_num);
  if (s == Subject::den) return e.phi * kU2 * to_double(x.mag_den);
  return e.phi * kU2 * (to_double(x.mag_num) + to_double(x.mag_den));
}

// The tokens of an instance. `tiny_units`: the window's tiny term of num or den,
// in units of 2^-106 (the quotient's out moves by half of it).
std::vector<Token> tokens(Subject s, Kind k, double tiny_units) {
  const double p60 = std::ldexp(1.0, 60), u53 = kU;
  // num and den: the values 1, 2^-53, tiny (or the cancelling sequence) carried
  // by v (k = 1) or by k (v = 0).
  auto seq = [&](std::vector<double> xs) {
    std::vector<Token> ts;
    for (double x : xs) ts.push_back(s == Subject::num ? Token{1, x} : Token{x, 0});
    return ts;
  };
  const double tiny = k == Kind::b128 ? std::ldexp(1.0, -105) : k == Kind::none ? std::ldexp(1.0, -120) : tiny_units * kU2;
  if (s != Subject::quotient) {
    if (k == Kind::wrong) return seq({p60, 1, u53, std::ldexp(1.0, -110), -p60});
    return seq({1, u53, tiny});
  }
  // Quotient, ε = 1: den = 1 (the small keys cancel), D = 2, and num = 2 + 2^-52 + t,
  // so out = 1 + 2^-53 + t/2. The products 2^-60·2^8 = 2^-52 and (-2^-60)·(-t·2^60) = t.
  const double m60 = std::ldexp(1.0, -60);
  if (k == Kind::wrong)  // num = 2 + 2^60 + 2^-52 + 2^-110 − 2^60; the keys 3·2^-60 − 3·2^-60
    return {{1, 2},   {m60, std::ldexp(1.0, 120)}, {m60, 256}, {m60, std::ldexp(1.0, -50)}, {-m60, std::ldexp(1.0, 120)}, {-m60, 0},
            {-m60, 0}};
  const double t = k == Kind::b128 ? std::ldexp(1.0, -103) : k == Kind::none ? std::ldexp(1.0, -119) : tiny_units * kU2;
  return {{1, 2}, {m60, 256}, {-m60, -t * p60}};
}

// The instance; the window's distance is 0.75 × the error term (a multiple of
// 4·2^-106, which the engine's double-double holds exactly).
BatchProblem instance(Subject s, Kind k) {
  const bool normalize = s == Subject::quotient;
  if (k != Kind::window) return problem(tokens(s, k, 0), normalize);
  const BatchProblem probe = problem(tokens(s, k, 64), normalize);
  const double e = error_term(engine_last(probe), exact_last(probe, s), s);
  return problem(tokens(s, k, 4 * std::floor(0.75 * e / kU2 / 4)), normalize);
}

engine::ReferenceOptions engine_options(bool recompute) {
  engine::ReferenceOptions o;
  o.exact_max_n = 0;                     // never exact rationals: the double-double engine
  if (!recompute) o.recompute_work = 0;  // what the engine certifies, and nothing else
  return o;
}

}  // namespace certify_edges

TEST_CASE("fast reference: values within 2^-100 of a rounding midpoint are certified only when resolved, and then right",
          "[fast][certify]") {
  using namespace certify_edges;
  const Rational mid = Rational(1) + to_rational(kU);  // not a double
  for (Subject s : {Subject::num, Subject::den, Subject::quotient})
    for (Kind k : {Kind::b128, Kind::none, Kind::window, Kind::wrong}) {
      const BatchProblem p = instance(s, k);
      const Exact x = exact_last(p, s);
      const Engine e = engine_last(p);
      const double term = error_term(e, x, s);
      const Rational beyond = x.value - mid;  // the exact distance past the midpoint
      INFO(label(s) << " " << label(k) << ": exact − midpoint = " << to_double(beyond) << " = 2^" << std::log2(to_double(beyond))
                    << ", engine phi " << e.phi << ", error term " << term << " = 2^" << std::log2(term));
      // The instance is what it claims: just past the midpoint, RN = 1 + 2^-52 (by hand and by MPFR).
      REQUIRE(beyond > 0);
      // Within 2^-100; the window sits at 0.75 × the error term (≈ 2^-98.7 for num).
      REQUIRE(beyond < to_rational(std::ldexp(1.0, k == Kind::window ? -96 : -100)));
      REQUIRE(from_rational<double>(x.value) == kRounded);
      REQUIRE_FALSE(e.tiny);
      const DD dd = s == Subject::den ? e.den : e.num;
      if (k == Kind::wrong) {
        // Double-double lost the tiny terms: its value rounds to 1, not to RN(exact).
        const Rational got = s == Subject::quotient ? Rational(dd_value(dd) / (dd_value(e.den) + 1)) : dd_value(dd);
        REQUIRE(from_rational<double>(got) == 1.0);
      } else if (k != Kind::none) {
        // Double-double holds the exact num (den) bit for bit: only its bound is in doubt.
        REQUIRE(dd_value(dd) == (s == Subject::den ? x.den : x.num));
      }
      if (k == Kind::window) {
        // The quotient's distance in its screen's units is |m·D − N| = 2·(out − m).
        const double dist = to_double(beyond) * (s == Subject::quotient ? 2 : 1);
        // The screens' own rounding terms (|lo|·2^-50 ≤ 8·2^-106; the quotient's
        // comp ≈ 4.1u·(|g·D| + |N.lo|) ≈ 17·2^-106) stay below term/8.
        REQUIRE(term > 160 * kU2);
        REQUIRE(dist >= 0.7 * term);
        REQUIRE(dist <= 0.8 * term);
      }
      const size_t last = static_cast<size_t>(p.n - 1);
      for (bool recompute : {false, true}) {
        const engine::Reference ref = engine::compute_reference(p, engine_options(recompute));
        REQUIRE(ref.stats.fast == 1);
        const double value = s == Subject::den ? ref.den[last] : ref.out[last];
        const uint8_t flags = s == Subject::den ? ref.den_flags[last] : ref.flags[last];
        const bool certified = !(flags & engine::kUncertified);
        INFO((recompute ? "with the binary128 recompute" : "engine only")
             << ": value " << value << " (1 + " << (value - 1) / kU << " u), flags " << int(flags));
        // Sound: whatever is certified is the correctly rounded exact value.
        if (certified) CHECK(value == kRounded);
        // Not vacuous: the engine certifies none of them (within its bound of a
        // midpoint), binary128 those it resolves.
        const bool resolvable = recompute && (k == Kind::b128 || k == Kind::window);
        CHECK(certified == resolvable);
        CHECK(ref.stats.recomputed == (recompute ? 1u : 0u));
      }
    }
}

TEST_CASE("engine first: only a head the engine leaves uncertified is computed again in exact rationals, and equals them",
          "[fast][certify]") {
  using namespace certify_edges;
  for (Subject s : {Subject::num, Subject::den, Subject::quotient}) {
    INFO(label(s));
    // Head 0: an instance within 2^-100 of a midpoint (the engine certifies none);
    // head 1: plain tokens of the same length.
    BatchProblem p = instance(s, Kind::b128);
    const BatchProblem plain = problem(std::vector<Token>(static_cast<size_t>(p.n), Token{0.5, 0.25}), s == Subject::quotient);
    p.heads = p.kv_heads = 2;
    for (auto [x, y] : {std::pair{&p.q, &plain.q}, {&p.k, &plain.k}, {&p.v, &plain.v}}) x->insert(x->end(), y->begin(), y->end());
    engine::ReferenceOptions first;
    first.engine_first = true;
    const engine::Reference a = engine::compute_reference(p, first), b = engine::compute_reference(p, engine::ReferenceOptions{});
    REQUIRE(b.stats.exact == 2);
    CHECK(a.stats.exact == 1);
    CHECK(a.stats.fast == 1);
    CHECK(a.stats.uncertified == 0);
    CHECK(a.out == b.out);
    CHECK(a.num == b.num);
    CHECK(a.den == b.den);
    CHECK(a.flags == b.flags);
    CHECK(a.den_flags == b.den_flags);
    // Without the fallback the engine leaves head 0 flagged (what makes the case a test).
    engine::ReferenceOptions engine_only = engine_options(false);
    CHECK(engine::compute_reference(p, engine_only).stats.uncertified > 0);
  }
}
