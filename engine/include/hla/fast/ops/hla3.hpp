// hla3 on the fast engine, masked and unmasked: one chunk forward (SPEC §5,
// derived from the §4 operator; the carry of masked hla3 reduced to (S, P, F):
// X, Y and Zq of the carry are never read by a masked readout or by the update
// of F) and its reverse mode (SPEC §9), product by product.
#pragma once

#include "hla/fast/head.hpp"

namespace hla::fast::detail {

struct Hla3 {
  static constexpr Variant variant = Variant::hla3;

  // One token of the streaming recurrence (SPEC §3; fast/streaming.hpp) in
  // the streamer St's precision: the state s updated, the readout into out.
  template <class St, class State>
  static void stream(State& s, const typename St::T* q, const typename St::T* k, const typename St::T* v, typename St::T* out) {
    auto* u = s.u.data();
    auto* w = s.w.data();
    St::rank1(s.Sm, s.g1, k, k);
    St::rank1(s.P, s.g1, k, v);
    if (s.masked) {
      St::vecmat(q, s.Sm, u);
      St::vecmat(q, s.P, w);
      St::rank1(s.F, s.g3, u, w);
      St::vecmat(q, s.F, out);
    } else {
      St::rank1(s.SQ, s.g1, q, q);
      St::vecmat(q, s.Sm, u);
      St::vecmat(u, s.SQ, w);
      St::vecmat(w, s.P, out);
    }
  }
  // Carry (S, P, F) masked, (S, P, SQ = Zq) unmasked.
  template <class S> static Carry<S> initial(const FastHead<S>& h) {
    return {h.carry(0, h.d(), h.d()), h.carry(1, h.d(), h.dv1()), h.carry(2, h.d(), h.masked ? h.dv1() : h.d())};
  }

  // Unmasked hla3's readout intermediates, for forward() and (recomputed) backward_unmasked():
  // a = diag(ρ_1) Q S_A + U, b = diag(ρ_1) a Zq_A + ((a Qᵀ) ⊙ D_1) Q, with aQ = (a Qᵀ) ⊙ D_1, bK = (b Kᵀ) ⊙ D_1.
  template <class S> struct Readout { BMat<S> a, b, aQ, bK; };
  template <class S>
  static Readout<S> readout(const BMat<S>& Q, const BMat<S>& K, const BMat<S>& Sa, const BMat<S>& U, const BMat<S>& Zqa, const BMat<S>& D1,
                            const BMat<S>& rho1) {
    Readout<S> o;
    o.a = Chunks<S>::times_rows(mm(Q, N, Sa, N), rho1);
    add(o.a, U);
    o.b = Chunks<S>::times_rows(mm(o.a, N, Zqa, N), rho1);
    o.aQ = mm(o.a, N, Q, T, false, true);
    had(o.aQ, D1);
    mm_into(o.b, true, o.aQ, N, Q, N, true);
    o.bK = mm(o.b, N, K, T, false, true);
    had(o.bK, D1);
    return o;
  }

