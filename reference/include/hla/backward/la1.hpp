// la1 backward (SPEC §9): gradients of num_t = Σ_{j≤t} γ^(t-j) a_tj v_j for
// an upstream ∂L/∂Y (rows [dnum | dden]). Derivations: backward.md.
#pragma once

#include "hla/backward/adjoint.hpp"

namespace hla {

struct la1_backward {
  static constexpr Variant variant = Variant::la1;

  // Ground truth: each term w·a_tj·v_j of the naive sum, differentiated;
  // c_tj = ⟨dY_t, v_j⟩ is what the term's weight multiplies in L.
  template <class T> static HeadGrad<T> naive(const Head<T>& h, const Mat<T>& dY) {
    const Mat<T> A = h.q * h.k.transpose(), c = dY * h.v.transpose();
    Mat<T> dA = Mat<T>::Zero(h.n(), h.n()), dv = Mat<T>::Zero(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t)
      for (Index j = 0; j <= t; ++j) {
        dA(t, j) += h.weight(t, {j}) * c(t, j);
        dv.row(j) += (h.weight(t, {j}) * A(t, j)) * dY.row(t);
      }
    return through_scores(h, dA, std::move(dv));
  }

  // Reverse recurrence (reverse.hpp) over P_t = γP_{t-1} + k_tv_tᵀ, y_t = q_tᵀP_t:
  // P̄_t = γP̄_{t+1} + q_t dY_t; dq_t = P_t dY_tᵀ, dk_t = P̄_t v_t, dv_t = P̄_tᵀ k_t.
  template <class T> struct State {
    Mat<T> P;
    auto members() { return std::tie(P); }
    auto members() const { return std::tie(P); }
  };
  template <class T> static State<T> zero_state(const Head<T>& h) { return {Mat<T>::Zero(h.d(), h.dv1())}; }
  template <class T> static void advance(const Head<T>& h, State<T>& X, Index t) {
    X.P = h.gamma * X.P + h.k.row(t).transpose() * h.v.row(t);
  }
  template <class T> static RowVec<T> readout(const Head<T>& h, const State<T>& X, Index t) {
    return h.q.row(t) * X.P;
  }
  // X: the state after token t. Xb: ∂L/∂X_t from later tokens in, ∂L/∂X_{t-1} out.
  template <class T>
  static void reverse_step(const Head<T>& h, const Mat<T>& dY, const State<T>& X, State<T>& Xb, Index t, HeadGrad<T>& g) {
    Xb.P += h.q.row(t).transpose() * dY.row(t);
    g.dq.row(t) = dY.row(t) * X.P.transpose();
    g.dk.row(t) = h.v.row(t) * Xb.P.transpose();
    g.dv.row(t) = h.k.row(t) * Xb.P;
    Xb.P *= h.gamma;
  }

  // Chunked matmul form: the backward of the forward's chunk (ops/la1.hpp),
  //   Y = diag(ρ) Q P_A + ((QKᵀ) ⊙ D) V,   P' = γ^L P_A + Kᵀdiag(e)V,
  // with G = dY of the chunk, P̄' the adjoint of P' and M = (GVᵀ) ⊙ D:
  //   dQ = diag(ρ) G P_Aᵀ + MK,   dK = MᵀQ + diag(e) V P̄'ᵀ,   dV = ((QKᵀ) ⊙ D)ᵀG + diag(e) K P̄',
  //   P̄_A = Qᵀdiag(ρ)G + γ^L P̄'.
  template <class T>
  static void chunk_backward(const Head<T>& h, const Mat<T>& dY, Index c0, Index L, const State<T>& A, State<T>& Xb,
                             HeadGrad<T>& g) {
    const auto [Q, K, V, G] = chunk_rows(h, dY, c0, L);
    const Mat<T> D = decay_mask(h, L), M = (G * V.transpose()).cwiseProduct(D);
    const Vec<T> rho = decay_from_carry(h, L), e = decay_to_end(h, L);
    g.dq.middleRows(c0, L) = rho.asDiagonal() * G * A.P.transpose() + M * K;
    g.dk.middleRows(c0, L) = M.transpose() * Q + e.asDiagonal() * V * Xb.P.transpose();
    g.dv.middleRows(c0, L) = (Q * K.transpose()).cwiseProduct(D).transpose() * G + e.asDiagonal() * K * Xb.P;
    Xb.P = Q.transpose() * rho.asDiagonal() * G + chunk_decay(h, L) * Xb.P;
  }
};

}  // namespace hla
