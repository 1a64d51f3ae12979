// Dual numbers a + bε (ε² = 0) over an exact scalar: evaluating any forward
// form on x + εh gives f(x) + ε·⟨∇f(x), h⟩ exactly (forward-mode
// differentiation), with no hand-derived algebra (SPEC §9).
//
// Comparisons and abs look at the value only: a branch (the clamp's max, a
// sign) is taken as at x, and the tangent is the derivative of the branch taken.
#pragma once

#include "hla/scalar.hpp"

#include <ostream>

namespace hla::test {

template <class R> struct Dual {
  R val{0}, tan{0};

  Dual() = default;
  Dual(int x) : val(x) {}  // NOLINT: constants (T(0), T(1)) are exact values
  Dual(R v, R t = R(0)) : val(std::move(v)), tan(std::move(t)) {}

  Dual& operator+=(const Dual& o) { return *this = *this + o; }
  Dual& operator-=(const Dual& o) { return *this = *this - o; }
  Dual& operator*=(const Dual& o) { return *this = *this * o; }
  Dual& operator/=(const Dual& o) { return *this = *this / o; }

  friend Dual operator+(const Dual& a, const Dual& b) { return {a.val + b.val, a.tan + b.tan}; }
  friend Dual operator-(const Dual& a, const Dual& b) { return {a.val - b.val, a.tan - b.tan}; }
  friend Dual operator-(const Dual& a) { return {-a.val, -a.tan}; }
  friend Dual operator*(const Dual& a, const Dual& b) { return {a.val * b.val, a.val * b.tan + a.tan * b.val}; }
  friend Dual operator/(const Dual& a, const Dual& b) { return {a.val / b.val, (a.tan * b.val - a.val * b.tan) / (b.val * b.val)}; }
  // Equality is of the whole number (a summary that compares equal is equal);
  // order is of the value (the branches of normalize).
  friend bool operator==(const Dual& a, const Dual& b) { return a.val == b.val && a.tan == b.tan; }
  friend bool operator<(const Dual& a, const Dual& b) { return a.val < b.val; }
  friend bool operator>(const Dual& a, const Dual& b) { return b.val < a.val; }
  friend bool operator<=(const Dual& a, const Dual& b) { return !(b.val < a.val); }
  friend bool operator>=(const Dual& a, const Dual& b) { return !(a.val < b.val); }
  friend Dual abs(const Dual& a) { return a.val < R(0) ? -a : a; }  // derivative sign(x), +1 at 0
  friend std::ostream& operator<<(std::ostream& os, const Dual& a) { return os << a.val << " + " << a.tan << "e"; }
};

}  // namespace hla::test

// Eigen: a non-complex exact scalar that needs construction (like GMP rationals).
template <class R> struct Eigen::NumTraits<hla::test::Dual<R>> : Eigen::GenericNumTraits<hla::test::Dual<R>> {
  using Real = hla::test::Dual<R>;
  using NonInteger = Real;
  using Nested = Real;
  using Literal = Real;
  enum { IsComplex = 0, IsInteger = 0, IsSigned = 1, RequireInitialization = 1, ReadCost = 1, AddCost = 4, MulCost = 8 };
  static Real epsilon() { return Real(0); }
  static Real dummy_precision() { return Real(0); }
  static int digits10() { return 0; }
};
