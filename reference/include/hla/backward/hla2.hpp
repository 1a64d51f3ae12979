// hla2 backward (SPEC §9), masked and unmasked, decay γ, ridge λ, for an
// upstream ∂L/∂Y (rows [dnum | dden]). Derivations: backward.md.
#pragma once

#include "hla/backward/adjoint.hpp"

namespace hla {

struct hla2_backward {
  static constexpr Variant variant = Variant::hla2;

  // Ground truth: each term w·a_ti·a_ji·v_j (and λγ^(t-j)(q_t·q_j)v_j) of the
  // naive sum, differentiated factor by factor; c_tj = ⟨dY_t, v_j⟩.
  template <class T> static HeadGrad<T> naive(const Head<T>& h, const Mat<T>& dY) {
    const Mat<T> A = h.q * h.k.transpose(), B = h.q * h.q.transpose(), c = dY * h.v.transpose();
    Mat<T> dA = Mat<T>::Zero(h.n(), h.n()), dB = dA, dv = Mat<T>::Zero(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t)
      for (Index j = 0; j <= t; ++j) {
        T coef(0);
        for (Index i = 0; i <= (h.masked ? j : t); ++i) {
          const T& w = h.g(2 * t - i - j);
          coef += w * A(t, i) * A(j, i);
          dA(t, i) += w * c(t, j) * A(j, i);
          dA(j, i) += w * c(t, j) * A(t, i);
        }
        coef += h.lambda * h.g(t - j) * B(t, j);
        dB(t, j) += h.lambda * h.g(t - j) * c(t, j);
        dv.row(j) += coef * dY.row(t);
      }
    return through_scores(h, dA, dB, std::move(dv));
  }

  // Reverse recurrence (reverse.hpp) over the corrected-state form (SPEC §3):
  // S_t = γS + kkᵀ, C_t = γC + qvᵀ, F_t = γ²F + (S_tq_t)v_tᵀ, y_t = q_tᵀF_t + λq_tᵀC_t
  // (unmasked: y_t = q_tᵀS_tC_t + λq_tᵀC_t). Adjoint states, g = dY_t:
  //   F̄_t = γ²F̄_{t+1} + q_t g
  //   C̄_t = γC̄_{t+1} + λq_t g                 (unmasked: + S_tᵀq_t g)
  //   S̄_t = γS̄_{t+1} + (F̄_t v_t)q_tᵀ          (unmasked: q_t g C_tᵀ)
  //   dq_t = F_t gᵀ + S_tᵀF̄_t v_t + λC_t gᵀ + C̄_t v_t   (unmasked: S_tC_t gᵀ + λC_t gᵀ + C̄_t v_t)
  //   dk_t = (S̄_t + S̄_tᵀ)k_t,   dv_t = F̄_tᵀS_tq_t + C̄_tᵀq_t   (unmasked: C̄_tᵀq_t)
  template <class T> struct State {
    Mat<T> S, C, F;  // F is not read unmasked
    auto members() { return std::tie(S, C, F); }
    auto members() const { return std::tie(S, C, F); }
  };
  template <class T> static State<T> zero_state(const Head<T>& h) {
    return {Mat<T>::Zero(h.d(), h.d()), Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1())};
  }
  template <class T> static void advance(const Head<T>& h, State<T>& X, Index t) {
    const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
    X.S = h.gamma * X.S + k * k.transpose();
    X.C = h.gamma * X.C + q * h.v.row(t);
    if (h.masked) X.F = h.g(2) * X.F + (X.S * q) * h.v.row(t);
  }
  template <class T> static RowVec<T> readout(const Head<T>& h, const State<T>& X, Index t) {
    const RowVec<T> q = h.q.row(t);
    return (h.masked ? RowVec<T>(q * X.F) : RowVec<T>((q * X.S) * X.C)) + h.lambda * (q * X.C);
  }
  // X: the state after token t. Xb: ∂L/∂X_t from later tokens in, ∂L/∂X_{t-1} out.
  template <class T>
  static void reverse_step(const Head<T>& h, const Mat<T>& dY, const State<T>& X, State<T>& Xb, Index t, HeadGrad<T>& g) {
    const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose(), v = h.v.row(t).transpose();
    const RowVec<T> gt = dY.row(t);
    const Vec<T> Cg = X.C * gt.transpose();
    Xb.C += h.lambda * q * gt;
    Vec<T> dq = h.lambda * Cg;
    if (h.masked) {
      Xb.F += q * gt;
      const Vec<T> Fbv = Xb.F * v;
      Xb.S += Fbv * q.transpose();
      dq += X.F * gt.transpose() + X.S.transpose() * Fbv;
      g.dv.row(t) = (X.S * q).transpose() * Xb.F;
    } else {
      Xb.C += (X.S.transpose() * q) * gt;
      Xb.S += q * Cg.transpose();
      dq += X.S * Cg;
    }
    dq += Xb.C * v;
    g.dq.row(t) = dq.transpose();
    g.dk.row(t) = ((Xb.S + Xb.S.transpose()) * k).transpose();
    g.dv.row(t) += q.transpose() * Xb.C;
    Xb.S *= h.gamma;
    Xb.C *= h.gamma;
    Xb.F *= h.g(2);
  }
};

}  // namespace hla
