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

// Chunks of width w, last chunk first: the states are recomputed from the
// chunk's starting state (a forward pass keeps only those, as a chunked kernel
// does), and the adjoint runs back through them; what leaves a chunk at its
// first token is the adjoint of the state the previous chunk hands over.
// w ≥ n is the streaming form (one chunk). X0: the state before token 0.
template <class B, class T>
ReverseResult<T, StateOf<B, T>> reverse_chunked(const Head<T>& h, const Mat<T>& dY, Index w, StateOf<B, T> X0) {
  std::vector<StateOf<B, T>> starts;
  StateOf<B, T> X = std::move(X0);
  for_each_chunk(h.n(), w, [&](Index c0, Index L) {
    starts.push_back(X);
    for (Index t = c0; t < c0 + L; ++t) B::advance(h, X, t);
  });
  ReverseResult<T, StateOf<B, T>> r{zero_grad(h), B::zero_state(h)};
  for (Index c = static_cast<Index>(starts.size()) - 1; c >= 0; --c) {
    const Index c0 = c * w, L = std::min(w, h.n() - c0);
    std::vector<StateOf<B, T>> tape;  // the state after each token of the chunk
    X = starts[static_cast<size_t>(c)];
    for (Index t = c0; t < c0 + L; ++t) {
      B::advance(h, X, t);
      tape.push_back(X);
    }
    for (Index t = c0 + L - 1; t >= c0; --t) B::reverse_step(h, dY, tape[static_cast<size_t>(t - c0)], r.dX0, t, r.grad);
  }
  return r;
}
template <class B, class T> ReverseResult<T, StateOf<B, T>> reverse_chunked(const Head<T>& h, const Mat<T>& dY, Index w) {
  return reverse_chunked<B>(h, dY, w, B::zero_state(h));
}

}  // namespace hla
