#include "hla/io/float_bits.hpp"

#include <bit>
#include <cmath>

namespace hla::io {
namespace {

struct Format {
  int exp_bits, mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  std::uint64_t exp_max() const { return (std::uint64_t{1} << exp_bits) - 1; }
};

Format format_of(DType t) {
  switch (t) {
    case DType::f64: return {11, 52};
    case DType::f32: return {8, 23};
    case DType::bf16: return {8, 7};
    case DType::f16: return {5, 10};
  }
  return {11, 52};
}

constexpr std::uint64_t kDoubleMantMask = (std::uint64_t{1} << 52) - 1;

}  // namespace

double decode_float(DType t, std::uint64_t bits) {
  if (t == DType::f64) return std::bit_cast<double>(bits);
  const Format f = format_of(t);
  const std::uint64_t mant_mask = (std::uint64_t{1} << f.mant_bits) - 1;
  const bool neg = (bits >> (f.exp_bits + f.mant_bits)) & 1;
  const std::uint64_t e = (bits >> f.mant_bits) & f.exp_max();
  const std::uint64_t m = bits & mant_mask;
  if (e == f.exp_max()) {
    if (m == 0) return neg ? -INFINITY : INFINITY;
    // NaN: payload (quiet bit included) into the top of the double's mantissa.
    const std::uint64_t d = (std::uint64_t{neg} << 63) | (std::uint64_t{0x7ff} << 52) | (m << (52 - f.mant_bits));
    return std::bit_cast<double>(d);
  }
  // Exact in double: at most 24 significant bits, exponent well inside double's range.
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias() - f.mant_bits)
                            : std::ldexp(static_cast<double>(m + (std::uint64_t{1} << f.mant_bits)),
                                         static_cast<int>(e) - f.bias() - f.mant_bits);
  return neg ? -mag : mag;
}

std::optional<std::uint64_t> encode_float(DType t, double x) {
  if (t == DType::f64) return std::bit_cast<std::uint64_t>(x);
  const Format f = format_of(t);
  const std::uint64_t sign = std::uint64_t{std::signbit(x)} << (f.exp_bits + f.mant_bits);
  const std::uint64_t inf = f.exp_max() << f.mant_bits;
  if (std::isnan(x)) {
    std::uint64_t m = (std::bit_cast<std::uint64_t>(x) & kDoubleMantMask) >> (52 - f.mant_bits);
    if (m == 0) m = std::uint64_t{1} << (f.mant_bits - 1);
    return sign | inf | m;
  }
  if (std::isinf(x)) return sign | inf;
  if (x == 0) return sign;
  int ex = 0;
  const double a = std::fabs(x);
  (void)std::frexp(a, &ex);
  const int u = ex - 1;  // a = 1.xxx · 2^u
  std::uint64_t e;
  double m;
  if (u >= 1 - f.bias()) {
    if (u > f.bias()) return std::nullopt;  // overflow
    e = static_cast<std::uint64_t>(u + f.bias());
    m = std::ldexp(a, f.mant_bits - u) - std::ldexp(1.0, f.mant_bits);  // exact: a has ≤ 53 bits
  } else {
    e = 0;
    m = std::ldexp(a, f.bias() - 1 + f.mant_bits);  // subnormal: a / 2^(1 - bias - mant_bits)
  }
  if (m != std::floor(m) || m >= std::ldexp(1.0, f.mant_bits)) return std::nullopt;
  return sign | (e << f.mant_bits) | static_cast<std::uint64_t>(m);
}

}  // namespace hla::io
