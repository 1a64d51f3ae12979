// FFRational: exact rationals without gcds (the fraction-free exact engine).
//
// Every input of an HLA problem is dyadic (a float is m·2^e) and its options
// γ, λ, ε, scale are rationals; the forms only add, subtract and multiply (a
// normalized output divides once). So every intermediate value is
//     N · 2^e / B^k
// with N an integer, e, k integers and B one odd integer for the whole
// computation: the context's base (FFContext), built from the odd parts of the
// option denominators (and of any non-dyadic input). Multiplying adds the
// exponents; adding aligns them (a shift, a product by B^Δk); no gcd is ever
// taken, and N lives in an inline buffer of limbs (no allocation below
// kInline limbs). A value converts to the canonical Rational once, at the end.
// N is kept odd (its factors of two are in e), so the value is 0 exactly when
// N is.
//
// A quotient whose divisor is not ±2^e/B^k (num / (den ⊕ ε)) has no such form:
// it is held as a Rational, and so is every value computed from one (correct,
// as fast as GMP's mpq). Values with k > 0 belong to the context they were made
// in; mixing contexts throws std::logic_error.
//
// The reference library's algorithms are generic over the scalar: FFRational
// is one more scalar they are instantiated with (reference/src/exact.cpp), and
// hla/exact.hpp evaluates a Problem<Rational> through it, giving the same
// rationals as the evaluation in Rational.
#pragma once

#include "hla/problem.hpp"
#include "hla/scalar.hpp"

#include <gmp.h>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <span>
#include <vector>

namespace hla {

class FFRational {
 public:
  // Limbs of N held inline (N below 2^(64·kInline) allocates nothing).
  static constexpr int kInline = 12;

  FFRational() noexcept {}
  FFRational(int x) { set_small(x); }   // NOLINT: exact constants T(0), T(1), T(2)
  FFRational(long x) { set_small(x); }  // NOLINT
  // Copies and moves of values below kInline limbs are inline, of fixed size
  // (Eigen copies a coefficient wherever it reads a const expression).
  FFRational(const FFRational& o) {
    if (!o.rat_ && o.limbs() <= kInline) copy_small(o);
    else copy_from(o);
  }
  FFRational(FFRational&& o) noexcept { move_from(o); }
  FFRational& operator=(const FFRational& o) {
    if (!rat_ && !o.rat_ && o.limbs() <= kInline) copy_small(o);
    else if (this != &o) copy_from(o);
    return *this;
  }
  FFRational& operator=(FFRational&& o) noexcept {
    if (this != &o) {
      release();
      move_from(o);
    }
    return *this;
  }
  ~FFRational() { release(); }

  // Exact conversions. A rational whose odd denominator has a prime that the
  // current context's base lacks is held as a Rational (correct, slower).
  static FFRational from(const Rational& x);
  static FFRational from(double x);  // finite
  Rational to_rational() const;

  friend FFRational operator+(const FFRational& a, const FFRational& b);
  friend FFRational operator-(const FFRational& a, const FFRational& b);
  friend FFRational operator*(const FFRational& a, const FFRational& b);
  // Throws std::overflow_error on a zero divisor (as Rational does).
  friend FFRational operator/(const FFRational& a, const FFRational& b);
  friend FFRational operator-(const FFRational& a) {
    FFRational r(a);
    r.negate();
    return r;
  }
  FFRational& operator+=(const FFRational& o);
  FFRational& operator-=(const FFRational& o);
  FFRational& operator*=(const FFRational& o) { return *this = *this * o; }
  FFRational& operator/=(const FFRational& o) { return *this = *this / o; }

  // -1, 0 or 1 as a <, =, > b.
  friend int compare(const FFRational& a, const FFRational& b);
  friend bool operator==(const FFRational& a, const FFRational& b) { return compare(a, b) == 0; }
  friend bool operator<(const FFRational& a, const FFRational& b) { return compare(a, b) < 0; }
  friend bool operator>(const FFRational& a, const FFRational& b) { return compare(a, b) > 0; }
  friend bool operator<=(const FFRational& a, const FFRational& b) { return compare(a, b) <= 0; }
  friend bool operator>=(const FFRational& a, const FFRational& b) { return compare(a, b) >= 0; }
  friend FFRational abs(const FFRational& a) {
    FFRational r(a);
    if (r.sign() < 0) r.negate();
    return r;
  }
  friend std::ostream& operator<<(std::ostream& os, const FFRational& a);

