#include "hla/dtype.hpp"

#include "hla/error.hpp"
#include "hla/variants.hpp"  // join

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>

namespace hla {
namespace {

constexpr std::uint64_t kDoubleMantMask = (std::uint64_t{1} << 52) - 1;

std::uint64_t exp_max(const DTypeInfo& f) { return (std::uint64_t{1} << f.exponent_bits) - 1; }

// A type with f32's exponent range (f32; bf16, f32 with mantissa bits cut) is
// handled per element by the hardware conversion: the bits below its mantissa
// in the f32 pattern, which must be zero. Only for f32-normal magnitudes (and
// infinities): a process with flush-to-zero or denormals-are-zero set (as some
// numeric libraries do) would flush f32 subnormals; those take the bit paths.
bool f32_range(const DTypeInfo& f) { return f.exponent_bits == 8; }
bool f32_normal_or_inf(double x) { return std::fabs(x) >= 0x1p-126; }
std::uint32_t f32_cut_mask(const DTypeInfo& f) { return (std::uint32_t{1} << (23 - f.mantissa_bits)) - 1; }

}  // namespace

double DTypeInfo::round(double x) const {
  if (!std::isfinite(x) || x == 0 || id == DType::f64) return x;
  const DTypeLimits& l = limits(id);
  if (const double a = std::fabs(x); a >= l.min_normal && a <= l.max_finite) {
    // Normal range: round the double's significand to mantissa_bits bits,
    // ties to even, on the bit pattern (a carry into the exponent is the next
    // power of 2, as it should be).
    const int drop = 52 - mantissa_bits;
    std::uint64_t u = std::bit_cast<std::uint64_t>(x);
    u += (std::uint64_t{1} << (drop - 1)) - 1 + ((u >> drop) & 1);
    u &= ~((std::uint64_t{1} << drop) - 1);
    const double y = std::bit_cast<double>(u);
    return std::fabs(y) > l.max_finite ? std::copysign(INFINITY, x) : y;
  }
  int e = 0;
  (void)std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  // Exponent of the unit in the last place at x: normal or subnormal spacing.
  const int q = std::max(e - 1, 1 - bias()) - mantissa_bits;
  // Scaling by 2^-q is exact (|x| has at most 53 bits and stays in range);
  // nearbyint rounds to nearest, ties to even, in the default rounding mode.
  const double y = std::ldexp(std::nearbyint(std::ldexp(x, -q)), q);
  return std::fabs(y) > largest_finite() ? std::copysign(INFINITY, x) : y;
}

double DTypeInfo::decode(std::uint64_t bits) const {
  if (id == DType::f64) return std::bit_cast<double>(bits);
  const std::uint64_t mant_mask = (std::uint64_t{1} << mantissa_bits) - 1;
  const bool neg = (bits >> (exponent_bits + mantissa_bits)) & 1;
  const std::uint64_t e = (bits >> mantissa_bits) & exp_max(*this);
  const std::uint64_t m = bits & mant_mask;
  if (f32_range(*this) && e != 0 && (e != exp_max(*this) || m == 0))  // normal or inf (a NaN's payload the conversion may quiet)
    return static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(bits << (23 - mantissa_bits))));
  if (e != 0 && e != exp_max(*this))  // normal: the double's fields straight from these
    return std::bit_cast<double>((std::uint64_t{neg} << 63) | ((e - static_cast<std::uint64_t>(bias()) + 1023) << 52) |
                                 (m << (52 - mantissa_bits)));
  if (e == exp_max(*this)) {
    if (m == 0) return neg ? -INFINITY : INFINITY;
    // NaN: payload (quiet bit included) into the top of the double's mantissa.
    const std::uint64_t d = (std::uint64_t{neg} << 63) | (std::uint64_t{0x7ff} << 52) | (m << (52 - mantissa_bits));
    return std::bit_cast<double>(d);
  }
  // Exact in double: at most 24 significant bits, exponent well inside double's range.
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias() - mantissa_bits)
                            : std::ldexp(static_cast<double>(m + (std::uint64_t{1} << mantissa_bits)),
                                         static_cast<int>(e) - bias() - mantissa_bits);
  return neg ? -mag : mag;
}