  // Within the chunk, W_d = (QKᵀ) ⊙ D_1, U = W_d K (row u: (S_{B,≤u} q_u)ᵀ),
  // Z = W_d V (row u: q_uᵀ P_{B,≤u}). Masked, with G_A = Q S_A Qᵀ, M = Q Uᵀ:
  //   Y = diag(ρ_3) Q F_A + (M ⊙ D_3) Z + diag(ρ_1)((G_A ⊙ D_2) Z + (M ⊙ D_2) Q P_A) + diag(ρ_2)(G_A ⊙ D_1) Q P_A;
  //   F ← r³F_A + F_B + r(S_A X_B + Y_B P_A) + r² S_A Zq_B P_A (r = γ^L) with
  //   Zq_B = Qᵀ diag(e_1) Q, X_B = Qᵀ diag(e_2) Z, Y_B = Uᵀ diag(e_2) Q, F_B = Uᵀ diag(e_3) Z.
  // Unmasked: a = diag(ρ_1) Q S_A + U, b = diag(ρ_1) a Zq_A + ((a Qᵀ) ⊙ D_1) Q,
  //   Y = diag(ρ_1) b P_A + ((b Kᵀ) ⊙ D_1) V;  Zq ← r Zq + Qᵀ diag(e_1) Q.
  // Both: S ← r S + Kᵀ diag(e_1) K, P ← r P + Kᵀ diag(e_1) V.
  template <class S> static void forward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, Carry<S>& X, BMat<S>* Y) {
    BMat<S>&Sa = X[0], &Pa = X[1];
    const Idx L = x.L;
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V;
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> rho1 = c.rho(L, 1);
    BMat<S> Wd = mm(Q, N, K, T, false, true);
    had(Wd, D1);
    const BMat<S> U = mm(Wd, N, K, N, true);
    const BMat<S> Z = h.masked || Y ? mm(Wd, N, V, N, true) : BMat<S>();
    if (h.masked) {
      BMat<S>& Fa = X[2];
      if (Y) {
        const BMat<S> GA = mm(mm(Q, N, Sa, N), N, Q, T, false, true);
        const BMat<S> M = mm(Q, N, U, T, false, true);
        const BMat<S> QPA = mm(Q, N, Pa, N);
        *Y = Chunks<S>::times_rows(mm(Q, N, Fa, N), c.rho(L, 3));
        BMat<S> M3 = M;
        had(M3, c.D(L, 3));
        mm_into(*Y, true, M3, N, Z, N, true);
        BMat<S> G2 = GA, M2 = M;
        had(G2, c.D(L, 2));
        had(M2, c.D(L, 2));
        BMat<S> T1 = mm(G2, N, Z, N, true);
        mm_into(T1, true, M2, N, QPA, N, true);
        scale_rows(T1, rho1);
        add(*Y, T1);
        BMat<S> G1 = GA;
        had(G1, D1);
        add(*Y, Chunks<S>::times_rows(mm(G1, N, QPA, N, true), c.rho(L, 2)));
      }
      const BMat<S> e1 = c.e(L, 1), e2 = c.e(L, 2), r = c.gs(L);
      const BMat<S> ZqB = mm(Q, T, Chunks<S>::times_rows(Q, e1), N);
      const BMat<S> XB = mm(Q, T, Chunks<S>::times_rows(Z, e2), N);
      const BMat<S> YB = mm(U, T, Chunks<S>::times_rows(Q, e2), N);
      const BMat<S> FB = mm(U, T, Chunks<S>::times_rows(Z, c.e(L, 3)), N);
      BMat<S> Xs = mm(Sa, N, XB, N);
      mm_into(Xs, true, YB, N, Pa, N);
      scale(Xs, r);
      BMat<S> SZP = mm(Sa, N, mm(ZqB, N, Pa, N), N);
      scale(SZP, c.gs(2 * L));
      scale(Fa, c.gs(3 * L));
      add(Fa, FB);
      add(Fa, Xs);
      add(Fa, SZP);
    } else {
      BMat<S>& Zqa = X[2];
      if (Y) {
        const Readout<S> o = readout(Q, K, Sa, U, Zqa, D1, rho1);
        *Y = Chunks<S>::times_rows(mm(o.b, N, Pa, N), rho1);
        mm_into(*Y, true, o.bK, N, V, N, true);
      }
      scale(Zqa, c.gs(L));
      mm_into(Zqa, true, Q, T, Chunks<S>::times_rows(Q, c.e(L, 1)), N);
    }
    const BMat<S> e1 = c.e(L, 1), r = c.gs(L);
    scale(Sa, r);
    mm_into(Sa, true, K, T, Chunks<S>::times_rows(K, e1), N);
    scale(Pa, r);
    mm_into(Pa, true, K, T, Chunks<S>::times_rows(V, e1), N);
  }

