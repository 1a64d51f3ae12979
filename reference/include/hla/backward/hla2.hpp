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
          const T w = h.weight(t, {i, j});
          coef += w * A(t, i) * A(j, i);
          dA(t, i) += w * c(t, j) * A(j, i);
          dA(j, i) += w * c(t, j) * A(t, i);
        }
        coef += h.lambda * h.weight(t, {j}) * B(t, j);
        dB(t, j) += h.lambda * h.weight(t, {j}) * c(t, j);
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

  // Chunked matmul form: the backward of the forward's chunk (ops/hla2.hpp:
  // chunk_terms, advance), product by product (for Z = AB: Ā += Z̄Bᵀ, B̄ += AᵀZ̄;
  // for Z = X ⊙ M, M a constant mask: X̄ = Z̄ ⊙ M). Carry A = (S_A, C_A, F_A),
  // QK = QKᵀ, W_d = QK ⊙ D, W_m = QK ⊙ L, G = dY of the chunk, Gρ = diag(ρ)G:
  //   carry  diag(ρ²)QF_A (unmasked diag(ρ²)QS_AC_A)
  //   cross  diag(ρ)((QS_AQᵀ) ⊙ D)V (unmasked + diag(ρ)W_dKC_A)
  //   intra  ((W_dW_mᵀ) ⊙ D)V (unmasked ((W_dQKᵀ) ⊙ D)V)
  //   ridge  λ(diag(ρ)QC_A + ((QQᵀ) ⊙ D)V)
  //   carry update  C_B = Qᵀdiag(e)V, F' = ρ_B²F_A + ρ_BS_AC_B + (W_dK)ᵀdiag(e²)V (masked),
  //                 S' = ρ_BS_A + Kᵀdiag(e)K, C' = ρ_BC_A + C_B.
  template <class T>
  static void chunk_backward(const Head<T>& h, const Mat<T>& dY, Index c0, Index L, const State<T>& A, State<T>& Xb,
                             HeadGrad<T>& g) {
    const auto [Q, K, V, G] = chunk_rows(h, dY, c0, L);
    const Mat<T> D = decay_mask(h, L), Lm = causal_mask<T>(L), QK = Q * K.transpose(), Wd = QK.cwiseProduct(D);
    const Vec<T> rho = decay_from_carry(h, L), rho2 = decay_from_carry(h, L, 2), e = decay_to_end(h, L);
    const T rB = chunk_decay(h, L);
    const Mat<T> Grho = rho.asDiagonal() * G, GV = (G * V.transpose()).cwiseProduct(D);
    Mat<T> dQ = Mat<T>::Zero(L, h.d()), dK = dQ, dV = Mat<T>::Zero(L, h.dv1()), dQK = Mat<T>::Zero(L, L), dWd = dQK;
    State<T> dA = zero_state(h);
    // carry
    const Mat<T> R2 = rho2.asDiagonal() * G;
    if (h.masked) {
      dQ += R2 * A.F.transpose();
      dA.F += Q.transpose() * R2;
    } else {
      dQ += R2 * A.C.transpose() * A.S.transpose();
      dA.S += Q.transpose() * R2 * A.C.transpose();
      dA.C += A.S.transpose() * Q.transpose() * R2;
    }
    // cross
    const Mat<T> N = (Grho * V.transpose()).cwiseProduct(D);
    dV += (Q * A.S * Q.transpose()).cwiseProduct(D).transpose() * Grho;
    dQ += N * Q * A.S.transpose() + N.transpose() * Q * A.S;
    dA.S += Q.transpose() * N * Q;
    if (!h.masked) {
      dWd += Grho * A.C.transpose() * K.transpose();
      dK += Wd.transpose() * Grho * A.C.transpose();
      dA.C += K.transpose() * Wd.transpose() * Grho;
    }
    // intra
    const Mat<T> Wr = h.masked ? Mat<T>(QK.cwiseProduct(Lm)) : QK;  // the right factor: W_m or QK
    dV += (Wd * Wr.transpose()).cwiseProduct(D).transpose() * G;
    dWd += GV * Wr;
    dQK += h.masked ? Mat<T>((GV.transpose() * Wd).cwiseProduct(Lm)) : Mat<T>(GV.transpose() * Wd);
    // ridge
    dQ += h.lambda * (Grho * A.C.transpose());
    dA.C += h.lambda * (Q.transpose() * Grho);
    dV += h.lambda * ((Q * Q.transpose()).cwiseProduct(D).transpose() * G);
    dQ += h.lambda * ((GV + GV.transpose()) * Q);
    // carry update
    Mat<T> dCB = Xb.C;
    if (h.masked) {
      const Vec<T> e2 = decay_to_end(h, L, 2);
      const Mat<T> U = Wd * K, dU = e2.asDiagonal() * V * Xb.F.transpose();
      dA.F += (rB * rB) * Xb.F;
      dA.S += rB * (Xb.F * (Q.transpose() * e.asDiagonal() * V).transpose());
      dCB += rB * (A.S.transpose() * Xb.F);
      dV += e2.asDiagonal() * U * Xb.F;
      dWd += dU * K.transpose();
      dK += Wd.transpose() * dU;
    }
    dA.S += rB * Xb.S;
    dK += e.asDiagonal() * K * (Xb.S + Xb.S.transpose());
    dA.C += rB * Xb.C;
    dQ += e.asDiagonal() * V * dCB.transpose();
    dV += e.asDiagonal() * Q * dCB;
    // the scores
    dQK += dWd.cwiseProduct(D);
    dQ += dQK * K;
    dK += dQK.transpose() * Q;
    g.dq.middleRows(c0, L) = dQ;
    g.dk.middleRows(c0, L) = dK;
    g.dv.middleRows(c0, L) = dV;
    Xb = std::move(dA);
  }
};

}  // namespace hla
