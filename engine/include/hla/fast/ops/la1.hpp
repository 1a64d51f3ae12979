// la1 on the fast engine: one chunk forward (SPEC §5) and its reverse mode
// (SPEC §9; reference/include/hla/backward/la1.hpp chunk_backward).
#pragma once

#include "hla/fast/head.hpp"

namespace hla::fast::detail {

struct La1 {
  static constexpr Variant variant = Variant::la1;

  // One token of the streaming recurrence (SPEC §3; fast/streaming.hpp) in
  // the streamer St's precision: the state s updated, the readout into out.
  template <class St, class State>
  static void stream(State& s, const typename St::T* q, const typename St::T* k, const typename St::T* v, typename St::T* out) {
    St::rank1(s.P, s.g1, k, v);
    St::vecmat(q, s.P, out);
  }
  // Carry (P).
  template <class S> static Carry<S> initial(const FastHead<S>& h) { return {h.carry(0, h.d(), h.dv1())}; }

  // Y = diag(ρ) Q P_A + ((QKᵀ) ⊙ D_1) V;  P ← γ^L P + Kᵀ diag(e_1) V.
  template <class S> static void forward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, Carry<S>& X, BMat<S>* Y) {
    (void)h;
    BMat<S>& P = X[0];
    const Idx L = x.L;
    if (Y) {
      *Y = mm(x.Q, N, P, N);
      scale_rows(*Y, c.rho(L, 1));
      BMat<S> QK = mm(x.Q, N, x.K, T, false, true);
      had(QK, c.D(L, 1));
      mm_into(*Y, true, QK, N, x.V, N, true);
    }
    scale(P, c.gs(L));
    mm_into(P, true, x.K, T, Chunks<S>::times_rows(x.V, c.e(L, 1)), N);
  }

  // G: the chunk's rows of ∂L/∂Y. Xb: the adjoint of the carry after the
  // chunk in, of the carry A before it out. With M = (G Vᵀ) ⊙ D_1:
  //   dQ = diag(ρ) G P_Aᵀ + M K,  dK = Mᵀ Q + diag(e) V P̄ᵀ,  dV = ((QKᵀ) ⊙ D_1)ᵀ G + diag(e) K P̄,
  //   P̄_A = Qᵀ diag(ρ) G + γ^L P̄.
  template <class S>
  static void backward(const FastHead<S>& h, Chunks<S>& c, const Chunk<S>& x, const Carry<S>& A, const BMat<S>& G, Carry<S>& Xb,
                       ChunkGrad<S>& g) {
    (void)h;
    const Idx L = x.L;
    const BMat<S>& D1 = c.D(L, 1);
    const BMat<S> e1 = c.e(L, 1), Grho = Chunks<S>::times_rows(G, c.rho(L, 1));
    BMat<S>& Pb = Xb[0];
    BMat<S> M = mm(G, N, x.V, T, false, true);
    had(M, D1);
    g.dQ = mm(Grho, N, A[0], T);
    mm_into(g.dQ, true, M, N, x.K, N, true);
    g.dK = mm(M, T, x.Q, N);
    mm_into(g.dK, true, Chunks<S>::times_rows(x.V, e1), N, Pb, T);
    BMat<S> QK = mm(x.Q, N, x.K, T, false, true);
    had(QK, D1);
    g.dV = mm(QK, T, G, N);
    mm_into(g.dV, true, Chunks<S>::times_rows(x.K, e1), N, Pb, N);
    BMat<S> PbA = mm(x.Q, T, Grho, N);
    scale(Pb, c.gs(L));
    add(PbA, Pb);
    Pb = std::move(PbA);
  }
};

}  // namespace hla::fast::detail
