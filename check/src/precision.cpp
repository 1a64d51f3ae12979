#include "hla/check/precision.hpp"

#include "hla/problem.hpp"

#include <cmath>

namespace hla::check {

std::string to_string(Precision p) {
  switch (p) {
    case Precision::f64: return "f64";
    case Precision::f32: return "f32";
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::f16: return "f16";
  }
  return "?";
}

Precision parse_precision(std::string_view s) {
  for (Precision p : {Precision::f64, Precision::f32, Precision::tf32, Precision::bf16, Precision::f16})
    if (to_string(p) == s) return p;
  throw InputError("unknown precision '" + std::string(s) + "' (expected f64, f32, tf32, bf16 or f16)");
}

double unit_roundoff(Precision p) {
  switch (p) {
    case Precision::f64: return std::ldexp(1.0, -53);
    case Precision::f32: return std::ldexp(1.0, -24);
    case Precision::tf32: return std::ldexp(1.0, -11);
    case Precision::bf16: return std::ldexp(1.0, -8);
    case Precision::f16: return std::ldexp(1.0, -11);
  }
  return 0;
}

}  // namespace hla::check
