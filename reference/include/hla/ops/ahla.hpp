// ahla: asymmetric second-order HLA, masked, decay along the chain t → i → j
// (SPEC §2; paper §6, Alg. 2).
//   num_t = Σ_{j≤i≤t} γ^(t-i)·γ^(i-j) a_ti a_ij v_j
// All forms side by side; each returns n × (dv+1) (last column: denominator).
#pragma once

#include "hla/head.hpp"

namespace hla {

// The operator as a type (operators.hpp lists them): its forms are static members.
struct ahla {
  static constexpr Variant variant = Variant::ahla;

  // Ground truth: the literal sum of its terms (below), grouped by j (the
  // i-sum is the weight of v_j).
  template <class T> static Mat<T> naive(const Head<T>& h) { return grouped_literal<ahla>(h); }

  // The literal terms of token t over [lo, t] (head.hpp add_literal): per j, every i.
  template <class T, class Emit> static void terms(const Head<T>& h, const Mat<T>& A, Index t, Index lo, bool, Emit&& emit) {
    for (Index j = lo; j <= t; ++j)
      for (Index i = j; i <= t; ++i) emit(h.weight(t - lo, {j - lo}) * A(t, i) * A(i, j), j);
  }

  // Paper Alg. 2 / Thm 6.1: P = γP + kvᵀ, E = γE + k(qᵀP), num = qᵀE.
  template <class T> static Mat<T> streaming(const Head<T>& h) {
    Mat<T> P = Mat<T>::Zero(h.d(), h.dv1()), E = P, Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      const Vec<T> k = h.k.row(t).transpose();
      P = h.gamma * P + k * h.v.row(t);
      E = h.gamma * E + k * (h.q.row(t) * P);
      Y.row(t) = h.q.row(t) * E;
    }
    return Y;
  }

  // Segment summary (R, P, E, ρ) (SPEC §4), R = Σ k_i q_iᵀ undecayed:
  // R = R_A + R_B, P = ρ_B P_A + P_B, E = ρ_B E_A + E_B + ρ_B R_B P_A.
  template <class T> struct Op {
    const Head<T>& h;
    struct Summary {
      Mat<T> R, P, E;
      T rho;
      bool operator==(const Summary&) const = default;
    };
    Summary identity() const {
      return {Mat<T>::Zero(h.d(), h.d()), Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1()), T(1)};
    }
    Summary token(Index t) const {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      const Mat<T> P = k * h.v.row(t);
      return {k * q.transpose(), P, q.dot(k) * P, h.gamma};
    }
    Summary combine(const Summary& A, const Summary& B) const {
      const T& r = B.rho;
      return {A.R + B.R, r * A.P + B.P, r * A.E + B.E + r * (B.R * A.P), A.rho * B.rho};
    }
    RowVec<T> readout(const Summary& X, Index t) const { return h.q.row(t) * X.E; }
  };

  // Chunked matmul form (SPEC §5), carry (P_A, E_A); for token t of chunk B:
  //   carry  ρ_t q_tᵀE_A
  //   cross  ρ_t q_tᵀR_{B,≤t}P_A = ρ_t ((QKᵀ) ⊙ L) Q P_A     (i = t included)
  //   intra  ((W_m W_m) ⊙ D) V,  W_m = (QKᵀ) ⊙ L
  // The paper's Fig. 2C read with a strict mask (E6) is in paper/ahla_paper.hpp.
  template <class T> struct Carry {
    Mat<T> P, E;
  };
  template <class T> struct ChunkTerms {
    Mat<T> carry, cross, intra;
  };

  template <class T> static ChunkTerms<T> chunk_terms(const Head<T>& h, const Carry<T>& a, Index c0, Index L) {
    const auto Q = h.q.middleRows(c0, L);
    const auto K = h.k.middleRows(c0, L);
    const auto V = h.v.middleRows(c0, L);
    const Mat<T> QK = Q * K.transpose();
    const Mat<T> Wm = QK.cwiseProduct(causal_mask<T>(L));
    const Vec<T> rho = decay_from_carry(h, L);
    return {rho.asDiagonal() * (Q * a.E),
            rho.asDiagonal() * (Wm * Q * a.P),
            (Wm * Wm).cwiseProduct(decay_mask(h, L)) * V};
  }

  // Carry update: P_B = Kᵀdiag(e)V, R_B = KᵀQ, E_B = Kᵀdiag(e)W_dV (W_d = (QKᵀ) ⊙ D),
  // E ← ρ_B E_A + E_B + ρ_B R_B P_A, P ← ρ_B P_A + P_B.
  template <class T> static void advance(const Head<T>& h, Carry<T>& a, Index c0, Index L) {
    const auto Q = h.q.middleRows(c0, L);
    const auto K = h.k.middleRows(c0, L);
    const auto V = h.v.middleRows(c0, L);
    const Vec<T> e = decay_to_end(h, L);
    const T rB = chunk_decay(h, L);
    const Mat<T> Wd = (Q * K.transpose()).cwiseProduct(decay_mask(h, L));
    a.E = rB * a.E + K.transpose() * e.asDiagonal() * Wd * V + rB * (K.transpose() * Q * a.P);
    a.P = rB * a.P + K.transpose() * e.asDiagonal() * V;
  }

  // Runs the chunk loop; `pick(terms, carry, c0, L)` gives the chunk's rows.
  template <class T, class Pick> static Mat<T> chunked_with(const Head<T>& h, Index w, Pick&& pick) {
    Carry<T> a{Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1())};
    Mat<T> Y(h.n(), h.dv1());
    for_each_chunk(h.n(), w, [&](Index c0, Index L) {
      Y.middleRows(c0, L) = pick(chunk_terms(h, a, c0, L), a, c0, L);
      advance(h, a, c0, L);
    });
    return Y;
  }

  template <class T> static Mat<T> chunked(const Head<T>& h, Index w) {
    return chunked_with(h, w, [](const ChunkTerms<T>& r, auto&&...) -> Mat<T> { return r.carry + r.cross + r.intra; });
  }
  // The same with the intra-chunk terms added one by one (pair by pair).
  template <class T> static Mat<T> chunked_pairs(const Head<T>& h, Index w) {
    return add_chunk_pairs<ahla>(h, chunked_with(h, w, [](const ChunkTerms<T>& r, auto&&...) -> Mat<T> { return r.carry + r.cross; }), w);
  }
};

}  // namespace hla
