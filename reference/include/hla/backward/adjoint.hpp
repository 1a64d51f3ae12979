// What every backward form shares (SPEC §9): the loss, the adjoint of the
// outputs (normalization differentiated by hand), and the gradient in head
// coordinates. Scalar-generic; header-only.
#pragma once

#include "hla/bounds.hpp"
#include "hla/head.hpp"

#include <tuple>

namespace hla {

// Gradient with respect to a Head's q (already scaled), k and v; dv has the
// head's ones column too (its entries are not a gradient of anything).
template <class T> struct HeadGrad {
  Mat<T> dq, dk, dv;
};

template <class T> HeadGrad<T> zero_grad(const Head<T>& h) {
  return {Mat<T>::Zero(h.n(), h.d()), Mat<T>::Zero(h.n(), h.d()), Mat<T>::Zero(h.n(), h.dv1())};
}

// L = Σ_t ⟨do_t, o_t⟩ + Σ_t dden_t·den_t (SPEC §9), from the forward's n × (dv+1)
// rows Y = [num | den]. Written with the forward's own normalizer, so that a
// dual-number evaluation differentiates it without any hand-derived algebra.
template <class T>
T loss(const Options& opt, const Mat<T>& Y, const Mat<T>& dout, const Vec<T>& dden, const T& eps) {
  const Index dv = Y.cols() - 1;
  T L(0);
  for (Index t = 0; t < Y.rows(); ++t) {
    T o = dout.row(t).dot(Y.row(t).head(dv));
    if (opt.normalize) o = o / normalizer(Y(t, dv), eps, opt.eps_mode);
    L += o + dden(t) * Y(t, dv);
  }
  return L;
}

// Whether the clamp holds D at ±ε, so that D' = 0 (see output_adjoint).
template <class T> bool normalizer_flat(const T& den, const T& eps, EpsMode mode) {
  using std::abs;
  return mode == EpsMode::clamp && abs(den) < eps;
}

// ∂L/∂Y, by hand: with D = normalizer(den), o = num/D,
//   ∂L/∂num_t = do_t / D,   ∂L/∂den_t = dden_t − D'(den_t)·⟨do_t, o_t⟩ / D,
// D' = 1 (add); clamp: D = sign(den)·max(|den|, ε) is den itself where |den| ≥ ε
// (D' = 1, the branch the forward takes at |den| = ε) and constant where |den| < ε (D' = 0).
// Without normalize ∂L/∂Y is the upstream [do | dden] itself, so `outputs()`, which
// gives the forward's rows Y = [num | den], runs only with normalize.
template <class T, class Outputs>
Mat<T> output_adjoint(const Options& opt, Outputs&& outputs, const Mat<T>& dout, const Vec<T>& dden, const T& eps) {
  const Index dv = dout.cols();
  Mat<T> dY(dout.rows(), dv + 1);
  dY.leftCols(dv) = dout;
  dY.col(dv) = dden;
  if (!opt.normalize) return dY;
  const Mat<T>& Y = outputs();
  for (Index t = 0; t < Y.rows(); ++t) {
    const T& den = Y(t, dv);
    const T D = normalizer(den, eps, opt.eps_mode);
    dY.row(t).head(dv) = dout.row(t) / D;
    if (!normalizer_flat(den, eps, opt.eps_mode)) dY(t, dv) -= dout.row(t).dot(Y.row(t).head(dv)) / (D * D);  // ⟨do, o⟩/D with o = num/D
  }
  return dY;
}

// The rows of chunk [c0, c0 + L): its inputs and their upstream ∂L/∂Y.
template <class T> struct ChunkRows {
  typename Mat<T>::ConstRowsBlockXpr Q, K, V, G;
};
template <class T> ChunkRows<T> chunk_rows(const Head<T>& h, const Mat<T>& dY, Index c0, Index L) {
  return {h.q.middleRows(c0, L), h.k.middleRows(c0, L), h.v.middleRows(c0, L), dY.middleRows(c0, L)};
}

// The naive gradients through the score matrix A = QKᵀ (a_ti = q_t·k_i) and,
// for hla2's ridge, B = QQᵀ: dq = dA·K + (dB + dBᵀ)·Q, dk = dAᵀ·Q.
template <class T> HeadGrad<T> through_scores(const Head<T>& h, const Mat<T>& dA, const Mat<T>& dB, Mat<T> dv) {
  return {dA * h.k + (dB + dB.transpose()) * h.q, dA.transpose() * h.q, std::move(dv)};
}
template <class T> HeadGrad<T> through_scores(const Head<T>& h, const Mat<T>& dA, Mat<T> dv) {
  return {dA * h.k, dA.transpose() * h.q, std::move(dv)};
}

}  // namespace hla
