// Exact conversions between rationals and the float types, via MPFR so that
// rounding happens once, to nearest, at the target precision.
#include "hla/problem.hpp"
#include "hla/scalar.hpp"

#include <cctype>
#include <cmath>
#include <stdexcept>

// MPFR declares its binary128 functions only on request, with C's name for the
// type; after every system header, so that the alias reaches mpfr.h alone.
#define MPFR_WANT_FLOAT128 1
#define _Float128 __float128
#include <mpfr.h>
#undef _Float128

namespace hla {
namespace {

struct Mpfr {
  mpfr_t x;
  explicit Mpfr(mpfr_prec_t prec) { mpfr_init2(x, prec); }
  ~Mpfr() { mpfr_clear(x); }
  Mpfr(const Mpfr&) = delete;
  Mpfr& operator=(const Mpfr&) = delete;
};

// x rounded to `prec` bits; the result is then exactly representable in any
// type of at least that precision (exponent range permitting).
void round_to(Mpfr& m, const Rational& x) {
  mpfr_set_q(m.x, x.backend().data(), MPFR_RNDN);
}

Rational from_mpfr(const Mpfr& m) {
  if (!mpfr_number_p(m.x)) throw std::domain_error("non-finite value has no rational value");
  if (mpfr_zero_p(m.x)) return Rational(0);  // its "exponent" is a huge sentinel
  mpz_t z;
  mpz_init(z);
  const mpfr_exp_t e = mpfr_get_z_2exp(z, m.x);
  mp::mpz_int zi(z);
  mpz_clear(z);
  Rational r(zi);
  if (e >= 0) {
    r *= Rational(mp::mpz_int(1) << static_cast<unsigned>(e));
  } else {
    r /= Rational(mp::mpz_int(1) << static_cast<unsigned>(-e));
  }
  return r;
}

Rational from_double(double d) {
  if (!std::isfinite(d)) throw std::domain_error("non-finite value has no rational value");
  Rational r;
  mpq_set_d(r.backend().data(), d);
  return r;
}

}  // namespace

template <> Rational from_rational<Rational>(const Rational& x) { return x; }
template <> double from_rational<double>(const Rational& x) {
  Mpfr m(53);
  round_to(m, x);
  return mpfr_get_d(m.x, MPFR_RNDN);
}
template <> float from_rational<float>(const Rational& x) {
  Mpfr m(24);
  round_to(m, x);
  return mpfr_get_flt(m.x, MPFR_RNDN);
}
template <> f113 from_rational<f113>(const Rational& x) {
  Mpfr m(113);
  round_to(m, x);
  return f113(mpfr_get_float128(m.x, MPFR_RNDN));
}
template <> bf16 from_rational<bf16>(const Rational& x) {
  Mpfr m(8);
  round_to(m, x);
  return bf16(mpfr_get_flt(m.x, MPFR_RNDN));  // exact: already 8 bits
}
template <> f16 from_rational<f16>(const Rational& x) {
  Mpfr m(11);
  round_to(m, x);
  return f16(mpfr_get_flt(m.x, MPFR_RNDN));  // exact unless subnormal/overflow in f16
}

template <> Rational to_rational<Rational>(const Rational& x) { return x; }
template <> Rational to_rational<double>(const double& x) { return from_double(x); }
template <> Rational to_rational<float>(const float& x) { return from_double(x); }
template <> Rational to_rational<bf16>(const bf16& x) { return from_double(static_cast<float>(x)); }
template <> Rational to_rational<f16>(const f16& x) { return from_double(static_cast<float>(x)); }
template <> Rational to_rational<f113>(const f113& x) {
  Mpfr m(113);
  mpfr_set_float128(m.x, x.backend().value(), MPFR_RNDN);  // exact
  return from_mpfr(m);
}

double to_double(const Rational& x) { return from_rational<double>(x); }

Rational parse_rational(std::string_view text) {
  const std::string s(text);
  // Quoted in messages: at most 40 characters of it.
  const std::string shown = s.size() <= 40 ? s : s.substr(0, 40) + "...(" + std::to_string(s.size()) + " characters)";
  auto bad = [&](const char* why) {
    return InputError("'" + shown + "' is not a number (" + why + "); write e.g. 3, -3/4, 0.9 or 1e-6");
  };
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) throw InputError("a number holds a byte that is not printable ASCII: write e.g. 3, -3/4, 0.9 or 1e-6");
  if (s.size() > kMaxRationalChars) throw bad("longer than 400 characters");
  size_t p = 0;
  auto digits = [&](std::string& out) {
    const size_t b = p;
    while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) out.push_back(s[p++]);
    return p > b;
  };
  bool neg = false;
  if (p < s.size() && (s[p] == '+' || s[p] == '-')) neg = s[p++] == '-';
  std::string ip, fp, ep, dp;
  const bool has_int = digits(ip);
  bool has_frac = false;
  if (p < s.size() && s[p] == '.') {
    ++p;
    has_frac = digits(fp);
  }
  if (!has_int && !has_frac) throw bad("no digits");
  std::string mant = ip + fp;
  mant.erase(0, std::min(mant.find_first_not_of('0'), mant.size() - 1));  // "09" would read as octal
  if (mant.empty()) mant = "0";
  Rational r{mp::mpz_int(mant)};
  r /= Rational(mp::pow(mp::mpz_int(10), static_cast<unsigned>(fp.size())));
  if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {
    ++p;
    bool eneg = false;
    if (p < s.size() && (s[p] == '+' || s[p] == '-')) eneg = s[p++] == '-';
    if (!digits(ep)) throw bad("exponent without digits");
    if (ep.size() > 4) throw bad("exponent too large");
    const auto e = static_cast<unsigned>(std::stoul(ep));
    const Rational f(mp::pow(mp::mpz_int(10), e));
    r = eneg ? r / f : r * f;
  } else if (p < s.size() && s[p] == '/') {
    if (has_frac) throw bad("fraction with a decimal point");
    ++p;
    if (!digits(dp)) throw bad("denominator without digits");
    dp.erase(0, std::min(dp.find_first_not_of('0'), dp.size() - 1));
    const mp::mpz_int den(dp);
    if (den == 0) throw bad("zero denominator");
    r /= Rational(den);
  }
  if (p != s.size()) throw bad("trailing characters");
  // Every double is p/q with p, q below 2^1075; beyond that exact arithmetic
  // on it (gamma^(3n)) costs without bound, and no kernel sees such a number.
  if (mp::msb(mp::abs(mp::numerator(r)) + 1) >= kMaxRationalBits || mp::msb(mp::denominator(r)) >= kMaxRationalBits)
    throw bad("its numerator or denominator needs more than 1100 bits (every double needs at most 1075)");
  return neg ? Rational(-r) : r;
}

std::string to_string(const Rational& x) { return x.str(); }

}  // namespace hla
