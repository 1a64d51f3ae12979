// The table of storage dtypes: size, format, rounding, limits, names and C ABI
// code of each, in one row; every switch over dtypes derives from it. Light
// header: no Boost, no Eigen.
#pragma once

#include "hla_impl.h"  // the C ABI codes (HLA_F64, ...) the rows carry

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace hla {

enum class DType : std::int32_t { f64, f32, bf16, f16 };

namespace detail {
// 2^e: exact, at compile time by a loop, at run time by ldexp (the limits below
// are read per scored element).
constexpr double pow2(int e) {
  if (!std::is_constant_evaluated()) return std::ldexp(1.0, e);
  double r = 1;
  for (; e > 0; --e) r *= 2;
  for (; e < 0; ++e) r /= 2;
  return r;
}
}  // namespace detail

// An IEEE-style binary format with `exponent_bits` and `mantissa_bits` (stored,
// without the hidden bit); bf16 is f32 with 16 mantissa bits cut.
struct DTypeInfo {
  DType id;
  std::string_view name;              // "bf16"
  std::string_view safetensors_name;  // "BF16"
  int exponent_bits;
  int mantissa_bits;
  std::int32_t abi_code;  // hla_dtype in include/hla_impl.h

  constexpr std::size_t size() const { return static_cast<std::size_t>(1 + exponent_bits + mantissa_bits) / 8; }
  constexpr int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  // u = 2^-(p) for p = mantissa_bits + 1 significant bits.
  constexpr double unit_roundoff() const { return detail::pow2(-(mantissa_bits + 1)); }
  constexpr double smallest_normal() const { return detail::pow2(1 - bias()); }
  constexpr double smallest_subnormal() const { return detail::pow2(1 - bias() - mantissa_bits); }
  constexpr double largest_finite() const {
    return (2 - detail::pow2(-mantissa_bits)) * detail::pow2(bias());
  }
  // Largest error of rounding x to this type (limits(id).rounding_error).
  double rounding_error(double x) const;
  // Rounds x to the nearest value of this type (ties to even; overflow to ±inf),
  // returned as a double. NaN and ±inf pass through.
  double round(double x) const;
  // The value of a size()-byte pattern (low bits of the word); exact.
  double decode(std::uint64_t bits) const;
  // The bit pattern of x, or nothing when x is not exactly a value of this
  // type. NaN: sign and the top payload bits that fit (a payload that would
  // vanish becomes the quiet bit), so a decoded NaN re-encodes to its bits.
  std::optional<std::uint64_t> encode(double x) const;
};

inline constexpr std::array kDTypes{
    DTypeInfo{DType::f64, "f64", "F64", 11, 52, HLA_F64},
    DTypeInfo{DType::f32, "f32", "F32", 8, 23, HLA_F32},
    DTypeInfo{DType::bf16, "bf16", "BF16", 8, 7, HLA_BF16},
    DTypeInfo{DType::f16, "f16", "F16", 5, 10, HLA_F16},
};

constexpr const DTypeInfo& info(DType t) { return kDTypes[static_cast<std::size_t>(t)]; }

namespace detail {
constexpr bool dtypes_in_enum_order() {
  for (std::size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<std::size_t>(kDTypes[i].id) != i || kDTypes[i].abi_code != static_cast<std::int32_t>(kDTypes[i].id))
      return false;
  return true;
}
}  // namespace detail
static_assert(detail::dtypes_in_enum_order(), "kDTypes rows must follow enum DType, C ABI code = enumerator");
static_assert(info(DType::f32).largest_finite() == 3.4028234663852886e38 && info(DType::f16).largest_finite() == 65504 &&
                  info(DType::f32).smallest_normal() == 1.1754943508222875e-38 && info(DType::f16).size() == 2,
              "dtype table disagrees with IEEE 754");

// The limits of each dtype as numbers, computed at compile time (the member
// functions compute them by ldexp at run time): what per-element loops read.
struct DTypeLimits {
  double unit, min_normal, max_finite, half_subnormal;
  // Largest error of rounding x to the type: u·|x| plus half the smallest subnormal.
  constexpr double rounding_error(double x) const { return (x < 0 ? -x : x) * unit + half_subnormal; }
};
inline constexpr auto kDTypeLimits = [] {
  std::array<DTypeLimits, kDTypes.size()> l{};
  for (const DTypeInfo& f : kDTypes)
    l[static_cast<std::size_t>(f.id)] = {f.unit_roundoff(), f.smallest_normal(), f.largest_finite(), f.smallest_subnormal() / 2};
  return l;
}();
constexpr const DTypeLimits& limits(DType t) { return kDTypeLimits[static_cast<std::size_t>(t)]; }
inline double DTypeInfo::rounding_error(double x) const { return limits(id).rounding_error(x); }

std::string to_string(DType t);
DType parse_dtype(std::string_view s);  // "f64" | "f32" | "bf16" | "f16" (also upper case); throws InputError
std::string dtype_csv();  // "f64,f32,bf16,f16"
inline std::size_t dtype_size(DType t) { return info(t).size(); }
// Rounds x to the nearest value of type t (ties to even), returned as a double.
inline double round_to(DType t, double x) { return info(t).round(x); }
bool representable(DType t, double x);  // round_to(t, x) == x (NaN counts as representable)

}  // namespace hla
