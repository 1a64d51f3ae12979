// Scalar types the reference is instantiated with, and exact conversions
// between them and the rationals that options and tests are written in.
#pragma once

#include <boost/multiprecision/float128.hpp>
#include <boost/multiprecision/gmp.hpp>
#include <boost/multiprecision/eigen.hpp>
#include <Eigen/Core>

#include <string>
#include <string_view>
#include <type_traits>

namespace hla {

namespace mp = boost::multiprecision;

// Exact rationals (GMP). Expression templates off: generic code may use `auto`.
using Rational = mp::number<mp::gmp_rational, mp::et_off>;
// IEEE binary128: 113-bit significand, the ">= 113-bit" reference precision.
using f113 = mp::float128;
using bf16 = Eigen::bfloat16;
using f16 = Eigen::half;
// Exact rationals without gcds (hla/ffrational.hpp): the fast exact engine.
class FFRational;

// Scalars whose matrix products Eigen evaluates coefficient by coefficient, at
// every size, as it does small products (see below): the exact rationals and
// the emulated precisions. Not double and float, whose blocked, vectorized
// GEMM/GEMV kernels are the reference's fast path at production shapes.
template <class S>
concept coefficient_products = std::is_same_v<S, Rational> || std::is_same_v<S, FFRational> || std::is_same_v<S, f113> ||
                               std::is_same_v<S, bf16> || std::is_same_v<S, f16>;
}  // namespace hla

// Products of the coefficient_products scalars: every dense product, whatever
// its shape and size, is evaluated like Eigen's own small-product path
// (lazyproduct::eval_dynamic in ProductEvaluators.h): the scalar factors of
// both operands are taken out, each coefficient is the left-to-right sum of
// its products, then scaled. Eigen otherwise picks per shape and at run time
// among that path, its blocked GEMM and GEMV kernels and an inner-product
// shortcut; for these scalars (no SIMD packets, each operation a library call)
// the kernels buy no speed, their packing copies every rational (an allocation
// each), and instantiating all of them for every product expression was half
// of these scalars' compile time (an instantiation unit: 27 -> 13.5 s of CPU,
// measured). For rationals no order can change a value. For the rounded ones
// the order is now one rule; Eigen's kernels summed some coefficients in other
// orders (the ragged edge panels of its GEMM, column blocks of its GEMV at
// depth >= 128), so bf16 and f16 results of the naive and chunked forms may
// differ in their last bits from earlier versions; the binary128 references of
// the golden and default fixture suites are byte for byte the same.
namespace Eigen::internal {
template <typename Lhs, typename Rhs>
  requires hla::coefficient_products<typename remove_all<Lhs>::type::Scalar>
struct product_type<Lhs, Rhs> {
  enum { value = CoeffBasedProductMode, ret = CoeffBasedProductMode };
};

template <typename Lhs, typename Rhs>
  requires hla::coefficient_products<typename Product<Lhs, Rhs>::Scalar>
struct generic_product_impl<Lhs, Rhs, DenseShape, DenseShape, CoeffBasedProductMode> {
  using Scalar = typename Product<Lhs, Rhs>::Scalar;
  // Rounded scalars as Eigen's kernels: zero, then add (an exact zero comes
  // out +0, whatever the signs of the zero products it sums); a rational zero has no sign.
  template <typename Dst> static void evalTo(Dst& dst, const Lhs& lhs, const Rhs& rhs) {
    if constexpr (std::is_same_v<Scalar, hla::Rational> || std::is_same_v<Scalar, hla::FFRational>) {
      if (rhs.rows() == 0) dst.setZero();  // an empty sum
      else run(dst, lhs, rhs, assign_op<typename Dst::Scalar, Scalar>());
    } else {
      dst.setZero();
      addTo(dst, lhs, rhs);
    }
  }
  template <typename Dst> static void addTo(Dst& dst, const Lhs& lhs, const Rhs& rhs) {
    if (rhs.rows() > 0) run(dst, lhs, rhs, add_assign_op<typename Dst::Scalar, Scalar>());
  }
  template <typename Dst> static void subTo(Dst& dst, const Lhs& lhs, const Rhs& rhs) {
    if (rhs.rows() > 0) run(dst, lhs, rhs, sub_assign_op<typename Dst::Scalar, Scalar>());
  }

 private:
  template <typename Dst, typename Func> static void run(Dst& dst, const Lhs& lhs, const Rhs& rhs, const Func& func) {
    using L = blas_traits<Lhs>;
    using R = blas_traits<Rhs>;
    if constexpr (L::HasScalarFactor || R::HasScalarFactor)
      call_restricted_packet_assignment_no_alias(
          dst, combine_scalar_factors<Scalar>(lhs, rhs) * L::extract(lhs).lazyProduct(R::extract(rhs)), func);
    else
      call_restricted_packet_assignment_no_alias(dst, L::extract(lhs).lazyProduct(R::extract(rhs)), func);
  }
};
}  // namespace Eigen::internal

namespace hla {

using Index = Eigen::Index;
template <class S> using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic>;
template <class S> using Vec = Eigen::Matrix<S, Eigen::Dynamic, 1>;
template <class S> using RowVec = Eigen::Matrix<S, 1, Eigen::Dynamic>;

template <class S> struct scalar_traits;
template <> struct scalar_traits<Rational> {
  static constexpr const char* name = "rational";
  static constexpr bool exact = true;
  static constexpr int bits = 0;  // unbounded
};
template <> struct scalar_traits<f113> {
  static constexpr const char* name = "f113";
  static constexpr bool exact = false;
  static constexpr int bits = 113;
};
template <> struct scalar_traits<double> {
  static constexpr const char* name = "f64";
  static constexpr bool exact = false;
  static constexpr int bits = 53;
};
template <> struct scalar_traits<float> {
  static constexpr const char* name = "f32";
  static constexpr bool exact = false;
  static constexpr int bits = 24;
};
template <> struct scalar_traits<bf16> {
  static constexpr const char* name = "bf16";
  static constexpr bool exact = false;
  static constexpr int bits = 8;
};
template <> struct scalar_traits<f16> {
  static constexpr const char* name = "f16";
  static constexpr bool exact = false;
  static constexpr int bits = 11;
};

template <class S> inline constexpr bool is_exact_v = scalar_traits<S>::exact;

// Rational -> S, correctly rounded to nearest (MPFR) for the float types.
template <class S> S from_rational(const Rational& x);
// S -> Rational, exact (every finite float is a dyadic rational).
// Throws std::domain_error for NaN/Inf.
template <class S> Rational to_rational(const S& x);

// Nearest double of an exact rational (for reports).
double to_double(const Rational& x);

// Parses "3", "-3/4", "0.9", "1e-6", "-2.5E+3" exactly. Throws InputError
// (problem.hpp) naming the text when it is not a number.
Rational parse_rational(std::string_view text);
// Limits of parse_rational: text length, and bits of numerator and denominator.
inline constexpr std::size_t kMaxRationalChars = 400;
inline constexpr unsigned kMaxRationalBits = 1100;
// "p/q" or "p" (lossless; parse_rational(to_string(x)) == x).
std::string to_string(const Rational& x);

template <class S> Mat<S> mat_from_rational(const Mat<Rational>& m) {
  return m.unaryExpr([](const Rational& x) { return from_rational<S>(x); });
}
template <class S> Mat<Rational> mat_to_rational(const Mat<S>& m) {
  return m.unaryExpr([](const S& x) { return to_rational<S>(x); });
}

}  // namespace hla
