// hla3_paper: the paper's third order (§7), γ = 1, exactly as printed.
// Algorithm 3 reads out q_tᵀ(S^K S^Q P − G⁽¹⁾ − G⁽²⁾ − G⁽³⁾), where G⁽¹⁾, G⁽²⁾,
// G⁽³⁾ collect the triples whose maximum index is i, u, j alone. What is left
// is the "tied maximum" sum below (SPEC §2), not the masked product hla3: E4.
// The paper's scan (Eqs. 7.5-7.7) reproduces Algorithm 3 (Thm 7.2 holds).
// Each form returns n × (dv+1) (last column: denominator).
#pragma once

#include "hla/head.hpp"

#include <algorithm>

namespace hla {

// The operator as a type (operators.hpp lists them): its forms are static members.
struct hla3_paper {
  static constexpr Variant variant = Variant::hla3_paper;

  // Ground truth of the variant: num_t = Σ a_ti a_ui a_uj v_j over i, u, j ≤ t
  // whose maximum is attained by at least two of them.
  template <class T> static Mat<T> naive(const Head<T>& h) {
    const Mat<T> A = h.q * h.k.transpose();
    Mat<T> Y = Mat<T>::Zero(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t)
      for (Index j = 0; j <= t; ++j) {
        T c(0);
        for (Index u = 0; u <= t; ++u)
          for (Index i = 0; i <= t; ++i) {
            const Index m = std::max({i, u, j});
            if ((i == m) + (u == m) + (j == m) >= 2) c += A(t, i) * A(u, i) * A(u, j);
          }
        Y.row(t) += c * h.v.row(j);
      }
    return Y;
  }

  // Algorithm 3, line by line (γ as printed; the variant admits only γ = 1).
  // P, G, termA.. carry the ones column: mK, h, and the denominator of line 16.
  template <class T> static Mat<T> streaming(const Head<T>& h) {
    const T& g = h.gamma;
    Mat<T> SK = Mat<T>::Zero(h.d(), h.d()), SQ = SK, P = Mat<T>::Zero(h.d(), h.dv1()), G1 = P, G2 = P, G3 = P;
    Mat<T> Y(h.n(), h.dv1());
    for (Index t = 0; t < h.n(); ++t) {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      const RowVec<T> v = h.v.row(t);
      const Mat<T> SKprev = SK, SQprev = SQ, Pprev = P;                       // line 4
      SK = g * SKprev + k * k.transpose();                                      // line 6
      SQ = g * SQprev + q * q.transpose();
      P = g * Pprev + k * v;                                                    // line 7
      const Vec<T> u1 = SQprev * k;                                             // line 9
      G1 = g * G1 + k * (u1.transpose() * Pprev);
      const Vec<T> a2 = SKprev * q;                                             // line 10
      G2 = g * G2 + a2 * (q.transpose() * Pprev);
      const Vec<T> u3 = SQprev * k, a3 = SKprev * u3;                           // line 11
      G3 = g * G3 + a3 * v;
      const Vec<T> y = SK * q, z = SQ * y;                                      // line 13
      const RowVec<T> termA = z.transpose() * P, termB = q.transpose() * G1, termC = q.transpose() * G2,
                      termD = q.transpose() * G3;
      Y.row(t) = termA - termB - termC - termD;                                 // line 14
    }
    return Y;
  }

