// hla2: second-order HLA, masked (default) and unmasked, with ridge λ (SPEC §2).
//   masked:   num_t = Σ_{i≤j≤t}      γ^((t-i)+(t-j)) a_ti a_ji v_j
//   unmasked: num_t = Σ_{i≤t, j≤t}   (same weight and product)
//   ridge:    + λ Σ_{j≤t} γ^(t-j) (q_t·q_j) v_j
// All forms side by side; each returns n × (dv+1) (last column: denominator).
#pragma once

#include "hla/head.hpp"

namespace hla {

// The operator as a type (operators.hpp lists them): its forms are static members.
struct hla2 {
  static constexpr Variant variant = Variant::hla2;

  // Ground truth: the literal sum of its terms (below), grouped by j so that
  // the i-sum is the weight of v_j.
  template <class T> static Mat<T> naive(const Head<T>& h) { return grouped_literal<hla2>(h); }

  // The literal terms of token t over [lo, t] (head.hpp add_literal), in the
  // order of naive: per j, every i (then the ridge term of j).
  template <class T, class Emit> static void terms(const Head<T>& h, const Mat<T>& A, Index t, Index lo, bool ridge, Emit&& emit) {
    for (Index j = lo; j <= t; ++j) {
      for (Index i = lo; i <= (h.masked ? j : t); ++i) emit(h.weight(t - lo, {i - lo, j - lo}) * A(t, i) * A(j, i), j);
      if (ridge && h.lambda != T(0)) emit(h.lambda * h.weight(t - lo, {j - lo}) * h.q.row(t).dot(h.q.row(j)), j);
    }
  }

  // Corrected-state recurrence (SPEC §3): S_t = γS + kkᵀ, C_t = γC + qvᵀ,
  // F_t = γ²F + (S_t q_t)v_tᵀ, num = q_tᵀF_t (+ λq_tᵀC_t). Unmasked: q_tᵀS_tC_t.
  template <class T> static Mat<T> streaming(const Head<T>& h) {
    Mat<T> S = Mat<T>::Zero(h.d(), h.d()), C = Mat<T>::Zero(h.d(), h.dv1()), F = C, Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      S = h.gamma * S + k * k.transpose();
      C = h.gamma * C + q * h.v.row(t);
      if (h.masked) {
        F = h.g(2) * F + (S * q) * h.v.row(t);
        Y.row(t) = q.transpose() * F;
      } else {
        Y.row(t) = (q.transpose() * S) * C;
      }
      Y.row(t) += h.lambda * (q.transpose() * C);
    }
    return Y;
  }

