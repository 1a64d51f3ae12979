// ahla backward (SPEC §9): gradients of num_t = Σ_{j≤i≤t} γ^(t-j) a_ti a_ij v_j
// for an upstream ∂L/∂Y (rows [dnum | dden]). Derivations: backward.md.
#pragma once

#include "hla/backward/adjoint.hpp"

namespace hla {

struct ahla_backward {
  static constexpr Variant variant = Variant::ahla;

  // Ground truth: each term w·a_ti·a_ij·v_j differentiated factor by factor
  // (at i = t or i = j the two factors are the same a and both count);
  // c_tj = ⟨dY_t, v_j⟩.
  template <class T> static HeadGrad<T> naive(const Head<T>& h, const Mat<T>& dY) {
    const Mat<T> A = h.q * h.k.transpose(), c = dY * h.v.transpose();
    Mat<T> dA = Mat<T>::Zero(h.n(), h.n()), dv = Mat<T>::Zero(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t)
      for (Index j = 0; j <= t; ++j) {
        const T w = h.weight(t, {j});
        T coef(0);
        for (Index i = j; i <= t; ++i) {
          coef += A(t, i) * A(i, j);
          dA(t, i) += w * c(t, j) * A(i, j);
          dA(i, j) += w * c(t, j) * A(t, i);
        }
        dv.row(j) += (w * coef) * dY.row(t);
      }
    return through_scores(h, dA, std::move(dv));
  }

  // Reverse recurrence (reverse.hpp) over Alg. 2 (SPEC §3): P_t = γP + k_tv_tᵀ,
  // E_t = γE + k_t(q_tᵀP_t), y_t = q_tᵀE_t. Adjoint states, g = dY_t:
  //   Ē_t = γĒ_{t+1} + q_t g,   P̄_t = γP̄_{t+1} + q_t(k_tᵀĒ_t)
  //   dq_t = E_t gᵀ + P_tĒ_tᵀk_t,   dk_t = Ē_tP_tᵀq_t + P̄_t v_t,   dv_t = P̄_tᵀk_t
  template <class T> struct State {
    Mat<T> P, E;
    auto members() { return std::tie(P, E); }
    auto members() const { return std::tie(P, E); }
  };
  template <class T> static State<T> zero_state(const Head<T>& h) {
    return {Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1())};
  }
  template <class T> static void advance(const Head<T>& h, State<T>& X, Index t) {
    const Vec<T> k = h.k.row(t).transpose();
    X.P = h.gamma * X.P + k * h.v.row(t);
    X.E = h.gamma * X.E + k * (h.q.row(t) * X.P);
  }
  template <class T> static RowVec<T> readout(const Head<T>& h, const State<T>& X, Index t) {
    return h.q.row(t) * X.E;
  }
  // X: the state after token t. Xb: ∂L/∂X_t from later tokens in, ∂L/∂X_{t-1} out.
  template <class T>
  static void reverse_step(const Head<T>& h, const Mat<T>& dY, const State<T>& X, State<T>& Xb, Index t, HeadGrad<T>& g) {
    const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
    Xb.E += q * dY.row(t);
    const RowVec<T> kE = k.transpose() * Xb.E;
    Xb.P += q * kE;
    g.dq.row(t) = dY.row(t) * X.E.transpose() + kE * X.P.transpose();
    g.dk.row(t) = (q.transpose() * X.P) * Xb.E.transpose() + h.v.row(t) * Xb.P.transpose();
    g.dv.row(t) = k.transpose() * Xb.P;
    Xb.P *= h.gamma;
    Xb.E *= h.gamma;
  }

  // Chunked matmul form: the backward of the forward's chunk (ops/ahla.hpp),
  // product by product as in hla2_backward. Carry A = (P_A, E_A), QK = QKᵀ,
  // W_m = QK ⊙ L, W_d = QK ⊙ D, G = dY of the chunk, Gρ = diag(ρ)G:
  //   Y  = diag(ρ)QE_A + diag(ρ)W_mQP_A + ((W_mW_m) ⊙ D)V
  //   E' = ρ_BE_A + Kᵀdiag(e)W_dV + ρ_BKᵀQP_A,   P' = ρ_BP_A + Kᵀdiag(e)V.
  template <class T>
  static void chunk_backward(const Head<T>& h, const Mat<T>& dY, Index c0, Index L, const State<T>& A, State<T>& Xb,
                             HeadGrad<T>& g) {
    const auto [Q, K, V, G] = chunk_rows(h, dY, c0, L);
    const Mat<T> D = decay_mask(h, L), Lm = causal_mask<T>(L), QK = Q * K.transpose();
    const Mat<T> Wm = QK.cwiseProduct(Lm), Wd = QK.cwiseProduct(D);
    const Vec<T> rho = decay_from_carry(h, L), e = decay_to_end(h, L);
    const T rB = chunk_decay(h, L);
    const Mat<T> Grho = rho.asDiagonal() * G, GV = (G * V.transpose()).cwiseProduct(D);
    // outputs
    Mat<T> dQ = Grho * A.E.transpose();
    State<T> dA{Mat<T>::Zero(h.d(), h.dv1()), Q.transpose() * Grho};
    const Mat<T> dM = Wm.transpose() * Grho;  // adjoint of Q P_A
    Mat<T> dWm = Grho * A.P.transpose() * Q.transpose() + GV * Wm.transpose() + Wm.transpose() * GV;
    dQ += dM * A.P.transpose();
    dA.P += Q.transpose() * dM;
    Mat<T> dV = (Wm * Wm).cwiseProduct(D).transpose() * G;
    // carry update
    const Mat<T> eK = e.asDiagonal() * K, KE = K * Xb.E;
    dA.E += rB * Xb.E;
    Mat<T> dK = e.asDiagonal() * Wd * V * Xb.E.transpose() + rB * (Q * A.P * Xb.E.transpose());
    const Mat<T> dWd = eK * Xb.E * V.transpose();
    dV += Wd.transpose() * eK * Xb.E;
    dQ += rB * (KE * A.P.transpose());
    dA.P += rB * (Q.transpose() * KE) + rB * Xb.P;
    dK += e.asDiagonal() * V * Xb.P.transpose();
    dV += eK * Xb.P;
    // the scores
    const Mat<T> dQK = dWm.cwiseProduct(Lm) + dWd.cwiseProduct(D);
    g.dq.middleRows(c0, L) = dQ + dQK * K;
    g.dk.middleRows(c0, L) = dK + dQK.transpose() * Q;
    g.dv.middleRows(c0, L) = dV;
    Xb = std::move(dA);
  }
};

}  // namespace hla
