// la1: first-order linear attention, identity features (SPEC §2 row 1).
//   num_t = Σ_{j≤t} γ^(t-j) (q_t·k_j) v_j
// All forms side by side; each returns n × (dv+1) (last column: denominator).
#pragma once

#include "hla/head.hpp"

namespace hla {

// The operator as a type (operators.hpp lists them): its forms are static members.
struct la1 {
  static constexpr Variant variant = Variant::la1;

  // Ground truth: the literal masked sum (its terms below).
  template <class T> static Mat<T> naive(const Head<T>& h) { return grouped_literal<la1>(h); }

  // P_t = γP_{t-1} + k_t v_tᵀ;  num_t = q_tᵀ P_t.
  template <class T> static Mat<T> streaming(const Head<T>& h) {
    Mat<T> P = Mat<T>::Zero(h.d(), h.dv1()), Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      P = h.gamma * P + h.k.row(t).transpose() * h.v.row(t);
      Y.row(t) = h.q.row(t) * P;
    }
    return Y;
  }

  // Segment summary (P, ρ): P = Σ γ^(T-j) k_j v_jᵀ.  A ⊕ B = (ρ_B P_A + P_B, ρ_Aρ_B).
  template <class T> struct Op {
    const Head<T>& h;
    struct Summary {
      Mat<T> P;
      T rho;
      bool operator==(const Summary&) const = default;
    };
    Summary identity() const { return {Mat<T>::Zero(h.d(), h.dv1()), T(1)}; }
    Summary token(Index t) const { return {h.k.row(t).transpose() * h.v.row(t), h.gamma}; }
    Summary combine(const Summary& A, const Summary& B) const { return {B.rho * A.P + B.P, A.rho * B.rho}; }
    RowVec<T> readout(const Summary& X, Index t) const { return h.q.row(t) * X.P; }
  };

  // The literal terms of token t over [lo, t] (head.hpp add_literal): γ^(t-j) a_tj, j.
  template <class T, class Emit> static void terms(const Head<T>& h, const Mat<T>& A, Index t, Index lo, bool, Emit&& emit) {
    for (Index j = lo; j <= t; ++j) emit(h.weight(t - lo, {j - lo}) * A(t, j), j);
  }

  // Chunked matmul form (SPEC §5): carry term ρ_t q_tᵀP_A + ((QKᵀ) ⊙ D) V;
  // pairs: the intra-chunk terms instead added one by one (chunked_pairs).
  template <class T> static Mat<T> chunked_pairs(const Head<T>& h, Index w) { return add_chunk_pairs<la1>(h, chunked(h, w, true), w); }
  template <class T> static Mat<T> chunked(const Head<T>& h, Index w, bool pairs = false) {
    Mat<T> P = Mat<T>::Zero(h.d(), h.dv1()), Y(h.n(), h.dv1());
    for_each_chunk(h.n(), w, [&](Index c0, Index L) {
      const auto Q = h.q.middleRows(c0, L);
      const auto K = h.k.middleRows(c0, L);
      const auto V = h.v.middleRows(c0, L);
      Y.middleRows(c0, L) = decay_from_carry(h, L).asDiagonal() * (Q * P);
      if (!pairs) Y.middleRows(c0, L) += (Q * K.transpose()).cwiseProduct(decay_mask(h, L)) * V;
      P = chunk_decay(h, L) * P + K.transpose() * decay_to_end(h, L).asDiagonal() * V;
    });
    return Y;
  }
};

}  // namespace hla
