// ahla on the fast engine: one chunk forward (SPEC §5) and its reverse mode
// (SPEC §9; reference/include/hla/backward/ahla.hpp chunk_backward).
#pragma once

#include "hla/fast/head.hpp"

namespace hla::fast::detail {

struct Ahla {
  static constexpr Variant variant = Variant::ahla;

  // One token of the streaming recurrence (SPEC §3; fast/streaming.hpp) in
  // the streamer St's precision: the state s updated, the readout into out.
  template <class St, class State>
  static void stream(State& s, const typename St::T* q, const typename St::T* k, const typename St::T* v, typename St::T* out) {
    St::rank1(s.P, s.g1, k, v);
    St::vecmat(q, s.P, s.w.data());
    St::rank1(s.E, s.g1, k, s.w.data());
    St::vecmat(q, s.E, out);
  }
  // Carry (P, E).
  template <class S> static Carry<S> initial(const FastHead<S>& h) { return {h.carry(0, h.d(), h.dv1()), h.carry(1, h.d(), h.dv1())}; }

  // Y = diag(ρ)(Q E_A + W_m Q P_A) + ((W_m W_m) ⊙ D_1) V;
  // E ← γ^L E + Kᵀ (diag(e_1) W_d V + γ^L Q P_A), P ← γ^L P + Kᵀ diag(e_1) V.
  template <class S> static void forward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, Carry<S>& X, BMat<S>* Y) {
    (void)h;
    BMat<S>&Pa = X[0], &Ea = X[1];
    const Idx L = x.L;
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> QK = mm(x.Q, N, x.K, T, false, true);
    const BMat<S> QPA = mm(x.Q, N, Pa, N);
    if (Y) {
      BMat<S> Wm = QK;
      zero_upper(Wm);
      *Y = mm(x.Q, N, Ea, N);
      mm_into(*Y, true, Wm, N, QPA, N, true);
      scale_rows(*Y, c.rho(L, 1));
      BMat<S> WW = mm(Wm, N, Wm, N, true, true);
      had(WW, D1);
      mm_into(*Y, true, WW, N, x.V, N, true);
    }
    const BMat<S> e1 = c.e(L, 1), rB = c.gs(L);
    BMat<S> Wd = QK;
    had(Wd, D1);
    // Kᵀ diag(e_1) W_d V + γ^L Kᵀ(Q P_A) as one product: Kᵀ (diag(e_1) W_d V + γ^L Q P_A).
    BMat<S> U = Chunks<S>::times_rows(mm(Wd, N, x.V, N, true), e1), QPAd = QPA;
    scale(QPAd, rB);
    add(U, QPAd);
    scale(Ea, rB);
    mm_into(Ea, true, x.K, T, U, N);
    scale(Pa, rB);
    mm_into(Pa, true, x.K, T, Chunks<S>::times_rows(x.V, e1), N);
  }

  // The reverse of forward(), term by term (G: the chunk's ∂L/∂Y; Xb: the
  // adjoint of the carry after the chunk in, of the carry A before it out).
  template <class S>
  static void backward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, const Carry<S>& A, const BMat<S>& G, Carry<S>& Xb,
                       ChunkGrad<S>& g) {
    const Idx L = x.L, d = h.d(), dv1 = h.dv1();
    const bool mg = h.magnitudes;
    const BMat<S>&Q = x.Q, &K = x.K, &V = x.V, &Pa = A[0], &Ea = A[1], &Pn = Xb[0], &En = Xb[1];
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> e1 = c.e(L, 1), rB = c.gs(L), Grho = Chunks<S>::times_rows(G, c.rho(L, 1));
    const BMat<S> QK = mm(Q, N, K, T, false, true);
    BMat<S> Wm = QK, Wd = QK;
    zero_upper(Wm);
    had(Wd, D1);
    const BMat<S> QPA = mm(Q, N, Pa, N);
    BMat<S> GV = mm(G, N, V, T, false, true);
    had(GV, D1);
    // Y = diag(ρ)(Q E_A + W_m QPA) + ((W_m W_m) ⊙ D_1) V
    BMat<S> dQ = mm(Grho, N, Ea, T), Eb = mm(Q, T, Grho, N);
    BMat<S> dWm = mm(Grho, N, QPA, T, false, true), dQPA = mm(Wm, T, Grho, N);
    BMat<S> WW = mm(Wm, N, Wm, N, true, true);
    had(WW, D1);
    BMat<S> dV = mm(WW, T, G, N);
    mm_into(dWm, true, GV, N, Wm, T, true, true);
    mm_into(dWm, true, Wm, T, GV, N);
    // E' = γ^L E_A + Kᵀ U, U = diag(e_1) W_d V + γ^L QPA
    BMat<S> t = En;
    scale(t, rB);
    add(Eb, t);
    BMat<S> U = Chunks<S>::times_rows(mm(Wd, N, V, N, true), e1), QPAd = QPA;
    scale(QPAd, rB);
    add(U, QPAd);
    BMat<S> dK = mm(U, N, En, T);
    const BMat<S> dU = mm(K, N, En, N), dUe = Chunks<S>::times_rows(dU, e1);
    BMat<S> dWd = mm(dUe, N, V, T, false, true);
    mm_into(dV, true, Wd, T, dUe, N);
    BMat<S> dUr = dU;
    scale(dUr, rB);
    add(dQPA, dUr);
    // P' = γ^L P_A + Kᵀ diag(e_1) V
    BMat<S> Pb = Pn;
    scale(Pb, rB);
    mm_into(dK, true, Chunks<S>::times_rows(V, e1), N, Pn, T);
    mm_into(dV, true, Chunks<S>::times_rows(K, e1), N, Pn, N);
    // QPA = Q P_A
    mm_into(dQ, true, dQPA, N, Pa, T);
    mm_into(Pb, true, Q, T, dQPA, N);
    // the scores: QK = W_m ⊙ L = W_d ⊙ D_1's source
    zero_upper(dWm);
    had(dWd, D1);
    add(dWm, dWd);
    mm_into(dQ, true, dWm, N, K, N, true);
    mm_into(dK, true, dWm, T, Q, N);
    (void)d, (void)dv1, (void)mg;
    g.dQ = std::move(dQ), g.dK = std::move(dK), g.dV = std::move(dV);
    Xb = {std::move(Pb), std::move(Eb)};
  }
};

}  // namespace hla::fast::detail