  // The segment maps of Eq. (7.6) with the ones column joined:
  //   M[Z] = [M^KQP[Z] | M^KQm[Z]] = Σ_{t∈X} D^K_t Z [D^P_t | d^m_t] = Σ_t k_t (k_tᵀZk_t) [v_t | 1]ᵀ.
  // Contraction form: the segment's tokens, applied as Kᵀ diag(k_tᵀZk_t) V.
  // O(ℓ(d + dv)) entries, O(ℓ(d² + d·dv)) per application (ℓ: segment length).
  template <class T> struct TokenMap {
    Mat<T> K, V;  // ℓ × d, ℓ × (dv+1)
    static TokenMap zero(Index d, Index dv1) { return {Mat<T>(0, d), Mat<T>(0, dv1)}; }
    static TokenMap token(const Vec<T>& k, const RowVec<T>& v) { return {k.transpose(), v}; }
    TokenMap plus(const TokenMap& B) const {
      TokenMap r{Mat<T>(K.rows() + B.K.rows(), K.cols()), Mat<T>(V.rows() + B.V.rows(), V.cols())};
      r.K << K, B.K;
      r.V << V, B.V;
      return r;
    }
    Mat<T> apply(const Mat<T>& Z) const {
      const Vec<T> w = (K * Z).cwiseProduct(K).rowwise().sum();
      return K.transpose() * w.asDiagonal() * V;
    }
    bool operator==(const TokenMap&) const = default;
  };

  // Dense form: the map as a (d·(dv+1)) × d² matrix on vec(Z) (column-major),
  // Σ_t vec(k_t[v_t|1]ᵀ) vec(k_tk_tᵀ)ᵀ. O(d³·dv) entries and work per application.
  template <class T> struct DenseMap {
    Mat<T> M;
    Index d = 0;
    static DenseMap zero(Index d, Index dv1) { return {Mat<T>::Zero(d * dv1, d * d), d}; }
    static DenseMap token(const Vec<T>& k, const RowVec<T>& v) {
      const Mat<T> kv = k * v, kk = k * k.transpose();
      return {Eigen::Map<const Vec<T>>(kv.data(), kv.size()) * Eigen::Map<const Vec<T>>(kk.data(), kk.size()).transpose(),
              k.size()};
    }
    DenseMap plus(const DenseMap& B) const { return {M + B.M, d}; }
    Mat<T> apply(const Mat<T>& Z) const {
      const Vec<T> r = M * Eigen::Map<const Vec<T>>(Z.data(), Z.size());
      return Eigen::Map<const Mat<T>>(r.data(), d, M.rows() / d);
    }
    bool operator==(const DenseMap&) const = default;
  };

  // The paper's segment state X = (S^K, S^Q, P, F, R, U, M) and ⊗3 (Eqs. 7.6-7.7,
  // γ = 1, no ρ), ones columns joined: P = [P^KV | m^K], F = [F | η],
  // R = [R^QP | r^Qm], U = U^KQ, M as above. Token (Alg. 4, line 2):
  // (D^K, D^Q, D^P, D^K D^Q D^P, D^Q D^P, D^K D^Q, M_t). F is the corrected state
  // of Eq. (7.4); the readout is q_tᵀF.
  template <class T, class Map> struct OpWith {
    const Head<T>& h;
    struct Summary {
      Mat<T> SK, SQ, P, F, R, U;
      Map M;
      bool operator==(const Summary&) const = default;
    };
    Summary identity() const {
      const Mat<T> dd = Mat<T>::Zero(h.d(), h.d()), dv = Mat<T>::Zero(h.d(), h.dv1());
      return {dd, dd, dv, dv, dv, dd, Map::zero(h.d(), h.dv1())};
    }
    Summary token(Index t) const {
      const Vec<T> q = h.q.row(t).transpose(), k = h.k.row(t).transpose();
      const Mat<T> DK = k * k.transpose(), DQ = q * q.transpose(), DP = k * h.v.row(t);
      return {DK, DQ, DP, DK * DQ * DP, DQ * DP, DK * DQ, Map::token(k, h.v.row(t))};
    }
    Summary combine(const Summary& A, const Summary& B) const {
      return {A.SK + B.SK, A.SQ + B.SQ, A.P + B.P, A.F + B.F + A.SK * B.R + B.M.apply(A.SQ) + B.U * A.P,
              A.R + B.R,   A.U + B.U,   A.M.plus(B.M)};
    }
    RowVec<T> readout(const Summary& X, Index t) const { return h.q.row(t) * X.F; }
  };

  template <class T> using Op = OpWith<T, TokenMap<T>>;
  template <class T> using OpDense = OpWith<T, DenseMap<T>>;

};

}  // namespace hla
