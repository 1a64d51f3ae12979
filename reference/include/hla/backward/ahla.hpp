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
        const T& w = h.g(t - j);
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
};

}  // namespace hla
