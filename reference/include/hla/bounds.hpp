// Error bounds of SPEC §7, written once for every user: the float properties,
// the checker and the demo.
#pragma once

#include "hla/problem.hpp"

#include <optional>

namespace hla {

// Given |Δnum| ≤ eN and |Δden| ≤ eD for one element (num, den exact), a bound
// on |Δout| for out = num / D with D = den + ε (add) or
// sign(den)·max(|den|, ε) (clamp). Exact, not first order:
//   out' − out = (Δnum − out·ΔD) / D',  |ΔD| ≤ eD  (clamping is 1-Lipschitz),
//   |D'| ≥ |D| − eD (add),  |D'| ≥ max(ε, |D| − eD) (clamp, same sign).
// Returns nothing when the division is not bounded away from a pole: add mode
// with |den + ε| ≤ eD, clamp mode with |den| ≤ eD (the sign may flip). Such
// elements are ill-conditioned: they must be flagged, not scored.
// The divisor of a normalized output: den + ε (add) or sign(den)·max(|den|, ε)
// (clamp, sign(0) = +1).
template <class R> R normalizer(const R& den, const R& eps, EpsMode mode) {
  using std::abs;
  if (mode == EpsMode::add) return den + eps;
  return (den < R(0) ? R(-1) : R(1)) * (abs(den) < eps ? eps : R(abs(den)));
}

// First-order magnitude of a normalized output: errors u·magN in num and u·magD
// in den move out = num/D by about u·(magN + |out|·magD)/|D|. Nothing at a pole (D = 0).
template <class R>
std::optional<R> normalized_magnitude(const R& num, const R& den, const R& eps, EpsMode mode, const R& magN, const R& magD) {
  using std::abs;
  const R D = normalizer(den, eps, mode);
  if (D == R(0)) return std::nullopt;
  return R((magN + abs(num / D) * magD) / abs(D));
}

template <class R>
std::optional<R> normalized_error_bound(const R& num, const R& den, const R& eps, EpsMode mode, const R& eN, const R& eD) {
  using std::abs;
  const R D = normalizer(den, eps, mode);
  R floor;
  if (mode == EpsMode::add) {
    floor = abs(D) - eD;
  } else {
    if (abs(den) <= eD) return std::nullopt;
    floor = abs(D) - eD < eps ? eps : R(abs(D) - eD);
  }
  if (floor <= R(0)) return std::nullopt;
  return R((eN + abs(num / D) * eD) / floor);
}

}  // namespace hla
