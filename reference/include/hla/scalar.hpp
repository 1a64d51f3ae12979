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
}  // namespace hla

// Eigen evaluates every product of exact rationals coefficient by coefficient
// (as a lazy product), never through its blocked GEMM and GEMV kernels: for an
// exact scalar the order of a sum cannot change its value, the kernels' packing
// copies every rational (an allocation each), and leaving them uninstantiated
// halves the compile time of the rational instantiation units (27 -> 13.5 s of
// CPU for evaluate, measured). Rounded scalars keep Eigen's choice: there the
// kernels' order and scalar factoring decide the bits.
namespace Eigen::internal {
template <typename Lhs, typename Rhs>
  requires std::is_same_v<typename remove_all<Lhs>::type::Scalar, hla::Rational>
struct product_type<Lhs, Rhs> {
  enum { value = CoeffBasedProductMode, ret = CoeffBasedProductMode };
};
}  // namespace Eigen::internal

namespace hla {

// IEEE binary128: 113-bit significand, the ">= 113-bit" reference precision.
using f113 = mp::float128;
using bf16 = Eigen::bfloat16;
using f16 = Eigen::half;

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