  int sign() const;
  bool is_zero() const { return !rat_ && size_ == 0; }
  // For tests and the benchmark: whether the value is held as a Rational, and N's limbs.
  bool is_fallback() const { return rat_ != nullptr; }
  int limbs() const { return size_ < 0 ? -size_ : size_; }

 private:
  friend struct FFOps;
  int32_t size_ = 0;  // signed limb count of N (its sign is the value's); 0: zero
  int32_t cap_ = kInline;
  int32_t e_ = 0;
  int32_t k_ = 0;
  uint32_t ctx_ = 0;            // the context tag of k_ (0 when k_ == 0)
  mp_limb_t* heap_ = nullptr;   // N's limbs when more than kInline
  Rational* rat_ = nullptr;     // not null: the value is *rat_ (a quotient)
  mp_limb_t buf_[kInline];

  mp_limb_t* d() { return heap_ ? heap_ : buf_; }
  const mp_limb_t* d() const { return heap_ ? heap_ : buf_; }
  void set_small(long x) {
    if (x == 0) return;
    unsigned long m = x < 0 ? 0ul - static_cast<unsigned long>(x) : static_cast<unsigned long>(x);
    const int tz = __builtin_ctzl(m);
    buf_[0] = m >> tz;
    e_ = tz;
    size_ = x < 0 ? -1 : 1;
  }
  void negate();
  void release() noexcept {
    if (heap_ || rat_) release_slow();
  }
  void release_slow() noexcept;
  // o: not a Rational, at most kInline limbs; this: not a Rational. Both
  // hold at least kInline limbs, so the copy has a fixed size.
  void copy_small(const FFRational& o) {
    __builtin_memcpy(d(), o.d(), sizeof buf_);
    size_ = o.size_, e_ = o.e_, k_ = o.k_, ctx_ = o.ctx_;
  }
  void move_from(FFRational& o) noexcept {
    size_ = o.size_, e_ = o.e_, k_ = o.k_, ctx_ = o.ctx_, rat_ = o.rat_;
    if (o.heap_) {
      heap_ = o.heap_, cap_ = o.cap_;
      o.heap_ = nullptr, o.cap_ = kInline;
    } else {
      __builtin_memcpy(buf_, o.buf_, sizeof buf_);
    }
    o.rat_ = nullptr, o.size_ = 0, o.e_ = 0, o.k_ = 0, o.ctx_ = 0;
  }
  void copy_from(const FFRational& o);
};

// The base B of the current thread's exact computation. An FFContext sets it
// for its lifetime (nested ones restore the outer), from rationals whose odd
// denominators it must cover: B is the product of a coprime basis of them
// (gcds only), so that γ = 9/10 with scale = x/10^17 and ε = 10^-6 give B = 5.
class FFContext {
 public:
  explicit FFContext(const std::vector<Rational>& values);
  // Every option of o (γ, λ, ε, scale) and every entry of the inputs.
  FFContext(const Options& o, const std::vector<std::span<const Rational>>& inputs = {});
  // The current thread's base B (1 outside any context).
  static const mp::mpz_int& base();
  ~FFContext();
  FFContext(const FFContext&) = delete;
  FFContext& operator=(const FFContext&) = delete;

  struct State;

 private:
  std::unique_ptr<State> state_;
  State* outer_;
};

template <> struct scalar_traits<FFRational> {
  static constexpr const char* name = "ffrational";
  static constexpr bool exact = true;
  static constexpr int bits = 0;
};

}  // namespace hla

// Eigen: a non-complex exact scalar that needs construction (like GMP rationals).
template <> struct Eigen::NumTraits<hla::FFRational> : Eigen::GenericNumTraits<hla::FFRational> {
  using Real = hla::FFRational;
  using NonInteger = Real;
  using Nested = Real;
  using Literal = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 1, ReadCost = 1, AddCost = 4, MulCost = 8 };
  static Real epsilon() { return Real(0); }
  static Real dummy_precision() { return Real(0); }
  static int digits10() { return 0; }
};
