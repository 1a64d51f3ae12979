// hla3 backward (SPEC §9), masked and unmasked, decay γ, for an upstream
// ∂L/∂Y (rows [dnum | dden]). Derivations: backward.md.
#pragma once

#include "hla/backward/adjoint.hpp"

namespace hla {

struct hla3_backward {
  static constexpr Variant variant = Variant::hla3;

  // Ground truth: each term w·a_ti·a_ui·a_uj·v_j differentiated factor by
  // factor; c_tj = ⟨dY_t, v_j⟩.
  template <class T> static HeadGrad<T> naive(const Head<T>& h, const Mat<T>& dY) {
    const Mat<T> A = h.q * h.k.transpose(), c = dY * h.v.transpose();
    Mat<T> dA = Mat<T>::Zero(h.n(), h.n()), dv = Mat<T>::Zero(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t)
      for (Index j = 0; j <= t; ++j) {
        T coef(0);
        for (Index u = h.masked ? j : 0; u <= t; ++u)
          for (Index i = 0; i <= (h.masked ? u : t); ++i) {
            const T w = h.weight(t, {i, u, j}), wc = w * c(t, j);
            coef += w * A(t, i) * A(u, i) * A(u, j);
            dA(t, i) += wc * A(u, i) * A(u, j);
            dA(u, i) += wc * A(t, i) * A(u, j);
            dA(u, j) += wc * A(t, i) * A(u, i);
          }
        dv.row(j) += coef * dY.row(t);
      }
    return through_scores(h, dA, std::move(dv));
  }

  // Reverse recurrence (reverse.hpp) over SPEC §3's masked form: S_t = γS + kkᵀ,
  // P_t = γP + kvᵀ, F_t = γ³F + a_t b_t (a_t = S_tq_t, b_t = q_tᵀP_t), y_t = q_tᵀF_t.
  // Adjoint states, g = dY_t:
  //   F̄_t = γ³F̄_{t+1} + q_t g,  S̄_t = γS̄_{t+1} + (F̄_t b_tᵀ)q_tᵀ,  P̄_t = γP̄_{t+1} + q_t(a_tᵀF̄_t)
  //   dq_t = F_t gᵀ + S_tᵀF̄_t b_tᵀ + P_tF̄_tᵀa_t
  // Unmasked, y_t = α_t SQ_t P_t with α_t = q_tᵀS_t, β_t = α_t SQ_t (SQ_t = γSQ + qqᵀ):
  //   P̄_t = γP̄_{t+1} + β_tᵀg,  SQ̄_t = γSQ̄_{t+1} + α_tᵀ(P_t gᵀ)ᵀ,  S̄_t = γS̄_{t+1} + q_t(SQ_tP_t gᵀ)ᵀ
  //   dq_t = S_tSQ_tP_t gᵀ + (SQ̄_t + SQ̄_tᵀ)q_t
  // Both: dk_t = (S̄_t + S̄_tᵀ)k_t + P̄_t v_t,  dv_t = P̄_tᵀk_t.
  template <class T> struct State {
    Mat<T> S, P, X;  // X: F masked (d × dv1), SQ unmasked (d × d)
    auto members() { return std::tie(S, P, X); }
    auto members() const { return std::tie(S, P, X); }
  };
  template <class T> static State<T> zero_state(const Head<T>& h) {
    return {Mat<T>::Zero(h.d(), h.d()), Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.masked ? h.dv1() : h.d())};
  }
  template <class T> static void advance(const Head<T>& h, State<T>& X, Index t) {
    const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
    X.S = h.gamma * X.S + k * k.transpose();
    X.P = h.gamma * X.P + k * h.v.row(t);
    if (h.masked)
      X.X = h.g(3) * X.X + (X.S * q) * (q.transpose() * X.P);
    else
      X.X = h.gamma * X.X + q * q.transpose();
  }
  template <class T> static RowVec<T> readout(const Head<T>& h, const State<T>& X, Index t) {
    const RowVec<T> q = h.q.row(t);
    return h.masked ? RowVec<T>(q * X.X) : RowVec<T>(((q * X.S) * X.X) * X.P);
  }
  // X: the state after token t. Xb: ∂L/∂X_t from later tokens in, ∂L/∂X_{t-1} out.
  template <class T>
  static void reverse_step(const Head<T>& h, const Mat<T>& dY, const State<T>& X, State<T>& Xb, Index t, HeadGrad<T>& g) {
    const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
    const RowVec<T> gt = dY.row(t);
    if (h.masked) {
      const Vec<T> a = X.S * q;
      Xb.X += q * gt;
      const Vec<T> Fbb = Xb.X * (q.transpose() * X.P).transpose();  // F̄_t b_tᵀ
      const RowVec<T> aF = a.transpose() * Xb.X;
      Xb.S += Fbb * q.transpose();
      Xb.P += q * aF;
      g.dq.row(t) = (X.X * gt.transpose() + X.S.transpose() * Fbb + X.P * aF.transpose()).transpose();
    } else {
      const RowVec<T> alpha = q.transpose() * X.S, beta = alpha * X.X;
      const Vec<T> Pg = X.P * gt.transpose(), SQPg = X.X * Pg;
      Xb.P += beta.transpose() * gt;
      Xb.X += alpha.transpose() * Pg.transpose();
      Xb.S += q * SQPg.transpose();
      g.dq.row(t) = (X.S * SQPg + (Xb.X + Xb.X.transpose()) * q).transpose();
    }
    g.dk.row(t) = ((Xb.S + Xb.S.transpose()) * k + Xb.P * h.v.row(t).transpose()).transpose();
    g.dv.row(t) = k.transpose() * Xb.P;
    Xb.S *= h.gamma;
    Xb.P *= h.gamma;
    Xb.X *= h.masked ? h.g(3) : h.gamma;
  }
};

}  // namespace hla
