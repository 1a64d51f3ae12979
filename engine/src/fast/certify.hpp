// The double screens of the certified double-double references (outputs:
// engine.cpp; gradients: gradient.cpp): whether every value within a bound
// of a double-double rounds to the same double, decided in double.
#pragma once

#include "hla/fast/matrix.hpp"

#include <algorithm>
#include <cmath>

namespace hla::engine {

using fast::DD;

// A double-double value as the engine holds it.
struct Bounded {
  DD x;
  double e;  // ≥ |x − exact|
};

// An upper bound, in double, of phi·2^-106·M + alpha given M_up ≥ M (the few
// double roundings here are far inside the factors 1 + 2^-40).
inline double bound_up(double phi, double alpha, bool tiny, double M_up) {
  const double a = tiny ? alpha : 0;
  return phi * 0x1p-106 * M_up * (1 + 0x1p-40) + a * (1 + 0x1p-40);
}

// Half the distance from r to its neighbours, the smaller side (exact); 0 when
// r is not in [2^-1000, 2^1000] in magnitude (then the screens below decline).
inline double half_gap(double r) {
  const double a = std::fabs(r);
  if (!(a >= 0x1p-1000 && a <= 0x1p1000)) return 0;
  return std::min(std::nextafter(r, INFINITY) - r, r - std::nextafter(r, -INFINITY)) / 2;
}

// Whether RN(exact) = RN(x) for every exact within v.e of x = hi + lo, decided
// in double (declining when close: the caller then asks binary128). Sets r.
inline bool screen(const Bounded& v, double& r) {
  r = v.x.hi + v.x.lo;            // RN of the exact sum
  if (r != v.x.hi) return false;  // a tie, or not normalized: leave it to binary128
  const double g = half_gap(r);
  return (std::fabs(v.x.lo) + v.e) * (1 + 0x1p-50) < g;
}

inline void two_sum(double a, double b, double& s, double& t) {
  s = a + b;
  const double z = s - a;
  t = (a - (s - z)) + (b - z);
}

}  // namespace hla::engine
