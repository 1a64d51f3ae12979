// The fast engine: every operator's chunked matmul form (SPEC §5; hla3's
// derived from its §4 operator), written once over the scalar S — DD
// (double-double, ≥ 104 bits: the certified reference), double (verification
// and upward magnitudes) and Rational (the proof: the properties demand that it
// equals the naive definition exactly). Each product is a GEMM-shaped call of
// kernels.hpp; each quantity carries its magnitude and running error bound
// (matrix.hpp), so the output rows come with a bound phi·unit·M + alpha.
//
// It is the same algebra as reference/include/hla/ops/*.hpp (whose chunked
// forms the properties prove equal to naive), reassociated where a product of
// three matrices is cheaper the other way round, and with the carry of masked
// hla3 reduced to (S, P, F): X, Y and Zq of the carry are never read by a
// masked readout or by the update of F.
#pragma once

#include "hla/fast/matrix.hpp"
#include "hla/problem.hpp"
#include "hla/state.hpp"
#include "hla/variants.hpp"

#include <map>
#include <utility>

namespace hla::fast {

// Whether the engine has a form for this variant (else the caller uses binary128).
inline bool supports(Variant v) {
  return v == Variant::la1 || v == Variant::hla2 || v == Variant::ahla || v == Variant::hla3;
}

// Powers γ^e, e = 0..E, with their bound (every entry ≤ 1 and ≥ 0, so A = 1
// and the magnitude is the value).
template <class S> struct Powers {
  std::vector<S> g;
  double phi = 0, alpha = 0;
};

// One head as the engine reads it: q already scaled, v with a column of ones
// (its output column is the denominator), the options the forms need.
template <class S> struct FastHead {
  Variant variant = Variant::hla2;
  bool masked = true;
  BMat<S> q, k, v;  // n × d, n × d, n × (dv + 1)
  Powers<S> pow;    // up to order·(w + 1)
  BMat<S> lambda;   // 1 × 1 (hla2 ridge; zero: no ridge terms)
  bool ridge = false;
  bool magnitudes = true;  // compute mag (else only the bounds: see BMat::has_mag)
  Idx w = 64;       // chunk width
  // The carry before token 0 (an initial state, hla/state.hpp: members in the
  // variant's State order, which is the order of the carries below); empty: zero.
  std::vector<BMat<S>> carry0;
  Idx n() const { return q.rows(); }
  BMat<S> carry(size_t i, Idx rows, Idx cols) const {
    return i < carry0.size() ? carry0[i] : BMat<S>::zero(rows, cols, magnitudes);
  }
};

// m(i, j) = x in any engine scalar.
template <class S> void put_entry(Dense<S>& m, Idx i, Idx j, const S& x) {
  if constexpr (std::is_same_v<S, DD>) m.set(i, j, x);
  else m.at(i, j) = x;
}

// Outputs n × (dv + 1) with, per row, the bound |val − exact| ≤ phi·unit·M + alpha.
template <class S> struct HeadResult {
  Dense<S> val, mag;
  std::vector<double> phi, alpha;
  bool finite = true;
  bool tiny = false;  // alpha applies (matrix.hpp); else the bound is phi·unit·M alone
  bool has_mag = true;
};

namespace detail {

template <class S> class Chunks {
 public:
  explicit Chunks(const FastHead<S>& h) : h_(h) {}

  // D_p(t, j) = γ^(p(t − j)) for j ≤ t, else 0 (L × L).
  const BMat<S>& D(Idx L, int p) {
    auto key = std::make_pair(L, p);
    auto it = masks_.find(key);
    if (it != masks_.end()) return it->second;
    Dense<S> m = Dense<S>::zero(L, L);
    for (Idx t = 0; t < L; ++t)
      for (Idx j = 0; j <= t; ++j) put(m, t, j, g(p * (t - j)));
    return masks_.emplace(key, powers_matrix(std::move(m))).first->second;
  }
  // γ^(p(t + 1)), t = 0..L-1: decay from the carry's end to token t (L × 1).
  BMat<S> rho(Idx L, int p) {
    Dense<S> m = Dense<S>::zero(L, 1);
    for (Idx t = 0; t < L; ++t) put(m, t, 0, g(p * (t + 1)));
    return powers_matrix(std::move(m));
  }
  // γ^(p(L − 1 − i)), i = 0..L-1: decay from token i to the chunk's end (L × 1).
  BMat<S> e(Idx L, int p) {
    Dense<S> m = Dense<S>::zero(L, 1);
    for (Idx i = 0; i < L; ++i) put(m, i, 0, g(p * (L - 1 - i)));
    return powers_matrix(std::move(m));
  }
  // γ^x as a 1 × 1 matrix.
  BMat<S> gs(Idx x) {
    Dense<S> m = Dense<S>::zero(1, 1);
    put(m, 0, 0, g(x));
    return powers_matrix(std::move(m));
  }
  // Rows r0 .. r0+L-1 of X times the column vector c (a copy).
  static BMat<S> times_rows(const BMat<S>& X, const BMat<S>& c) {
    BMat<S> Y = X;
    ops::scale_rows(Y, c);
    return Y;
  }

 private:
  const S& g(Idx e) const {
    if (e < 0 || static_cast<size_t>(e) >= h_.pow.g.size()) throw std::logic_error("fast engine: power of gamma beyond its table");
    return h_.pow.g[static_cast<size_t>(e)];
  }
  static void put(Dense<S>& m, Idx i, Idx j, const S& x) { put_entry(m, i, j, x); }
  BMat<S> powers_matrix(Dense<S> m) const {
    BMat<S> b;
    b.has_mag = h_.magnitudes && Arith<S>::track;
    if (b.has_mag) b.mag = m;
    b.val = std::move(m);
    b.phi = h_.pow.phi, b.alpha = h_.pow.alpha;
    b.refresh();
    return b;
  }
  const FastHead<S>& h_;
  std::map<std::pair<Idx, int>, BMat<S>> masks_;
};

template <class S> struct Out {
  HeadResult<S>& r;
  void put(Idx c0, const BMat<S>& Y) {
    for (Idx t = 0; t < Y.rows(); ++t) {
      r.phi[static_cast<size_t>(c0 + t)] = Y.phi;
      r.alpha[static_cast<size_t>(c0 + t)] = Y.alpha;
      for (Idx j = 0; j < Y.cols(); ++j) {
        if constexpr (std::is_same_v<S, DD>) {
          if (!std::isfinite(Y.val.at(t, j).hi)) r.finite = false;
          r.val.set(c0 + t, j, Y.val.at(t, j));
          if (r.has_mag) r.mag.set(c0 + t, j, Y.mag.at(t, j));
        } else {
          if constexpr (std::is_same_v<S, double>)
            if (!std::isfinite(Y.val.at(t, j))) r.finite = false;
          r.val.at(c0 + t, j) = Y.val.at(t, j);
          if (r.has_mag) r.mag.at(c0 + t, j) = Y.mag.at(t, j);
        }
      }
    }
    r.finite = r.finite && Y.finite;
    r.tiny = r.tiny || Y.tiny;
  }
};

using ops::add;
using ops::had;
using ops::mm;
using ops::mm_into;
using ops::rows;
using ops::scale;
using ops::scale_rows;
using ops::zero_upper;
constexpr bool N = false, T = true;

// la1: num_t = ρ_t q_tᵀP_A + ((QKᵀ) ⊙ D_1) V;  P ← γ^L P + Kᵀ diag(e_1) V.
template <class S> void la1(const FastHead<S>& h, Chunks<S>& c, Out<S>& out) {
  BMat<S> P = h.carry(0, h.k.cols(), h.v.cols());
  for (Idx c0 = 0; c0 < h.n(); c0 += h.w) {
    const Idx L = std::min(h.w, h.n() - c0);
    const BMat<S> Q = rows(h.q, c0, L), K = rows(h.k, c0, L), V = rows(h.v, c0, L);
    BMat<S> Y = mm(Q, N, P, N);
    scale_rows(Y, c.rho(L, 1));
    BMat<S> QK = mm(Q, N, K, T, false, true);
    had(QK, c.D(L, 1));
    mm_into(Y, true, QK, N, V, N, true);
    out.put(c0, Y);
    scale(P, c.gs(L));
    mm_into(P, true, K, T, Chunks<S>::times_rows(V, c.e(L, 1)), N);
  }
}

// hla2 (SPEC §5), carry (S, C, F = SC − G); see ops/hla2.hpp for the terms.
template <class S> void hla2(const FastHead<S>& h, Chunks<S>& c, Out<S>& out) {
  const Idx d = h.q.cols(), dv1 = h.v.cols();
  BMat<S> Sa = h.carry(0, d, d), Ca = h.carry(1, d, dv1), Fa = h.carry(2, d, dv1);
  for (Idx c0 = 0; c0 < h.n(); c0 += h.w) {
    const Idx L = std::min(h.w, h.n() - c0);
    const BMat<S> Q = rows(h.q, c0, L), K = rows(h.k, c0, L), V = rows(h.v, c0, L);
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> rho1 = c.rho(L, 1), rho2 = c.rho(L, 2);
    const BMat<S> QK = mm(Q, N, K, T, false, h.masked);
    BMat<S> Wd = QK;
    had(Wd, D1);
    // cross: ρ_t ((Q S_A Qᵀ) ⊙ D_1) V
    const BMat<S> QS = mm(Q, N, Sa, N);
    BMat<S> G = mm(QS, N, Q, T, false, true);
    had(G, D1);
    BMat<S> Y = mm(G, N, V, N, true);
    scale_rows(Y, rho1);
    if (h.masked) {
      // carry ρ_t² q_tᵀF_A; intra ((W_d W_mᵀ) ⊙ D_1) V
      add(Y, Chunks<S>::times_rows(mm(Q, N, Fa, N), rho2));
      BMat<S> QKm = QK;
      zero_upper(QKm);
      BMat<S> I = mm(Wd, N, QKm, T, true, true);
      had(I, D1);
      mm_into(Y, true, I, N, V, N, true);
    } else {
      // carry ρ_t² q_tᵀS_A C_A; cross also ρ_t (W_d K) C_A; intra ((W_d (QKᵀ)ᵀ) ⊙ D_1) V
      add(Y, Chunks<S>::times_rows(mm(QS, N, Ca, N), rho2));
      add(Y, Chunks<S>::times_rows(mm(mm(Wd, N, K, N, true), N, Ca, N), rho1));
      BMat<S> I = mm(Wd, N, QK, T, true, true);
      had(I, D1);
      mm_into(Y, true, I, N, V, N, true);
    }
    if (h.ridge) {
      // λ(ρ_t q_tᵀC_A + ((QQᵀ) ⊙ D_1) V)
      BMat<S> R = Chunks<S>::times_rows(mm(Q, N, Ca, N), rho1);
      BMat<S> QQ = mm(Q, N, Q, T, false, true);
      had(QQ, D1);
      mm_into(R, true, QQ, N, V, N, true);
      scale(R, h.lambda);
      add(Y, R);
    }
    out.put(c0, Y);
    // advance: C_B = Qᵀ diag(e_1) V; F ← γ^(2L) F + γ^L S_A C_B + Kᵀ W_dᵀ diag(e_2) V;
    // S ← γ^L S + Kᵀ diag(e_1) K; C ← γ^L C + C_B (read only unmasked or with ridge).
    const BMat<S> e1 = c.e(L, 1);
    const BMat<S> Ve1 = Chunks<S>::times_rows(V, e1);
    const bool needs_C = !h.masked || h.ridge;
    // Without an initial state S_A is symmetric (a sum of k kᵀ), so S_A C_B =
    // (Q S_A)ᵀ diag(e_1) V, from the cross term's QS: d·L·(dv+1) multiply-adds
    // instead of d·d·(dv+1). A given S_A need not be symmetric.
    const bool S_symmetric = h.carry0.empty();
    const BMat<S> CB = needs_C || !S_symmetric ? mm(Q, T, Ve1, N) : BMat<S>();
    if (h.masked) {
      scale(Fa, c.gs(2 * L));
      BMat<S> SC = S_symmetric ? mm(QS, T, Ve1, N) : mm(Sa, N, CB, N);
      scale(SC, c.gs(L));
      add(Fa, SC);
      mm_into(Fa, true, K, T, mm(Wd, T, Chunks<S>::times_rows(V, c.e(L, 2)), N), N);
    }
    scale(Sa, c.gs(L));
    mm_into(Sa, true, K, T, Chunks<S>::times_rows(K, e1), N);
    if (needs_C) {
      scale(Ca, c.gs(L));
      add(Ca, CB);
    }
  }
}

// ahla (SPEC §5), carry (P, E): ρ_t q_tᵀE_A + ρ_t W_m Q P_A + ((W_m W_m) ⊙ D_1) V;
// E ← γ^L E + Kᵀ (diag(e_1) W_d V + γ^L Q P_A), P ← γ^L P + Kᵀ diag(e_1) V.
template <class S> void ahla(const FastHead<S>& h, Chunks<S>& c, Out<S>& out) {
  const Idx d = h.q.cols(), dv1 = h.v.cols();
  BMat<S> Pa = h.carry(0, d, dv1), Ea = h.carry(1, d, dv1);
  for (Idx c0 = 0; c0 < h.n(); c0 += h.w) {
    const Idx L = std::min(h.w, h.n() - c0);
    const BMat<S> Q = rows(h.q, c0, L), K = rows(h.k, c0, L), V = rows(h.v, c0, L);
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> QK = mm(Q, N, K, T, false, true);
    BMat<S> Wm = QK;
    zero_upper(Wm);
    const BMat<S> QPA = mm(Q, N, Pa, N);
    BMat<S> Y = mm(Q, N, Ea, N);
    mm_into(Y, true, Wm, N, QPA, N, true);
    scale_rows(Y, c.rho(L, 1));
    BMat<S> WW = mm(Wm, N, Wm, N, true, true);
    had(WW, D1);
    mm_into(Y, true, WW, N, V, N, true);
    out.put(c0, Y);
    const BMat<S> e1 = c.e(L, 1), rB = c.gs(L);
    BMat<S> Wd = QK;
    had(Wd, D1);
    // Kᵀ diag(e_1) W_d V + γ^L Kᵀ(Q P_A) as one product: Kᵀ (diag(e_1) W_d V + γ^L Q P_A).
    BMat<S> U = Chunks<S>::times_rows(mm(Wd, N, V, N, true), e1), QPAd = QPA;
    scale(QPAd, rB);
    add(U, QPAd);
    scale(Ea, rB);
    mm_into(Ea, true, K, T, U, N);
    scale(Pa, rB);
    mm_into(Pa, true, K, T, Chunks<S>::times_rows(V, e1), N);
  }
}

// hla3 (ops/hla3.hpp chunked, from the §4 operator). Masked carry (S, P, F),
// unmasked (S, P, Zq).
template <class S> void hla3(const FastHead<S>& h, Chunks<S>& c, Out<S>& out) {
  const Idx d = h.q.cols(), dv1 = h.v.cols();
  // The third member of the state is F (masked) or SQ = Zq (unmasked).
  BMat<S> Sa = h.carry(0, d, d), Pa = h.carry(1, d, dv1), Fa = h.masked ? h.carry(2, d, dv1) : BMat<S>::zero(d, dv1, h.magnitudes),
          Zqa = h.masked ? BMat<S>::zero(d, d, h.magnitudes) : h.carry(2, d, d);
  for (Idx c0 = 0; c0 < h.n(); c0 += h.w) {
    const Idx L = std::min(h.w, h.n() - c0);
    const BMat<S> Q = rows(h.q, c0, L), K = rows(h.k, c0, L), V = rows(h.v, c0, L);
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> rho1 = c.rho(L, 1);
    BMat<S> Wd = mm(Q, N, K, T, false, true);
    had(Wd, D1);
    const BMat<S> U = mm(Wd, N, K, N, true);  // row u: (S_{B,≤u} q_u)ᵀ
    const BMat<S> Z = mm(Wd, N, V, N, true);  // row u: q_uᵀ P_{B,≤u}
    if (h.masked) {
      const BMat<S> GA = mm(mm(Q, N, Sa, N), N, Q, T, false, true);
      const BMat<S> M = mm(Q, N, U, T, false, true);
      const BMat<S> QPA = mm(Q, N, Pa, N);
      BMat<S> Y = Chunks<S>::times_rows(mm(Q, N, Fa, N), c.rho(L, 3));
      BMat<S> M3 = M;
      had(M3, c.D(L, 3));
      mm_into(Y, true, M3, N, Z, N, true);
      BMat<S> G2 = GA, M2 = M;
      had(G2, c.D(L, 2));
      had(M2, c.D(L, 2));
      BMat<S> T1 = mm(G2, N, Z, N, true);
      mm_into(T1, true, M2, N, QPA, N, true);
      scale_rows(T1, rho1);
      add(Y, T1);
      BMat<S> G1 = GA;
      had(G1, D1);
      add(Y, Chunks<S>::times_rows(mm(G1, N, QPA, N, true), c.rho(L, 2)));
      out.put(c0, Y);
    } else {
      BMat<S> a = Chunks<S>::times_rows(mm(Q, N, Sa, N), rho1);
      add(a, U);
      BMat<S> b = Chunks<S>::times_rows(mm(a, N, Zqa, N), rho1);
      BMat<S> aQ = mm(a, N, Q, T, false, true);
      had(aQ, D1);
      mm_into(b, true, aQ, N, Q, N, true);
      BMat<S> Y = Chunks<S>::times_rows(mm(b, N, Pa, N), rho1);
      BMat<S> bK = mm(b, N, K, T, false, true);
      had(bK, D1);
      mm_into(Y, true, bK, N, V, N, true);
      out.put(c0, Y);
    }
    // The carry ⊕ B (r = γ^L), B's summary in matmul form.
    const BMat<S> e1 = c.e(L, 1), r = c.gs(L);
    if (h.masked) {
      const BMat<S> e2 = c.e(L, 2);
      const BMat<S> ZqB = mm(Q, T, Chunks<S>::times_rows(Q, e1), N);
      const BMat<S> XB = mm(Q, T, Chunks<S>::times_rows(Z, e2), N);
      const BMat<S> YB = mm(U, T, Chunks<S>::times_rows(Q, e2), N);
      const BMat<S> FB = mm(U, T, Chunks<S>::times_rows(Z, c.e(L, 3)), N);
      // F = r³F_A + F_B + r(S_A X_B + Y_B P_A) + r² S_A (Zq_B P_A)
      BMat<S> X = mm(Sa, N, XB, N);
      mm_into(X, true, YB, N, Pa, N);
      scale(X, r);
      BMat<S> SZP = mm(Sa, N, mm(ZqB, N, Pa, N), N);
      scale(SZP, c.gs(2 * L));
      scale(Fa, c.gs(3 * L));
      add(Fa, FB);
      add(Fa, X);
      add(Fa, SZP);
    } else {
      scale(Zqa, r);
      mm_into(Zqa, true, Q, T, Chunks<S>::times_rows(Q, e1), N);
    }
    scale(Sa, r);
    mm_into(Sa, true, K, T, Chunks<S>::times_rows(K, e1), N);
    scale(Pa, r);
    mm_into(Pa, true, K, T, Chunks<S>::times_rows(V, e1), N);
  }
}

}  // namespace detail

// Emulated precisions: a rational rounded once to Emu<K>, and γ^0..E by
// repeated products rounded in it (as Head::gpow does in any scalar).
template <class S> S emu_from_rational(const Rational& x) {
  if constexpr (std::is_same_v<S, Emu<0>>) return S(from_rational<float>(x));
  else if constexpr (std::is_same_v<S, Emu<1>>) return S(static_cast<float>(from_rational<bf16>(x)));
  else return S(static_cast<float>(from_rational<f16>(x)));
}
template <class S> std::vector<S> emu_powers(const Rational& gamma, Idx E) {
  constexpr int K = std::is_same_v<S, Emu<0>> ? 0 : std::is_same_v<S, Emu<1>> ? 1 : 2;
  std::vector<S> g(static_cast<size_t>(E + 1), S(1.0f));
  Dense<S> a = Dense<S>::zero(1, 1), b = Dense<S>::zero(1, 1);
  b.at(0, 0) = emu_from_rational<S>(gamma);
  a.at(0, 0) = 1.0f;
  for (Idx e = 1; e <= E; ++e) {
    detail::mul(a, b);  // the kernel's rounded product
    g[static_cast<size_t>(e)] = S(a.at(0, 0));
  }
  (void)K;
  return g;
}

// Builds the engine's head from exact inputs: q_at(t, c), k_at(t, c),
// v_at(t, c) give S values (exact: doubles, or rationals for S = Rational).
// q is multiplied by `scale`, and γ, λ, scale are rounded from their exact
// values (S = DD: binary128 then split, relative error ≤ 2^-113 + 2^-106;
// γ^e by e binary128 products: ≤ (e + 1)·2^-113·1.0001 more).
template <class S, class QAt, class KAt, class VAt>
FastHead<S> make_fast_head(const Options& o, Idx n, Idx d, Idx dv, QAt&& q_at, KAt&& k_at, VAt&& v_at, Idx w,
                           bool magnitudes = true) {
  FastHead<S> h;
  h.magnitudes = magnitudes;
  h.variant = o.variant;
  h.masked = o.masked;
  h.w = std::max<Idx>(1, std::min(w, n));
  Dense<S> q = Dense<S>::zero(n, d), k = Dense<S>::zero(n, d), v = Dense<S>::zero(n, dv + 1);
  auto put = put_entry<S>;
  for (Idx t = 0; t < n; ++t) {
    for (Idx c = 0; c < d; ++c) put(q, t, c, q_at(t, c)), put(k, t, c, k_at(t, c));
    for (Idx c = 0; c < dv; ++c) put(v, t, c, v_at(t, c));
    put(v, t, dv, S{1});
  }
  h.q = exact_input(std::move(q), magnitudes);
  h.k = exact_input(std::move(k), magnitudes);
  h.v = exact_input(std::move(v), magnitudes);
  // A rational option as a 1 × 1 matrix with its rounding bound.
  auto option = [magnitudes](const Rational& x) {
    Dense<S> m = Dense<S>::zero(1, 1);
    BMat<S> b;
    if constexpr (std::is_same_v<S, Rational>) {
      m.at(0, 0) = x;
      b = exact_input(std::move(m), magnitudes);
    } else if constexpr (std::is_same_v<S, DD>) {
      m.set(0, 0, dd_from_f113(from_rational<f113>(x)));
      b = exact_input(std::move(m), magnitudes);
      b.phi = 2, b.alpha = 0x1p-1073;
    } else if constexpr (std::is_same_v<S, double>) {
      m.at(0, 0) = from_rational<double>(x);
      b = exact_input(std::move(m), magnitudes);
      b.phi = 1, b.alpha = 0x1p-1074;
    } else {
      (void)magnitudes;  // emulated precision: one rounding, no bound
      m.at(0, 0) = emu_from_rational<S>(x);
      b = exact_input(std::move(m));
    }
    b.refresh();
    return b;
  };
  if (o.scale != 1) ops::scale(h.q, option(o.scale));
  h.ridge = o.lambda != 0;
  h.lambda = option(o.lambda);
  const Idx E = order_of(o.variant) * (h.w + 1);
  if constexpr (std::is_same_v<S, Rational>) {
    h.pow.g.assign(static_cast<size_t>(E + 1), Rational(1));
    for (Idx e = 1; e <= E; ++e) h.pow.g[static_cast<size_t>(e)] = h.pow.g[static_cast<size_t>(e - 1)] * o.gamma;
  } else if constexpr (!Arith<S>::track) {
    // As the reference's Head: γ rounded once, its powers by repeated rounded products.
    h.pow.g = emu_powers<S>(o.gamma, E);
  } else {
    const f113 g = from_rational<f113>(o.gamma);
    f113 x = 1;
    for (Idx e = 0; e <= E; ++e) {
      if constexpr (std::is_same_v<S, DD>) h.pow.g.push_back(dd_from_f113(x));
      else h.pow.g.push_back(static_cast<double>(x));
      x *= g;
    }
    const double rel113 = static_cast<double>(E + 1) * 0x1p-113 * 1.0001;  // binary128 products (and γ's rounding)
    h.pow.phi = std::is_same_v<S, DD> ? 1.01 + rel113 / 0x1p-106 : 1.01 + rel113 / 0x1p-53;
    h.pow.alpha = 0x1p-1073;
  }
  return h;
}

// Sets the head's initial carry from a state in layout order (hla/state.hpp);
// at(i, r, c) gives member i's entry (r, c) as an exact S.
template <class S, class At> void set_initial_carry(FastHead<S>& h, const std::vector<StatePart>& layout, At&& at) {
  h.carry0.clear();
  for (size_t i = 0; i < layout.size(); ++i) {
    Dense<S> m = Dense<S>::zero(layout[i].rows, layout[i].width());
    for (Idx r = 0; r < layout[i].rows; ++r)
      for (Idx c = 0; c < layout[i].width(); ++c) put_entry(m, r, c, at(i, r, c));
    h.carry0.push_back(exact_input(std::move(m), h.magnitudes));
  }
}

// The head's outputs by the chunked form, with magnitudes and bounds.
template <class S> HeadResult<S> evaluate_head(const FastHead<S>& h) {
  if (!supports(h.variant)) throw std::logic_error("fast engine: no chunked form for this variant");
  HeadResult<S> r;
  r.val = Dense<S>::zero(h.n(), h.v.cols());
  r.has_mag = Arith<S>::track && h.magnitudes;
  if (r.has_mag) r.mag = Dense<S>::zero(h.n(), h.v.cols());
  r.phi.assign(static_cast<size_t>(h.n()), 0);
  r.alpha.assign(static_cast<size_t>(h.n()), 0);
  r.finite = h.q.finite && h.k.finite && h.v.finite;
  detail::Chunks<S> c(h);
  detail::Out<S> out{r};
  switch (h.variant) {
    case Variant::la1: detail::la1(h, c, out); break;
    case Variant::hla2: detail::hla2(h, c, out); break;
    case Variant::ahla: detail::ahla(h, c, out); break;
    case Variant::hla3: detail::hla3(h, c, out); break;
    default: throw std::logic_error("fast engine: no chunked form for this variant");
  }
  return r;
}

}  // namespace hla::fast