  // What backward() gathers: the adjoints of Q, K, V, of U = W_d K and (masked)
  // Z = W_d V, and of the carry A before the chunk (Xb2: of its third member).
  template <class S> struct Adjoints { BMat<S> dQ, dK, dU, dV, dZ, Sb, Pb, Xb2; };
  // The chunk's products both of backward()'s branches read.
  template <class S> struct Shared {
    const BMat<S>& D1;
    BMat<S> rho1, e1, r, Wd, U, Qe1, Ke1;
  };

  // The reverse of forward(), term by term (G: the chunk's ∂L/∂Y; Xb: the
  // adjoint of the carry after the chunk in, of the carry A before it out).
  template <class S>
  static void backward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, const Carry<S>& A, const BMat<S>& G, Carry<S>& Xb,
                       ChunkGrad<S>& g) {
    const Idx L = x.L, d = h.d(), dv1 = h.dv1();
    const bool mg = h.magnitudes;
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V;
    Shared<S> s{c.D(L, 1), c.rho(L, 1), c.e(L, 1), c.gs(L), mm(Q, N, K, T, false, true), {}, {}, {}};
    had(s.Wd, s.D1);
    s.U = mm(s.Wd, N, K, N, true);
    Adjoints<S> a{BMat<S>::zero(L, d, mg),   BMat<S>::zero(L, d, mg), BMat<S>::zero(L, d, mg),   BMat<S>::zero(L, dv1, mg),
                  BMat<S>::zero(L, dv1, mg), BMat<S>::zero(d, d, mg), BMat<S>::zero(d, dv1, mg), {}};
    s.Qe1 = Chunks<S>::times_rows(Q, s.e1), s.Ke1 = Chunks<S>::times_rows(K, s.e1);
    if (h.masked) backward_masked(c, x, A, G, Xb, s, a);
    else backward_unmasked(x, A, G, Xb, s, a);
    const BMat<S>&D1 = s.D1, &e1 = s.e1, &r = s.r, &Wd = s.Wd, &Ke1 = s.Ke1;
    BMat<S>&dQ = a.dQ, &dK = a.dK, &dU = a.dU, &dV = a.dV, &dZ = a.dZ, &Sb = a.Sb, &Pb = a.Pb, &Xb2 = a.Xb2;
    // S' = r S_A + Kᵀ diag(e_1) K, P' = r P_A + Kᵀ diag(e_1) V
    BMat<S> t = Xb[0];
    scale(t, r);
    add(Sb, t);
    mm_into(dK, true, Ke1, N, Xb[0], N);
    mm_into(dK, true, Ke1, N, Xb[0], T);
    t = Xb[1];
    scale(t, r);
    add(Pb, t);
    mm_into(dK, true, Chunks<S>::times_rows(V, e1), N, Xb[1], T);
    mm_into(dV, true, Ke1, N, Xb[1], N);
    // U = W_d K (and masked Z = W_d V); W_d = (QKᵀ) ⊙ D_1
    BMat<S> dWd = mm(dU, N, K, T, false, true);
    mm_into(dK, true, Wd, T, dU, N);
    if (h.masked) {
      mm_into(dWd, true, dZ, N, V, T, false, true);
      mm_into(dV, true, Wd, T, dZ, N);
    }
    had(dWd, D1);
    mm_into(dQ, true, dWd, N, K, N, true);
    mm_into(dK, true, dWd, T, Q, N);
    g.dQ = std::move(dQ), g.dK = std::move(dK), g.dV = std::move(dV);
    Xb = {std::move(Sb), std::move(Pb), std::move(Xb2)};
  }

  // backward()'s readout and carry terms of masked hla3.
  template <class S>
  static void backward_masked(Chunks<S>& c, const Chunk<S>& x, const Carry<S>& A, const BMat<S>& G, const Carry<S>& Xb, const Shared<S>& s,
                              Adjoints<S>& a) {
    const Idx L = x.L;
    const BMat<S>&Q = x.Q, &V = x.V, &Sa = A[0], &Pa = A[1], &Fa = A[2], &Fn = Xb[2];
    const BMat<S>&D1 = s.D1, &rho1 = s.rho1, &r = s.r, &Wd = s.Wd, &U = s.U, &Qe1 = s.Qe1;
    BMat<S>&dQ = a.dQ, &dU = a.dU, &dZ = a.dZ, &Sb = a.Sb, &Pb = a.Pb, &Xb2 = a.Xb2;
    const BMat<S> e2 = c.e(L, 2), e3 = c.e(L, 3);
    const BMat<S> Z = mm(Wd, N, V, N, true), QS = mm(Q, N, Sa, N);
    const BMat<S> GA = mm(QS, N, Q, T, false, true), M = mm(Q, N, U, T, false, true), QPA = mm(Q, N, Pa, N);
    const BMat<S> Grho1 = Chunks<S>::times_rows(G, rho1), Grho2 = Chunks<S>::times_rows(G, c.rho(L, 2)),
                  Grho3 = Chunks<S>::times_rows(G, c.rho(L, 3));
    // Y += diag(ρ_3) Q F_A
    mm_into(dQ, true, Grho3, N, Fa, T);
    Xb2 = mm(Q, T, Grho3, N);
    // Y += (M ⊙ D_3) Z
    BMat<S> dM = mm(G, N, Z, T, false, true);
    had(dM, c.D(L, 3));
    BMat<S> M3 = M;
    had(M3, c.D(L, 3));
    mm_into(dZ, true, M3, T, G, N);
    // Y += diag(ρ_1)((G_A ⊙ D_2) Z + (M ⊙ D_2) QPA)
    BMat<S> dGA = mm(Grho1, N, Z, T, false, true);
    had(dGA, c.D(L, 2));
    BMat<S> G2 = GA, M2 = M;
    had(G2, c.D(L, 2));
    had(M2, c.D(L, 2));
    mm_into(dZ, true, G2, T, Grho1, N);
    BMat<S> t = mm(Grho1, N, QPA, T, false, true);
    had(t, c.D(L, 2));
    add(dM, t);
    BMat<S> dQPA = mm(M2, T, Grho1, N);
    // Y += diag(ρ_2)(G_A ⊙ D_1) QPA
    t = mm(Grho2, N, QPA, T, false, true);
    had(t, D1);
    add(dGA, t);
    BMat<S> G1 = GA;
    had(G1, D1);
    mm_into(dQPA, true, G1, T, Grho2, N);
    // F' = r³F_A + F_B + r(S_A X_B + Y_B P_A) + r² S_A (Zq_B P_A)
    t = Fn;
    scale(t, c.gs(3 * L));
    add(Xb2, t);
    add(dU, Chunks<S>::times_rows(mm(Z, N, Fn, T), e3));  // F_B = Uᵀ diag(e_3) Z
    add(dZ, Chunks<S>::times_rows(mm(U, N, Fn, N), e3));
    const BMat<S> ZqB = mm(Q, T, Qe1, N), XB = mm(Q, T, Chunks<S>::times_rows(Z, e2), N), YB = mm(U, T, Chunks<S>::times_rows(Q, e2), N);
    const BMat<S> SF = mm(Sa, T, Fn, N);  // S_Aᵀ F̄'
    BMat<S> dXB = SF, dW = SF;
    scale(dXB, r);
    scale(dW, c.gs(2 * L));
    t = mm(Fn, N, XB, T);
    scale(t, r);
    add(Sb, t);
    BMat<S> dYB = mm(Fn, N, Pa, T);
    scale(dYB, r);
    t = mm(YB, T, Fn, N);
    scale(t, r);
    add(Pb, t);
    t = mm(Fn, N, mm(ZqB, N, Pa, N), T);
    scale(t, c.gs(2 * L));
    add(Sb, t);
    const BMat<S> dZqB = mm(dW, N, Pa, T);
    mm_into(Pb, true, ZqB, T, dW, N);
    // X_B = Qᵀ diag(e_2) Z, Y_B = Uᵀ diag(e_2) Q, Zq_B = Qᵀ diag(e_1) Q
    mm_into(dQ, true, Chunks<S>::times_rows(Z, e2), N, dXB, T);
    add(dZ, Chunks<S>::times_rows(mm(Q, N, dXB, N), e2));
    add(dU, Chunks<S>::times_rows(mm(Q, N, dYB, T), e2));
    add(dQ, Chunks<S>::times_rows(mm(U, N, dYB, N), e2));
    mm_into(dQ, true, Qe1, N, dZqB, N);
    mm_into(dQ, true, Qe1, N, dZqB, T);
    // QPA = Q P_A; M = Q Uᵀ; G_A = QS Qᵀ, QS = Q S_A
    mm_into(dQ, true, dQPA, N, Pa, T);
    mm_into(Pb, true, Q, T, dQPA, N);
    mm_into(dQ, true, dM, N, U, N, true);
    mm_into(dU, true, dM, T, Q, N);
    const BMat<S> dQS = mm(dGA, N, Q, N, true);
    mm_into(dQ, true, dGA, T, QS, N);
    mm_into(dQ, true, dQS, N, Sa, T);
    mm_into(Sb, true, Q, T, dQS, N);
  }

  // backward()'s readout and carry terms of unmasked hla3.
  template <class S>
  static void backward_unmasked(const Chunk<S>& x, const Carry<S>& A, const BMat<S>& G, const Carry<S>& Xb, const Shared<S>& s,
                                Adjoints<S>& adj) {
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V, &Sa = A[0], &Pa = A[1];
    const BMat<S>&D1 = s.D1, &rho1 = s.rho1, &r = s.r, &U = s.U, &Qe1 = s.Qe1;
    BMat<S>&dQ = adj.dQ, &dK = adj.dK, &dU = adj.dU, &dV = adj.dV, &Sb = adj.Sb, &Pb = adj.Pb, &Xb2 = adj.Xb2;
    const BMat<S>& Zqa = A[2];
    const BMat<S>& Zqn = Xb[2];
    const Readout<S> o = readout(Q, K, Sa, U, Zqa, D1, rho1);
    const BMat<S>&a = o.a, &b = o.b, &aQ = o.aQ, &bK = o.bK;
    BMat<S> GV = mm(G, N, V, T, false, true);
    had(GV, D1);
    const BMat<S> Grho1 = Chunks<S>::times_rows(G, rho1);
    // Y = diag(ρ_1) b P_A + ((b Kᵀ) ⊙ D_1) V
    BMat<S> db = mm(Grho1, N, Pa, T);
    mm_into(Pb, true, b, T, Grho1, N);
    mm_into(dV, true, bK, T, G, N);
    mm_into(db, true, GV, N, K, N, true);
    mm_into(dK, true, GV, T, b, N);
    // b = diag(ρ_1) a Zq_A + ((a Qᵀ) ⊙ D_1) Q
    const BMat<S> dbr = Chunks<S>::times_rows(db, rho1);
    BMat<S> da = mm(dbr, N, Zqa, T);
    Xb2 = mm(a, T, dbr, N);
    BMat<S> daQ = mm(db, N, Q, T, false, true);
    had(daQ, D1);
    mm_into(dQ, true, aQ, T, db, N);
    mm_into(da, true, daQ, N, Q, N, true);
    mm_into(dQ, true, daQ, T, a, N);
    // a = diag(ρ_1) Q S_A + U
    const BMat<S> dar = Chunks<S>::times_rows(da, rho1);
    mm_into(dQ, true, dar, N, Sa, T);
    mm_into(Sb, true, Q, T, dar, N);
    add(dU, da);
    // Zq' = r Zq_A + Qᵀ diag(e_1) Q
    BMat<S> t = Zqn;
    scale(t, r);
    add(Xb2, t);
    mm_into(dQ, true, Qe1, N, Zqn, N);
    mm_into(dQ, true, Qe1, N, Zqn, T);
  }
};

}  // namespace hla::fast::detail