std::optional<std::uint64_t> DTypeInfo::encode(double x) const {
  if (id == DType::f64) return std::bit_cast<std::uint64_t>(x);
  const std::uint64_t sign = std::uint64_t{std::signbit(x)} << (exponent_bits + mantissa_bits);
  const std::uint64_t inf = exp_max(*this) << mantissa_bits;
  if (std::isnan(x)) {
    std::uint64_t m = (std::bit_cast<std::uint64_t>(x) & kDoubleMantMask) >> (52 - mantissa_bits);
    if (m == 0) m = std::uint64_t{1} << (mantissa_bits - 1);
    return sign | inf | m;
  }
  if (std::isinf(x)) return sign | inf;
  if (x == 0) return sign;
  if (f32_range(*this) && f32_normal_or_inf(x)) {
    const float y = static_cast<float>(x);
    const std::uint32_t b = std::bit_cast<std::uint32_t>(y);
    if (static_cast<double>(y) != x || (b & f32_cut_mask(*this)) != 0) return std::nullopt;  // more bits, or beyond the range
    return b >> (23 - mantissa_bits);
  }
  {
    // Normal range of this type: the fields come straight from the double's.
    const std::uint64_t u = std::bit_cast<std::uint64_t>(x);
    const int ue = static_cast<int>((u >> 52) & 0x7ff) - 1023;
    const int drop = 52 - mantissa_bits;
    if (ue >= 1 - bias() && ue <= bias()) {
      if ((u & ((std::uint64_t{1} << drop) - 1)) != 0) return std::nullopt;  // more bits than the type has
      return sign | (static_cast<std::uint64_t>(ue + bias()) << mantissa_bits) | ((u & kDoubleMantMask) >> drop);
    }
  }
  int ex = 0;
  const double a = std::fabs(x);
  (void)std::frexp(a, &ex);
  const int u = ex - 1;  // a = 1.xxx · 2^u
  std::uint64_t e;
  double m;
  if (u >= 1 - bias()) {
    if (u > bias()) return std::nullopt;  // overflow
    e = static_cast<std::uint64_t>(u + bias());
    m = std::ldexp(a, mantissa_bits - u) - std::ldexp(1.0, mantissa_bits);  // exact: a has ≤ 53 bits
  } else {
    e = 0;
    m = std::ldexp(a, bias() - 1 + mantissa_bits);  // subnormal: a / 2^(1 - bias - mantissa_bits)
  }
  if (m != std::floor(m) || m >= std::ldexp(1.0, mantissa_bits)) return std::nullopt;
  return sign | (e << mantissa_bits) | static_cast<std::uint64_t>(m);
}

std::string to_string(DType t) { return std::string(info(t).name); }

namespace {
std::vector<std::string> dtype_names() {
  std::vector<std::string> r;
  for (const DTypeInfo& t : kDTypes) r.emplace_back(t.name);
  return r;
}
}  // namespace

DType parse_dtype(std::string_view s) {
  for (const DTypeInfo& t : kDTypes)
    if (s == t.name || s == t.safetensors_name) return t.id;
  throw InputError("unknown dtype '" + std::string(s) + "' (expected " + join_or(dtype_names()) + ")");
}

std::string dtype_csv() { return join(dtype_names(), ",", ","); }

bool representable(DType t, double x) {
  if (std::isnan(x)) return true;
  if (const DTypeInfo& f = info(t); f32_range(f) && f32_normal_or_inf(x)) {
    const float y = static_cast<float>(x);
    return static_cast<double>(y) == x && (std::bit_cast<std::uint32_t>(y) & f32_cut_mask(f)) == 0;
  }
  return round_to(t, x) == x;
}

}  // namespace hla
