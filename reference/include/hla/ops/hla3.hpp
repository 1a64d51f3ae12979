// hla3: third-order HLA, masked (default) and unmasked (SPEC §2).
//   masked:   num_t = Σ_{i≤u, j≤u, u≤t}  γ^((t-i)+(t-u)+(t-j)) a_ti a_ui a_uj v_j
//   unmasked: num_t = Σ_{i,u,j≤t}        (same weight and product)
// With γ = 1 the masked sum is (((W Wᵀ) ⊙ L) W) V: the u ≤ t mask makes it causal.
// All forms side by side; each returns n × (dv+1) (last column: denominator).
// The paper's Algorithm 3 computes another sum (E4): paper/hla3_paper.hpp.
#pragma once

#include "hla/head.hpp"

namespace hla {

// The operator as a type (operators.hpp lists them): its forms are static members.
struct hla3 {
  static constexpr Variant variant = Variant::hla3;

  // Ground truth: the literal triple sum of its terms (below) for each token,
  // grouped by j so that the (u, i)-sum is the weight of v_j.
  template <class T> static Mat<T> naive(const Head<T>& h) { return grouped_literal<hla3>(h); }

  // The literal terms of token t over [lo, t] (head.hpp add_literal): per j, every (u, i).
  template <class T, class Emit> static void terms(const Head<T>& h, const Mat<T>& A, Index t, Index lo, bool, Emit&& emit) {
    for (Index j = lo; j <= t; ++j)
      for (Index u = h.masked ? j : lo; u <= t; ++u)
        for (Index i = lo; i <= (h.masked ? u : t); ++i) emit(h.weight(t - lo, {i - lo, u - lo, j - lo}) * A(t, i) * A(u, i) * A(u, j), j);
  }

  // SPEC §3: S_t = γS + kkᵀ, P_t = γP + kvᵀ (ones column: mK),
  // F_t = γ³F + (S_tq_t)(q_tᵀP_t) (ones column: η), num = q_tᵀF_t.
  // Unmasked: SQ_t = γSQ + qqᵀ, num = q_tᵀS_tSQ_tP_t.
  template <class T> static Mat<T> streaming(const Head<T>& h) {
    Mat<T> S = Mat<T>::Zero(h.d(), h.d()), SQ = S, P = Mat<T>::Zero(h.d(), h.dv1()), F = P, Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      S = h.gamma * S + k * k.transpose();
      P = h.gamma * P + k * h.v.row(t);
      if (h.masked) {
        F = h.g(3) * F + (S * q) * (q.transpose() * P);
        Y.row(t) = q.transpose() * F;
      } else {
        SQ = h.gamma * SQ + q * q.transpose();
        Y.row(t) = ((q.transpose() * S) * SQ) * P;
      }
    }
    return Y;
  }

