// hla2 on the fast engine, masked and unmasked, with ridge: one chunk forward
// (SPEC §5) and its reverse mode (SPEC §9; the reference's chunk_backward in
// reference/include/hla/backward/hla2.hpp, product by product: for Z = AB,
// Ā += Z̄Bᵀ, B̄ += AᵀZ̄; for Z = X ⊙ M with a constant mask, X̄ = Z̄ ⊙ M).
#pragma once

#include "hla/fast/head.hpp"

namespace hla::fast::detail {

struct Hla2 {
  static constexpr Variant variant = Variant::hla2;

  // One token of the streaming recurrence (SPEC §3; fast/streaming.hpp) in
  // the streamer St's precision: the state s updated, the readout into out.
  template <class St, class State>
  static void stream(State& s, const typename St::T* q, const typename St::T* k, const typename St::T* v, typename St::T* out) {
    auto* u = s.u.data();
    auto* w = s.w.data();
    auto* y = s.y.data();
    if (s.paper_state) {
      // G = γ²G + γk(kᵀC_{t−1}) (C before its update), then S, C; num = (qᵀS + λqᵀ)C − qᵀG.
      if (s.masked) {
        St::vecmat(k, s.C, w);
        for (Idx i = 0; i < s.d; ++i) u[i] = St::mul(s.g1, k[i]);
        St::rank1(s.F, s.g2, u, w);  // F holds G here
      }
      St::rank1(s.Sm, s.g1, k, k);
      St::rank1(s.C, s.g1, q, v);
      St::vecmat(q, s.Sm, u);
      if (s.ridge)
        for (Idx i = 0; i < s.d; ++i) u[i] = St::add(u[i], St::mul(s.lambda, q[i]));
      St::vecmat(u, s.C, out);
      if (s.masked) {
        St::vecmat(q, s.F, y);
        for (Idx c = 0; c < s.dv1; ++c) out[c] = St::add(out[c], -y[c]);
      }
      return;
    }
    St::rank1(s.Sm, s.g1, k, k);
    St::rank1(s.C, s.g1, q, v);
    St::vecmat(q, s.Sm, u);  // qᵀS = (Sq)ᵀ: S is symmetric, exactly (its updates are)
    if (s.masked) {
      St::rank1(s.F, s.g2, u, v);
      St::vecmat(q, s.F, out);
    } else {
      St::vecmat(u, s.C, out);
    }
    if (s.ridge) {
      St::vecmat(q, s.C, y);
      for (Idx c = 0; c < s.dv1; ++c) out[c] = St::add(out[c], St::mul(s.lambda, y[c]));
    }
  }
  // Carry (S, C, F = SC − G).
  template <class S> static Carry<S> initial(const FastHead<S>& h) {
    return {h.carry(0, h.d(), h.d()), h.carry(1, h.d(), h.dv1()), h.carry(2, h.d(), h.dv1())};
  }

