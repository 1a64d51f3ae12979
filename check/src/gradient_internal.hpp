// What the check layer's gradient units share (gradient.cpp, fast/gradient.cpp).
#pragma once

#include "hla/check/gradient.hpp"
#include "hla/state.hpp"

#include <vector>

namespace hla::check {

// One (batch, K/V head, sequence): the gradients of the group's query heads
// [h0, h0 + group) in scalar S, dk and dv summed over the group, and their
// magnitudes. dq of head h0 + i is dq[i]; from an initial state, the gradient
// of head h0 + i's state is dstate[i] (each query head has its own state).
template <class S> struct GroupGradient {
  std::vector<Mat<S>> dq, mdq;
  Mat<S> dk, dv, mdk, mdv;
  std::vector<StateMats<S>> dstate, mdstate;
};
// The gradients of one group task by the double-double engine (fast/backward.hpp):
// values rounded to double (certified: the correctly rounded exact value),
// magnitudes, and Flag bits in `flags` (its dq, dk, dv, dstate members hold
// them as numbers). False where the engine cannot evaluate the group (no
// chunked form, overflow, a normalized token whose den ⊕ ε it cannot bound
// away from the pole or, clamped, from the clamp's edge): use binary128.
bool fast_group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index kvh,
                         Index t0, Index t1, Index chunk, GroupGradient<double>& x, GroupGradient<double>& flags);

}  // namespace hla::check
