// Bit-level conversions the zoo's C ABI candidates need: IEEE binary16 (F16)
// and bfloat16 (BF16) <-> float, rounding to nearest, ties to even. Written
// here from the formats' definitions (a candidate must not borrow the
// project's reference code); zoo_selftest checks them against the compiler's
// _Float16.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace zoo {

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// BF16 is the top half of a float32: widening is exact.
inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round the low 16 bits away, ties to even (may carry into Inf)
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));  // Inf, NaN
  if (exp == 0) {                                                        // zero, subnormal: man·2^-24
    const float x = static_cast<float>(man) * 0x1p-24f;
    return sign ? -x : x;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));  // rebias 15 -> 127
}

inline uint16_t float_to_f16(float x) {
  const uint32_t u = float_bits(x);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 (tie to even): Inf
  if (a >= 0x38800000u) {  // normal half (>= 2^-14): rebias, round 13 bits away (a carry bumps the exponent)
    const uint32_t r = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | r);
  }
  // Subnormal half: units of 2^-24; x·2^24 is exact in float, nearbyint rounds ties to even.
  const auto m = static_cast<uint32_t>(std::nearbyint(bits_float(a) * 0x1p24f));
  return static_cast<uint16_t>(sign | m);  // m == 1024 is the smallest normal, as it should be
}

// float -> nearest half -> float (what a half-precision accumulator keeps).
inline float round_to_f16(float x) { return f16_to_float(float_to_f16(x)); }

}  // namespace zoo