  // Y = ρ_t ((Q S_A Qᵀ) ⊙ D_1) V + masked: ρ_t² Q F_A + ((W_d W_mᵀ) ⊙ D_1) V;
  // unmasked: ρ_t² Q S_A C_A + ρ_t (W_d K) C_A + ((W_d QKᵀ) ⊙ D_1) V; ridge:
  // λ(ρ_t Q C_A + ((QQᵀ) ⊙ D_1) V). Then C_B = Qᵀ diag(e_1) V,
  // F ← γ^(2L) F + γ^L S_A C_B + Kᵀ W_dᵀ diag(e_2) V, S ← γ^L S + Kᵀ diag(e_1) K,
  // C ← γ^L C + C_B (C is read only unmasked or with ridge).
  template <class S> static void forward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, Carry<S>& X, BMat<S>* Y) {
    BMat<S>&Sa = X[0], &Ca = X[1], &Fa = X[2];
    const Idx L = x.L;
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V;
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> QK = mm(Q, N, K, T, false, h.masked);
    BMat<S> Wd = QK;
    had(Wd, D1);
    const BMat<S> QS = mm(Q, N, Sa, N);
    if (Y) {
      const BMat<S> rho1 = c.rho(L, 1), rho2 = c.rho(L, 2);
      BMat<S> G = mm(QS, N, Q, T, false, true);
      had(G, D1);
      *Y = mm(G, N, V, N, true);
      scale_rows(*Y, rho1);
      if (h.masked) {
        add(*Y, Chunks<S>::times_rows(mm(Q, N, Fa, N), rho2));
        BMat<S> QKm = QK;
        zero_upper(QKm);
        BMat<S> I = mm(Wd, N, QKm, T, true, true);
        had(I, D1);
        mm_into(*Y, true, I, N, V, N, true);
      } else {
        add(*Y, Chunks<S>::times_rows(mm(QS, N, Ca, N), rho2));
        add(*Y, Chunks<S>::times_rows(mm(mm(Wd, N, K, N, true), N, Ca, N), rho1));
        BMat<S> I = mm(Wd, N, QK, T, true, true);
        had(I, D1);
        mm_into(*Y, true, I, N, V, N, true);
      }
      if (h.ridge) {
        BMat<S> R = Chunks<S>::times_rows(mm(Q, N, Ca, N), rho1);
        BMat<S> QQ = mm(Q, N, Q, T, false, true);
        had(QQ, D1);
        mm_into(R, true, QQ, N, V, N, true);
        scale(R, h.lambda);
        add(*Y, R);
      }
    }
    const BMat<S> e1 = c.e(L, 1);
    const BMat<S> Ve1 = Chunks<S>::times_rows(V, e1);
    const bool needs_C = !h.masked || h.ridge || h.full_carry;
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

  // What backward() gathers: the adjoints of Q, K, V, of QS = Q S_A, of
  // W_d = QKᵀ ⊙ D_1 and of QK itself (masked by L or not), and of the carry A.
  template <class S> struct Adjoints { BMat<S> dQ, dK, dV, dQS, dWd, dQK, Sb, Cb, Fb; };

  // The reverse of forward(), term by term (G: the chunk's ∂L/∂Y; Xb: the
  // adjoint of the carry after the chunk in, of the carry A before it out).
  template <class S>
  static void backward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, const Carry<S>& A, const BMat<S>& G, Carry<S>& Xb,
                       ChunkGrad<S>& g) {
    const Idx L = x.L, d = h.d(), dv1 = h.dv1();
    const bool mg = h.magnitudes;
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V, &Sa = A[0], &Ca = A[1], &Fa = A[2];
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> rho1 = c.rho(L, 1);
    const BMat<S> Grho1 = Chunks<S>::times_rows(G, rho1), Grho2 = Chunks<S>::times_rows(G, c.rho(L, 2));
    const BMat<S> QK = mm(Q, N, K, T, false, h.masked);
    BMat<S> Wd = QK;
    had(Wd, D1);
    const BMat<S> QS = mm(Q, N, Sa, N);
    BMat<S> GV = mm(G, N, V, T, false, true);  // adjoint of the masked score products: (G Vᵀ) ⊙ D_1
    had(GV, D1);
    Adjoints<S> a{BMat<S>::zero(L, d, mg), BMat<S>::zero(L, d, mg),   BMat<S>::zero(L, dv1, mg),
                  BMat<S>::zero(L, d, mg), BMat<S>::zero(L, L, mg),   BMat<S>::zero(L, L, mg),
                  BMat<S>::zero(d, d, mg), BMat<S>::zero(d, dv1, mg), BMat<S>::zero(d, dv1, mg)};
    BMat<S>&dQ = a.dQ, &dK = a.dK, &dV = a.dV, &dQS = a.dQS, &dWd = a.dWd, &dQK = a.dQK, &Cb = a.Cb, &Fb = a.Fb;
    // cross: Z = (QS Qᵀ) ⊙ D_1, Y += diag(ρ_1) Z V
    BMat<S> Z = mm(QS, N, Q, T, false, true);
    had(Z, D1);
    mm_into(dV, true, Z, T, Grho1, N);
    const BMat<S> Zb = Chunks<S>::times_rows(GV, rho1);
    mm_into(dQS, true, Zb, N, Q, N, true);
    mm_into(dQ, true, Zb, T, QS, N);
    if (h.masked) {
      // carry: Y += diag(ρ_2) Q F_A
      mm_into(dQ, true, Grho2, N, Fa, T);
      mm_into(Fb, true, Q, T, Grho2, N);
      // intra: Y += ((W_d W_mᵀ) ⊙ D_1) V
      BMat<S> Wm = QK;
      zero_upper(Wm);
      BMat<S> I = mm(Wd, N, Wm, T, true, true);
      had(I, D1);
      mm_into(dV, true, I, T, G, N);
      mm_into(dWd, true, GV, N, Wm, N, true, true);
      mm_into(dQK, true, GV, T, Wd, N);
      zero_upper(dQK);
    } else {
      // carry: Y += diag(ρ_2) QS C_A
      mm_into(dQS, true, Grho2, N, Ca, T);
      mm_into(Cb, true, QS, T, Grho2, N);
      // cross: Y += diag(ρ_1) (W_d K) C_A
      const BMat<S> WdK = mm(Wd, N, K, N, true), dWdK = mm(Grho1, N, Ca, T);
      mm_into(Cb, true, WdK, T, Grho1, N);
      mm_into(dWd, true, dWdK, N, K, T, false, true);
      mm_into(dK, true, Wd, T, dWdK, N);
      // intra: Y += ((W_d QKᵀ) ⊙ D_1) V
      BMat<S> I = mm(Wd, N, QK, T, true, true);
      had(I, D1);
      mm_into(dV, true, I, T, G, N);
      mm_into(dWd, true, GV, N, QK, N, true, true);
      mm_into(dQK, true, GV, T, Wd, N);
    }
    if (h.ridge) {
      // Y += λ(diag(ρ_1) Q C_A + ((QQᵀ) ⊙ D_1) V)
      BMat<S> Rq = mm(Grho1, N, Ca, T);
      mm_into(Rq, true, GV, N, Q, N, true);
      mm_into(Rq, true, GV, T, Q, N);
      scale(Rq, h.lambda);
      add(dQ, Rq);
      BMat<S> QQ = mm(Q, N, Q, T, false, true);
      had(QQ, D1);
      BMat<S> Rv = mm(QQ, T, G, N), Rc = mm(Q, T, Grho1, N);
      scale(Rv, h.lambda);
      add(dV, Rv);
      scale(Rc, h.lambda);
      add(Cb, Rc);
    }
    backward_carry(h, c, x, Sa, Wd, Xb, a);
    g.dQ = std::move(dQ), g.dK = std::move(dK), g.dV = std::move(dV);
    Xb = {std::move(a.Sb), std::move(Cb), std::move(Fb)};
  }