  // Paper state (S, C, m, G, h) with the decay corrected (SPEC §3, E1):
  // G_t = γ²G_{t-1} + γ k_t(k_tᵀC_{t-1}); u = q_tᵀS_t + λq_tᵀ; num = uC_t − q_tᵀG_t.
  template <class T> static Mat<T> streaming_paper_state(const Head<T>& h) {
    Mat<T> S = Mat<T>::Zero(h.d(), h.d()), C = Mat<T>::Zero(h.d(), h.dv1()), G = C, Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      if (h.masked) G = h.g(2) * G + h.gamma * k * (k.transpose() * C);  // C is still C_{t-1}
      S = h.gamma * S + k * k.transpose();
      C = h.gamma * C + q * h.v.row(t);
      const RowVec<T> u = q.transpose() * S + h.lambda * q.transpose();
      Y.row(t) = u * C;
      if (h.masked) Y.row(t) -= q.transpose() * G;
    }
    return Y;
  }

  // Segment summary (S, C, G, ρ) (SPEC §4; m and h are the ones-column of C, G):
  // S = ρ_B S_A + S_B, C = ρ_B C_A + C_B, G = ρ_B² G_A + G_B + ρ_B S_B C_A.
  // Unmasked: G stays zero and is not read.
  template <class T> struct Op {
    const Head<T>& h;
    struct Summary {
      Mat<T> S, C, G;
      T rho;
      bool operator==(const Summary&) const = default;
    };
    Summary identity() const {
      return {Mat<T>::Zero(h.d(), h.d()), Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1()), T(1)};
    }
    Summary token(Index t) const {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      return {k * k.transpose(), q * h.v.row(t), Mat<T>::Zero(h.d(), h.dv1()), h.gamma};
    }
    Summary combine(const Summary& A, const Summary& B) const {
      const T& r = B.rho;
      Summary X{r * A.S + B.S, r * A.C + B.C, Mat<T>(), A.rho * B.rho};
      X.G = h.masked ? Mat<T>((r * r) * A.G + B.G + r * (B.S * A.C)) : A.G;
      return X;
    }
    RowVec<T> readout(const Summary& X, Index t) const {
      const RowVec<T> u = h.q.row(t) * X.S + h.lambda * h.q.row(t);
      RowVec<T> y = u * X.C;
      if (h.masked) y -= h.q.row(t) * X.G;
      return y;
    }
  };

  // Chunked matmul form (SPEC §5). The carry is (S_A, C_A, F_A = S_AC_A − G_A).
  // For token t of chunk B (local index, ρ_t = γ^(t+1) from the carry's end):
  //   carry  ρ_t² q_tᵀF_A                  (unmasked: ρ_t² q_tᵀS_AC_A)
  //   cross  ρ_t (q_tᵀS_A) C_{B,≤t} = ρ_t ((Q S_A Qᵀ) ⊙ D) V
  //          (unmasked also ρ_t q_tᵀS_{B,≤t}C_A = ρ_t (W_d K) C_A)
  //   intra  ((W_d W_mᵀ) ⊙ D) V,  W_d = (QKᵀ) ⊙ D, W_m = (QKᵀ) ⊙ L
  //          (unmasked: ((W_d (QKᵀ)ᵀ) ⊙ D) V: i ranges over the whole chunk ≤ t)
  //   ridge  λ(ρ_t q_tᵀC_A + ((QQᵀ) ⊙ D) V)
  // The paper's Fig. 1C form (E5) is carry + intra only (paper/hla2_paper.hpp).
  template <class T> struct Carry {
    Mat<T> S, C, F;
  };
  template <class T> struct ChunkTerms {
    Mat<T> carry, cross, intra, ridge;
  };

  template <class T> static ChunkTerms<T> chunk_terms(const Head<T>& h, const Carry<T>& a, Index c0, Index L) {
    const auto Q = h.q.middleRows(c0, L);
    const auto K = h.k.middleRows(c0, L);
    const auto V = h.v.middleRows(c0, L);
    const Mat<T> D = decay_mask(h, L);
    const Vec<T> rho = decay_from_carry(h, L), rho2 = decay_from_carry(h, L, 2);
    const Mat<T> QK = Q * K.transpose();
    const Mat<T> Wd = QK.cwiseProduct(D);
    ChunkTerms<T> r;
    r.cross = rho.asDiagonal() * ((Q * a.S * Q.transpose()).cwiseProduct(D) * V);
    if (h.masked) {
      r.carry = rho2.asDiagonal() * (Q * a.F);
      r.intra = (Wd * QK.cwiseProduct(causal_mask<T>(L)).transpose()).cwiseProduct(D) * V;
    } else {
      r.carry = rho2.asDiagonal() * (Q * a.S * a.C);
      r.cross += rho.asDiagonal() * (Wd * K * a.C);
      r.intra = (Wd * QK.transpose()).cwiseProduct(D) * V;
    }
    r.ridge = h.lambda * (rho.asDiagonal() * (Q * a.C) + (Q * Q.transpose()).cwiseProduct(D) * V);
    return r;
  }

  // Carry update over chunk B (length L, ρ_B = γ^L, e_i = γ^(L-1-i)):
  // S_B = Kᵀdiag(e)K, C_B = Qᵀdiag(e)V, F_B = Kᵀ W_dᵀ diag(e²) V,
  // F ← ρ_B² F + ρ_B S_A C_B + F_B (F = SC − G and the §4 operator).
  template <class T> static void advance(const Head<T>& h, Carry<T>& a, Index c0, Index L) {
    const auto Q = h.q.middleRows(c0, L);
    const auto K = h.k.middleRows(c0, L);
    const auto V = h.v.middleRows(c0, L);
    const Vec<T> e = decay_to_end(h, L);
    const T rB = chunk_decay(h, L);
    const Mat<T> CB = Q.transpose() * e.asDiagonal() * V;
    if (h.masked) {
      const Mat<T> Wd = (Q * K.transpose()).cwiseProduct(decay_mask(h, L));
      a.F = (rB * rB) * a.F + rB * (a.S * CB) + K.transpose() * Wd.transpose() * decay_to_end(h, L, 2).asDiagonal() * V;
    }
    a.S = rB * a.S + K.transpose() * e.asDiagonal() * K;
    a.C = rB * a.C + CB;
  }

  // Runs the chunk loop; `pick(terms)` gives the chunk's rows (here: their sum).
  template <class T, class Pick> static Mat<T> chunked_with(const Head<T>& h, Index w, Pick&& pick) {
    Carry<T> a{Mat<T>::Zero(h.d(), h.d()), Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1())};
    Mat<T> Y(h.n(), h.dv1());
    for_each_chunk(h.n(), w, [&](Index c0, Index L) {
      Y.middleRows(c0, L) = pick(chunk_terms(h, a, c0, L));
      advance(h, a, c0, L);
    });
    return Y;
  }

  template <class T> static Mat<T> chunked(const Head<T>& h, Index w) {
    return chunked_with(h, w, [](const ChunkTerms<T>& r) -> Mat<T> { return r.carry + r.cross + r.intra + r.ridge; });
  }
  // The same with the intra-chunk terms added one by one (pair by pair).
  template <class T> static Mat<T> chunked_pairs(const Head<T>& h, Index w) {
    return add_chunk_pairs<hla2>(h, chunked_with(h, w, [](const ChunkTerms<T>& r) -> Mat<T> { return r.carry + r.cross + r.ridge; }), w);
  }
};

}  // namespace hla
