// Paper-literal AHLA forms that SPEC §6 shows wrong (E3, E6).
// Kept only so that properties can exhibit the errors; never use them.
#pragma once

#include "hla/ops/ahla.hpp"

namespace hla::paper {

// E3 (paper §6.2, decay-aware concatenation): R decayed, R = ρ_B R_A + R_B.
template <class T> struct AhlaOpE3 : ahla::Op<T> {
  using Summary = typename ahla::Op<T>::Summary;
  Summary combine(const Summary& A, const Summary& B) const {
    const T& r = B.rho;
    return {r * A.R + B.R, r * A.P + B.P, r * A.E + B.E + B.R * (r * A.P), A.rho * B.rho};
  }
};

// E6 (paper Fig. 2C read with a strict mask): the routed carry term uses
// R_{B,<t}, dropping i = t: ρ_t ((QKᵀ) ⊙ L_strict) Q P_A.
template <class T> Mat<T> ahla_chunked_E6(const Head<T>& h, Index w) {
  return ahla::chunked_with(h, w, [&h](const ahla::ChunkTerms<T>& r, const ahla::Carry<T>& a, Index c0, Index L) -> Mat<T> {
    const auto Q = h.q.middleRows(c0, L);
    const Mat<T> strict = (Q * h.k.middleRows(c0, L).transpose()).cwiseProduct(causal_mask<T>(L, true));
    return r.carry + decay_from_carry(h, L).asDiagonal() * (strict * Q * a.P) + r.intra;
  });
}

}  // namespace hla::paper
