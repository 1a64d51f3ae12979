// The fast engine's backward (SPEC §9): the reverse mode of each variant's
// chunk form (ops/<variant>.hpp: forward and backward side by side), written
// once over the scalar S like the forward — DD (the certified gradient
// reference), double (verification and magnitudes on absolute values),
// Rational (the proof: the properties demand that it equals the naive
// gradient exactly) and the emulated precisions (our backward orders in a
// candidate's precision). A forward pass keeps the carry before each chunk
// (as a chunked kernel's backward recomputes it); then, last chunk first, each
// chunk's backward takes the adjoint of its final carry and hands the previous
// chunk the adjoint of its starting carry. After the first chunk that is
// ∂L/∂X0, the gradient of the initial state (SPEC §8, §9).
//
// The backward is linear in the upstream G = ∂L/∂Y and, like the forward,
// only adds terms (masks and decays are non-negative), so the same code on
// absolute values of the inputs and of G gives the gradients' SPEC §9
// magnitudes, and every matrix carries the bound |val − exact| ≤ phi·unit·M +
// alpha of matrix.hpp with M the magnitude for the upstream as given.
#pragma once

#include "hla/fast/engine.hpp"

namespace hla::fast {

// What a forward pass leaves for the backward: the carry before each chunk
// and, when asked, the outputs [num | den] (for a normalized upstream).
template <class S> struct Tape {
  std::vector<Carry<S>> starts;
  HeadResult<S> outputs;
  bool finite = true;
};

template <class S> Tape<S> forward_tape(const FastHead<S>& h, bool outputs) {
  if (!supports(h.variant)) throw std::logic_error("fast engine: no chunked form for this variant");
  Tape<S> tp;
  if (outputs) tp.outputs = HeadResult<S>::zero(h.n(), h.dv1(), h.magnitudes);
  tp.finite = h.q.finite && h.k.finite && h.v.finite;
  detail::Chunks<S> c(h);
  with_chunk_form(h.variant, [&]<class F>(F) {
    Carry<S> X = F::initial(h);
    for_each_chunk(h, [&](const detail::Chunk<S>& x) {
      tp.starts.push_back(X);
      if (!outputs && x.c0 + x.L >= h.n()) return;  // no chunk reads the final carry
      BMat<S> Y;
      c.start(x.c0, x.L);
      F::forward(h, c, x, X, outputs ? &Y : nullptr);
      if (outputs) tp.outputs.put(x.c0, Y);
    });
  });
  for (const Carry<S>& X : tp.starts)
    for (const BMat<S>& m : X) tp.finite = tp.finite && m.finite;
  if (outputs) tp.finite = tp.finite && tp.outputs.finite;
  return tp;
}

// Gradients of one head: dq with respect to the problem's q (the head's q
// was multiplied by scale, so dq carries that factor), dk, dv (n × (dv + 1):
// its ones column is no input), and ∂L/∂X0 in the carry's order (symmetric
// members as they are: the caller takes their symmetric part).
template <class S> struct HeadGradient {
  HeadResult<S> dq, dk, dv;
  Carry<S> dstate;
  bool finite = true;
};

// G: ∂L/∂Y, n × (dv + 1) (for a normalized problem formed by the caller from
// the outputs, tp.outputs).
template <class S> HeadGradient<S> backward_head(const FastHead<S>& h, const Tape<S>& tp, const BMat<S>& G) {
  if (G.rows() != h.n() || G.cols() != h.dv1()) throw std::logic_error("fast engine: the upstream's shape differs from the head's");
  HeadGradient<S> r{HeadResult<S>::zero(h.n(), h.d(), h.magnitudes),
                    HeadResult<S>::zero(h.n(), h.d(), h.magnitudes),
                    HeadResult<S>::zero(h.n(), h.dv1(), h.magnitudes),
                    {},
                    tp.finite && G.finite};
  detail::Chunks<S> c(h);
  with_chunk_form(h.variant, [&]<class F>(F) {
    Carry<S> Xb = F::initial(h);  // the adjoint of the final carry: zero, shaped like the carry
    for (BMat<S>& m : Xb) m = BMat<S>::zero(m.rows(), m.cols(), h.magnitudes);
    const Idx chunks = static_cast<Idx>(tp.starts.size());
    for (Idx i = chunks - 1; i >= 0; --i) {
      const Idx c0 = i * h.w;
      const detail::Chunk<S> x(h, c0, std::min(h.w, h.n() - c0));
      detail::ChunkGrad<S> g;
      c.start(c0, x.L);
      F::backward(h, c, x, tp.starts[static_cast<size_t>(i)], ops::rows(G, c0, x.L), Xb, g);
      if (h.scaled) ops::scale(g.dQ, h.scale);
      r.dq.put(c0, g.dQ);
      r.dk.put(c0, g.dK);
      r.dv.put(c0, g.dV);
    }
    r.dstate = std::move(Xb);
  });
  r.finite = r.finite && r.dq.finite && r.dk.finite && r.dv.finite;
  for (const BMat<S>& m : r.dstate) r.finite = r.finite && m.finite;
  return r;
}

}  // namespace hla::fast
