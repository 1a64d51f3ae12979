// The fast engine's exact (Rational) result against the values and magnitudes
// it must equal, for the engine's properties (fast_engine.cpp, state.cpp).
#pragma once

#include "hla/evaluate.hpp"
#include "hla/fast/engine.hpp"

#include <string>

namespace hla::test {

// The first element (row t, column c; column dv is den) where the engine's
// value or magnitude differs from want / mag, spelled out; "" when none.
inline std::string engine_mismatch(const fast::HeadResult<Rational>& r, const Output<Rational>& want, const Output<Rational>& mag) {
  const Index dv = want.num.cols();
  for (Index t = 0; t < want.num.rows(); ++t)
    for (Index c = 0; c <= dv; ++c) {
      const Rational& w = c == dv ? want.den(t) : want.num(t, c);
      const Rational& m = c == dv ? mag.den(t) : mag.num(t, c);
      const std::string at = "[t=" + std::to_string(t) + ", c=" + std::to_string(c) + "]";
      if (r.val.at(t, c) != w) return "value" + at + ": engine " + to_string(r.val.at(t, c)) + ", want " + to_string(w);
      if (r.mag.at(t, c) != m) return "magnitude" + at + ": engine " + to_string(r.mag.at(t, c)) + ", want " + to_string(m);
    }
  return "";
}

}  // namespace hla::test