  // backward()'s carry update, from the adjoints Xb of (S', C', F'), and the
  // products of Q it shares with the readout (QS = Q S_A, the scores QKᵀ).
  template <class S>
  static void backward_carry(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, const BMat<S>& Sa, const BMat<S>& Wd,
                             const Carry<S>& Xb, Adjoints<S>& a) {
    const Idx L = x.L, d = h.d(), dv1 = h.dv1();
    const bool mg = h.magnitudes;
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V;
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> e1 = c.e(L, 1), rB = c.gs(L);
    BMat<S>&dQ = a.dQ, &dK = a.dK, &dV = a.dV, &dQS = a.dQS, &dWd = a.dWd, &dQK = a.dQK, &Sb = a.Sb, &Cb = a.Cb, &Fb = a.Fb;
    // The carry update, from the adjoints Xb of (S', C', F').
    const bool needs_C = !h.masked || h.ridge || h.full_carry;
    const BMat<S> Ve1 = Chunks<S>::times_rows(V, e1);
    BMat<S> dCB = needs_C ? Xb[1] : BMat<S>::zero(d, dv1, mg);  // C' = γ^L C_A + C_B
    if (h.masked) {
      // F' = γ^(2L) F_A + γ^L S_A C_B + Kᵀ W_dᵀ diag(e_2) V
      const BMat<S>& Fn = Xb[2];
      BMat<S> t = Fn;
      scale(t, c.gs(2 * L));
      add(Fb, t);
      BMat<S> SC = mm(Fn, N, mm(Q, T, Ve1, N), T);
      scale(SC, rB);
      add(Sb, SC);
      BMat<S> SF = mm(Sa, T, Fn, N);
      scale(SF, rB);
      add(dCB, SF);
      const BMat<S> e2 = c.e(L, 2);
      const BMat<S> dU = mm(Chunks<S>::times_rows(V, e2), N, Fn, T);  // adjoint of U = W_d K
      mm_into(dWd, true, dU, N, K, T, false, true);
      mm_into(dK, true, Wd, T, dU, N);
      add(dV, Chunks<S>::times_rows(mm(mm(Wd, N, K, N, true), N, Fn, N), e2));
    }
    // C_B = Qᵀ diag(e_1) V
    mm_into(dQ, true, Ve1, N, dCB, T);
    add(dV, Chunks<S>::times_rows(mm(Q, N, dCB, N), e1));
    // S' = γ^L S_A + Kᵀ diag(e_1) K: K̄ += diag(e_1) K (S̄' + S̄'ᵀ)
    const BMat<S> Ke1 = Chunks<S>::times_rows(K, e1);
    mm_into(dK, true, Ke1, N, Xb[0], N);
    mm_into(dK, true, Ke1, N, Xb[0], T);
    BMat<S> t = Xb[0];
    scale(t, rB);
    add(Sb, t);
    if (needs_C) {
      t = Xb[1];
      scale(t, rB);
      add(Cb, t);
    }
    // QS = Q S_A
    mm_into(dQ, true, dQS, N, Sa, T);
    mm_into(Sb, true, Q, T, dQS, N);
    // the scores: QK collects the adjoints of W_d = QK ⊙ D_1 and of QK itself
    had(dWd, D1);
    add(dQK, dWd);
    mm_into(dQ, true, dQK, N, K, N, h.masked);
    mm_into(dK, true, dQK, T, Q, N);
  }
};

}  // namespace hla::fast::detail
