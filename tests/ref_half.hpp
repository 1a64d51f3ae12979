// The independent IEEE half the tests compare conversions with: the compiler's
// _Float16 where it has one (GCC 12, clang 15 and later on x86-64), else
// Eigen's (clang 14).
#pragma once

#ifdef __FLT16_MANT_DIG__
using ref_half = _Float16;
inline constexpr const char* ref_half_name = "_Float16";
#else
#include <Eigen/Core>
using ref_half = Eigen::half;
inline constexpr const char* ref_half_name = "Eigen::half";
#endif
