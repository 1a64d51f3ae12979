// What the engine's units and the check layer's share: a number for
// messages, the longest sequence, and whether a binary128 value with an
// error bound certifies its f64 rounding.
#pragma once

#include "hla/batch.hpp"
#include "hla/parallel.hpp"
#include "hla/scalar.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hla::engine {

// x with every digit a double needs to read back the same (for messages).
inline std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// The longest sequence of p (its a priori depth bounds use it).
inline Index longest_sequence(const BatchProblem& p) {
  Index m = 0;
  for (const auto& [t0, t1] : p.sequences()) m = std::max(m, t1 - t0);
  return m;
}

// Whether every value within e of x rounds to the same double as x does
// (then RN64(x) is the correctly rounded exact value).
inline bool certifies(const f113& x, const f113& e) {
  const double r = static_cast<double>(x);
  if (!std::isfinite(r) || !(e >= 0)) return false;
  const f113 lo = (f113(r) + f113(std::nextafter(r, -INFINITY))) / 2;
  const f113 hi = (f113(r) + f113(std::nextafter(r, INFINITY))) / 2;
  return x - e > lo && x + e < hi;
}

}  // namespace hla::engine