  // State difference (the masked operator as the unmasked product minus a
  // correction, as hla2's paper state; not the paper's Algorithm 3, E4):
  //   F_t = S_tSQ_tP_t − G_t,  G_t = γ³G + γ k(kᵀSQ_{t−1}P_t) + γ²(S_{t−1}SQ_{t−1}k)v_tᵀ,
  // G collecting the triples (i, u, j) of the product with u < max(i, j): at
  // token t those with i = t or j = t and u < t (SQ_{t−1}, S_{t−1}: before the
  // update); num = q_tᵀ(S_tSQ_tP_t − G_t). Unmasked: G stays zero.
  template <class T> static Mat<T> streaming_paper_state(const Head<T>& h) {
    Mat<T> S = Mat<T>::Zero(h.d(), h.d()), SQ = S, P = Mat<T>::Zero(h.d(), h.dv1()), G = P, Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      const Vec<T> a = SQ * k;  // SQ_{t−1}k
      const Vec<T> c = S * a;   // S_{t−1}SQ_{t−1}k
      S = h.gamma * S + k * k.transpose();
      SQ = h.gamma * SQ + q * q.transpose();
      P = h.gamma * P + k * h.v.row(t);
      if (h.masked) G = h.g(3) * G + h.gamma * k * (a.transpose() * P) + h.g(2) * c * h.v.row(t);
      Y.row(t) = ((q.transpose() * S) * SQ) * P;
      if (h.masked) Y.row(t) -= q.transpose() * G;
    }
    return Y;
  }

  // Compact segment summary (S, P, Zq, X, Y, F, ρ) of SPEC §4; mK, x, η are the
  // ones columns of P, X, F. Inside a segment ending at T, S_{≤u} and P_{≤u}
  // the segment's own decayed moments at u:
  //   Zq = Σ_u γ^(T-u) q_uq_uᵀ,               X = Σ_u γ^(2(T-u)) q_uq_uᵀP_{≤u},
  //   Y  = Σ_u γ^(2(T-u)) S_{≤u}q_uq_uᵀ,      F = Σ_u γ^(3(T-u)) S_{≤u}q_uq_uᵀP_{≤u}.
  // For u in B, S_{≤u} and P_{≤u} of A ⊕ B are γ^(u-T_A)·(S_A, P_A) plus B's own;
  // expanding F's product gives the three cross terms of combine (r = ρ_B):
  //   F = r³F_A + F_B + r·S_A X_B + r·Y_B P_A + r²·S_A Zq_B P_A.
  // Unmasked problems use the same summary and read out q_tᵀ S Zq P: S, Zq, P of
  // an inclusive summary are the decayed prefix moments S_t, SQ_t, P_t.
  template <class T> struct Op {
    const Head<T>& h;
    struct Summary {
      Mat<T> S, P, Zq, X, Y, F;
      T rho;
      bool operator==(const Summary&) const = default;
    };
    Summary identity() const {
      const Mat<T> dd = Mat<T>::Zero(h.d(), h.d()), dv = Mat<T>::Zero(h.d(), h.dv1());
      return {dd, dv, dd, dv, dd, dv, T(1)};
    }
    Summary token(Index t) const {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      const T qk = q.dot(k);
      const Mat<T> P = k * h.v.row(t);
      return {k * k.transpose(), P, q * q.transpose(), qk * (q * h.v.row(t)), qk * (k * q.transpose()), (qk * qk) * P,
              h.gamma};
    }
    Summary combine(const Summary& A, const Summary& B) const {
      const T& r = B.rho;
      const T r2 = r * r;
      const Mat<T> SZ = A.S * B.Zq;
      return {r * A.S + B.S,
              r * A.P + B.P,
              r * A.Zq + B.Zq,
              r2 * A.X + B.X + r * (B.Zq * A.P),
              r2 * A.Y + B.Y + r * SZ,
              (r2 * r) * A.F + B.F + r * (A.S * B.X) + r * (B.Y * A.P) + r2 * (SZ * A.P),
              A.rho * B.rho};
    }
    RowVec<T> readout(const Summary& X, Index t) const {
      if (h.masked) return h.q.row(t) * X.F;
      return ((h.q.row(t) * X.S) * X.Zq) * X.P;
    }
  };

  // Chunked matmul form, derived from the operator. Token t (local index) of
  // chunk B with carry A (all tokens before B) has the inclusive state A ⊕ B_{≤t}
  // with r = ρ_t = γ^(t+1). In matrices over the chunk, W_d = (QKᵀ) ⊙ D_1 and
  // D_p(t, u) = γ^(p(t-u)) for u ≤ t:
  //   U = W_d K  (row u: (S_{B,≤u} q_u)ᵀ),   Z = W_d V  (row u: q_uᵀP_{B,≤u}),
  //   G_A = Q S_A Qᵀ,  M = Q Uᵀ  (M(t, u) = q_tᵀS_{B,≤u}q_u).
  // Masked, q_tᵀ times the operator's F of A ⊕ B_{≤t}, term by term:
  //   carry   ρ_t³ q_tᵀF_A                       (u in A, hence i, j in A)
  //   intra   (M ⊙ D_3) Z                        (i, u, j in B: the naive masked sum over B)
  //   cross   ρ_t (G_A ⊙ D_2) Z                  (q_tᵀ S_A X_{B,≤t}:        i in A)
  //         + ρ_t (M ⊙ D_2) Q P_A                (q_tᵀ Y_{B,≤t} P_A:        j in A)
  //         + ρ_t² (G_A ⊙ D_1) Q P_A             (q_tᵀ S_A Zq_{B,≤t} P_A:   i, j in A)
  // Unmasked, from the readout q_tᵀS_tSQ_tP_t with S_t = ρ_tS_A + S_{B,≤t} etc.:
  //   a = diag(ρ) Q S_A + U,  b = diag(ρ) a Zq_A + ((a Qᵀ) ⊙ D_1) Q,
  //   num = diag(ρ) b P_A + ((b Kᵀ) ⊙ D_1) V.
  // The carry advances by the operator itself: carry ⊕ B, with B's summary in
  // matmul form (e_p(u) = γ^(p(L-1-u))): S_B = Kᵀdiag(e_1)K, P_B = Kᵀdiag(e_1)V,
  // Zq_B = Qᵀdiag(e_1)Q, X_B = Qᵀdiag(e_2)Z, Y_B = Uᵀdiag(e_2)Q, F_B = Uᵀdiag(e_3)Z.
  // pairs (masked): the intra term instead added one by one (chunked_pairs); unmasked,
  // where the intra-chunk sums are factors of the readout's products, it is the matmul form.
  template <class T> static Mat<T> chunked_pairs(const Head<T>& h, Index w) {
    return h.masked ? add_chunk_pairs<hla3>(h, chunked(h, w, true), w) : chunked(h, w);
  }
  template <class T> static Mat<T> chunked(const Head<T>& h, Index w, bool pairs = false) {
    const Op<T> op{h};
    auto carry = op.identity();
    Mat<T> Out(h.n(), h.dv1());
    for_each_chunk(h.n(), w, [&](Index c0, Index L) {
      const auto Q = h.q.middleRows(c0, L);
      const auto K = h.k.middleRows(c0, L);
      const auto V = h.v.middleRows(c0, L);
      const Mat<T> D1 = decay_mask(h, L), Wd = (Q * K.transpose()).cwiseProduct(D1);
      const Mat<T> U = Wd * K, Z = Wd * V;
      const Vec<T> rho = decay_from_carry(h, L);
      const auto& A = carry;
      if (h.masked) {
        const Mat<T> GA = Q * A.S * Q.transpose(), M = Q * U.transpose(), QPA = Q * A.P;
        const Mat<T> D2 = decay_mask(h, L, 2);
        const Mat<T> intra = pairs ? Mat<T>::Zero(L, h.dv1()) : Mat<T>(M.cwiseProduct(decay_mask(h, L, 3)) * Z);
        Out.middleRows(c0, L) = decay_from_carry(h, L, 3).asDiagonal() * (Q * A.F) + intra +
                                rho.asDiagonal() * (GA.cwiseProduct(D2) * Z + M.cwiseProduct(D2) * QPA) +
                                decay_from_carry(h, L, 2).asDiagonal() * (GA.cwiseProduct(D1) * QPA);
      } else {
        const Mat<T> a = rho.asDiagonal() * (Q * A.S) + U;
        const Mat<T> b = rho.asDiagonal() * (a * A.Zq) + (a * Q.transpose()).cwiseProduct(D1) * Q;
        Out.middleRows(c0, L) = rho.asDiagonal() * (b * A.P) + (b * K.transpose()).cwiseProduct(D1) * V;
      }
      const Vec<T> e1 = decay_to_end(h, L), e2 = decay_to_end(h, L, 2);
      const typename Op<T>::Summary B{K.transpose() * e1.asDiagonal() * K,
                                      K.transpose() * e1.asDiagonal() * V,
                                      Q.transpose() * e1.asDiagonal() * Q,
                                      Q.transpose() * e2.asDiagonal() * Z,
                                      U.transpose() * e2.asDiagonal() * Q,
                                      U.transpose() * decay_to_end(h, L, 3).asDiagonal() * Z,
                                      chunk_decay(h, L)};
      carry = op.combine(carry, B);
    });
    return Out;
  }
};

}  // namespace hla
