// Paper-literal second-order forms that SPEC §6 shows wrong (E1, E2, E5).
// Kept only so that properties can exhibit the errors; never use them.
#pragma once

#include "hla/ops/hla2.hpp"

namespace hla::paper {

// E1 (paper §4.3 and Alg. 1 lines 5-6, decay as printed):
// G_t = γG_{t-1} + k_tk_tᵀC_{t-1} (the correct update has γ² and γ, SPEC §3).
template <class T> Mat<T> hla2_streaming_E1(const Head<T>& h) {
  Mat<T> S = Mat<T>::Zero(h.d(), h.d()), C = Mat<T>::Zero(h.d(), h.dv1()), G = C, Y(h.n(), h.dv1());
  for (Index t = 0; t < h.n(); ++t) {
    const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
    G = h.gamma * G + k * (k.transpose() * C);
    S = h.gamma * S + k * k.transpose();
    C = h.gamma * C + q * h.v.row(t);
    const RowVec<T> u = q.transpose() * S + h.lambda * q.transpose();
    Y.row(t) = u * C - q.transpose() * G;
  }
  return Y;
}

// E2 (paper §4.2, decay-aware masked concatenation):
// G = ρ_B G_A + G_B + S_B(ρ_B C_A) — ρ_B where ρ_B² belongs.
template <class T> struct Hla2OpE2 : hla2::Op<T> {
  using Summary = typename hla2::Op<T>::Summary;
  Summary combine(const Summary& A, const Summary& B) const {
    const T& r = B.rho;
    return {r * A.S + B.S, r * A.C + B.C, r * A.G + B.G + B.S * (r * A.C), A.rho * B.rho};
  }
};

// E5 (paper Fig. 1C): chunk output = carry q_tᵀ(SC − G) + intra-chunk masked
// term, without the carry × chunk term ρ_t(q_tᵀS_A)C_{B,≤t}.
template <class T> Mat<T> hla2_chunked_E5(const Head<T>& h, Index w) {
  return hla2::chunked_with(h, w, [](const hla2::ChunkTerms<T>& r) -> Mat<T> { return r.carry + r.intra + r.ridge; });
}

}  // namespace hla::paper
