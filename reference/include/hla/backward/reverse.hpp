// The reverse-time recurrence driver shared by every variant's backward
// (SPEC §9; derivations in backward.md). A variant type B provides its forward
// state State<T> (the SPEC §3 recurrence; its adjoint has the same shape),
// zero_state, advance (one token forward), readout (y_t of the state after
// token t) and reverse_step (one token back); State::members() ties its matrices.
#pragma once

#include "hla/backward/adjoint.hpp"

#include <algorithm>
#include <vector>

namespace hla {

template <class B, class T> using StateOf = typename B::template State<T>;

template <class T, class State> struct ReverseResult {
  HeadGrad<T> grad;
  State dX0;  // ∂L/∂(the state before token 0): the gradient of an initial state
};

// The forward recurrence from the state X before token 0 (a continued
// sequence, SPEC §8): the rows Y = [num | den].
template <class B, class T> Mat<T> forward_from(const Head<T>& h, StateOf<B, T> X) {
  Mat<T> Y(h.n(), h.dv1());
  for (Index t = 0; t < h.n(); ++t) {
    B::advance(h, X, t);
    Y.row(t) = B::readout(h, X, t);
  }
  return Y;
}

// Chunks of width w, last chunk first: a forward pass keeps only the state
// before each chunk (as a chunked kernel does); then step(c0, L, X, r) runs the
// adjoint back through chunk [c0, c0 + L) from its starting state X, taking in
// r.dX0 the adjoint of the chunk's final state and leaving the adjoint of X.
// After the first chunk r.dX0 is ∂L/∂X0, the gradient of the initial state.
// The forward pass stops at the last chunk's start (no step needs the final
// state): the streaming form (one chunk) runs no forward pass here at all.
template <class B, class T, class Step>
ReverseResult<T, StateOf<B, T>> reverse_over_chunks(const Head<T>& h, Index w, StateOf<B, T> X, Step&& step) {
  std::vector<StateOf<B, T>> starts;
  for_each_chunk(h.n(), w, [&](Index c0, Index L) {
    starts.push_back(X);
    if (c0 + L < h.n())
      for (Index t = c0; t < c0 + L; ++t) B::advance(h, X, t);
  });
  ReverseResult<T, StateOf<B, T>> r{zero_grad(h), B::zero_state(h)};
  for (Index c = static_cast<Index>(starts.size()) - 1; c >= 0; --c)
    step(c * w, std::min(w, h.n() - c * w), starts[static_cast<size_t>(c)], r);
  return r;
}

// Token by token inside each chunk: the chunk's states are recomputed from its
// start and reverse_step runs back through them. w ≥ n is the streaming form
// (one chunk). X0: the state before token 0.
template <class B, class T>
ReverseResult<T, StateOf<B, T>> reverse_chunked(const Head<T>& h, const Mat<T>& dY, Index w, StateOf<B, T> X0) {
  return reverse_over_chunks<B>(h, w, std::move(X0), [&](Index c0, Index L, StateOf<B, T> X, auto& r) {
    std::vector<StateOf<B, T>> tape;  // the state after each token of the chunk
    for (Index t = c0; t < c0 + L; ++t) {
      B::advance(h, X, t);
      tape.push_back(X);
    }
    for (Index t = c0 + L - 1; t >= c0; --t) B::reverse_step(h, dY, tape[static_cast<size_t>(t - c0)], r.dX0, t, r.grad);
  });
}
template <class B, class T> ReverseResult<T, StateOf<B, T>> reverse_chunked(const Head<T>& h, const Mat<T>& dY, Index w) {
  return reverse_chunked<B>(h, dY, w, B::zero_state(h));
}

// Whole chunks at a time in matrix products (what a tensor-core kernel's
// backward computes), for the variants whose type has chunk_backward.
template <class B> constexpr bool has_chunk_backward = requires { &B::template chunk_backward<double>; };
template <class B, class T>
ReverseResult<T, StateOf<B, T>> reverse_matmul(const Head<T>& h, const Mat<T>& dY, Index w, StateOf<B, T> X0) {
  return reverse_over_chunks<B>(h, w, std::move(X0), [&](Index c0, Index L, const StateOf<B, T>& X, auto& r) {
    B::chunk_backward(h, dY, c0, L, X, r.dX0, r.grad);
  });
}
template <class B, class T> ReverseResult<T, StateOf<B, T>> reverse_matmul(const Head<T>& h, const Mat<T>& dY, Index w) {
  return reverse_matmul<B>(h, dY, w, B::zero_state(h));
}

}  // namespace hla
