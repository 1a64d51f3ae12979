// What the gradient units of the engine and the check layer share: one group
// task's gradients, their elements, and the engine's backward per task
// (gradient_reference.cpp, gradient_orders.cpp, fast/; check's proof and yardstick).
#pragma once

#include "hla/engine/gradient_reference.hpp"
#include "hla/bounds.hpp"
#include "hla/engine/detail.hpp"
#include "hla/state.hpp"

#include <cmath>
#include <vector>

namespace hla::engine {

// One (batch, K/V head, sequence): the gradients of the group's query heads
// [h0, h0 + group) in scalar S, dk and dv summed over the group, and their
// magnitudes. dq of head h0 + i is dq[i]; from an initial state, the gradient
// of head h0 + i's state is dstate[i] (each query head has its own state).
template <class S> struct GroupGradient {
  std::vector<Mat<S>> dq, mdq;
  Mat<S> dk, dv, mdk, mdv;
  std::vector<StateMats<S>> dstate, mdstate;
};
inline size_t q_at(const BatchProblem& p, Index b, Index h, Index t, Index c) { return p.q_index(b, h, t, c); }
inline size_t kv_at(const BatchProblem& p, Index b, Index kvh, Index t, Index c, Index cols) {
  return static_cast<size_t>(((b * p.kv_heads + kvh) * p.n + t) * cols + c);
}
inline size_t kv_row(const BatchProblem& p, Index b, Index kvh, Index t) { return static_cast<size_t>((b * p.kv_heads + kvh) * p.n + t); }

struct Task {
  Index b, kvh, t0, t1;
};
inline std::vector<Task> group_tasks(const BatchProblem& p) {
  std::vector<Task> tasks;
  const auto seqs = p.sequences();
  for (Index b = 0; b < p.batch; ++b)
    for (Index kvh = 0; kvh < p.kv_heads; ++kvh)
      for (const auto& [t0, t1] : seqs) tasks.push_back({b, kvh, t0, t1});
  return tasks;
}

// The gradients of one group task by the reference library's backward form
// in S (exact ones by the exact engine, hla/exact.hpp), with magnitudes
// unless `magnitudes` is false (gradient_reference.cpp: S = Rational, f113,
// double, float).
template <class S>
GroupGradient<S> group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index kvh,
                                Index t0, Index t1, BackwardForm form = BackwardForm::streaming, Index chunk = 16, bool magnitudes = true,
                                bool log_decay = false);

// The row scale of tensor w (0 = dq, 1 = dk, 2 = dv, 3 = dstate).
inline const std::vector<double>& scale_of(const GradientScale& s, int tensor) { return tensor == 0 ? s.q : tensor == 3 ? s.state : s.kv; }

// Calls f(tensor, at, value, magnitude, scale_row) for every element of a
// group's gradients x: tensor 0 = dq, 1 = dk, 2 = dv, 3 = dstate; `at` its
// index in the problem's tensor (dstate: laid out as BatchProblem::state); the
// magnitude (0 when x has none); scale_row its row in scale_of(tensor).
template <class S, class F> void for_each_element(const BatchProblem& p, const Task& k, const GroupGradient<S>& x, F&& f) {
  const Index group = p.heads / p.kv_heads;
  const bool mags = !x.mdq.empty();
  for (Index t = k.t0; t < k.t1; ++t) {
    const Index lt = t - k.t0;
    for (Index i = 0; i < group; ++i) {
      const Index h = k.kvh * group + i;
      const auto& v = x.dq[static_cast<size_t>(i)];
      for (Index c = 0; c < p.d; ++c)
        f(0, q_at(p, k.b, h, t, c), v(lt, c), mags ? x.mdq[static_cast<size_t>(i)](lt, c) : S(0), p.den_index(k.b, h, t));
    }
    const size_t row = kv_row(p, k.b, k.kvh, t);
    for (Index c = 0; c < p.d; ++c) f(1, kv_at(p, k.b, k.kvh, t, c, p.d), x.dk(lt, c), mags ? x.mdk(lt, c) : S(0), row);
    for (Index c = 0; c < p.dv; ++c) f(2, kv_at(p, k.b, k.kvh, t, c, p.dv), x.dv(lt, c), mags ? x.mdv(lt, c) : S(0), row);
  }
  if (!p.has_state()) return;
  for (Index i = 0; i < group; ++i) {
    const Index h = k.kvh * group + i;
    const Index seq = p.sequence_of(k.b, k.t0);
    const BatchProblem::StateView X = p.state_view(seq, h);
    const StateMats<S>& v = x.dstate[static_cast<size_t>(i)];
    for (size_t m = 0; m < v.size(); ++m)
      for (Index r = 0; r < v[m].rows(); ++r)
        for (Index c = 0; c < v[m].cols(); ++c)
          f(3, X.start[m] + static_cast<size_t>(r * v[m].cols() + c), v[m](r, c), mags ? x.mdstate[static_cast<size_t>(i)][m](r, c) : S(0),
            static_cast<size_t>(seq * p.heads + h));
  }
}

// κ_t of one normalized output token (gradient.hpp), +inf where ill-conditioned.
// Ku: the forward's error bound per unit of magnitude (K_f·u). With den's
// relative error δ = Ku·M̃_den/|D| < 1/2: |1/D̂ − 1/D| ≤ (1/(1−δ) − 1)/|D| and
// |1/D̂² − 1/D²| ≤ (1/(1−δ)² − 1)/D² = Ku·(2−δ)/(1−δ)²·(M̃_den/|D|)/D², so
// ∂L/∂Y errs by at most Ku·(ρ_t + (2−δ)/(1−δ)²·M̃_den/|D|) of its magnitude.
inline double token_kappa(const Options& o, double den, double mden_err, const double* mnum, const double* mnum_err, Index dv, double Ku) {
  const double eps = to_double(o.eps), E = Ku * mden_err;
  if (!std::isfinite(den) || !std::isfinite(E)) return INFINITY;
  const bool clamp = o.eps_mode == EpsMode::clamp;
  // Clamped: the sign of D (den near 0) and its branch (|den| near ε) must be the exact one's.
  if (clamp && (std::fabs(den) <= E || std::fabs(std::fabs(den) - eps) <= E)) return INFINITY;
  const double D = normalizer(den, eps, o.eps_mode);
  const bool flat = clamp && std::fabs(den) < eps;  // D = ±ε: no error from den
  const double delta = flat ? 0.0 : E / std::fabs(D);
  if (!(delta < 0.5)) return INFINITY;
  double rho = 1;
  for (Index c = 0; c < dv; ++c)
    if (mnum_err[c] > mnum[c]) rho = std::max(rho, mnum[c] > 0 ? mnum_err[c] / mnum[c] : INFINITY);
  return rho + (flat ? 0.0 : (2 - delta) / ((1 - delta) * (1 - delta)) * mden_err / std::fabs(D));
}

// The gradients of one group task by the double-double engine (fast/backward.hpp):
// values rounded to double (certified: the correctly rounded exact value),
// magnitudes, and Flag bits in `flags` (its dq, dk, dv, dstate members hold
// them as numbers). False where the engine cannot evaluate the group (no
// chunked form, overflow, a normalized token whose den ⊕ ε it cannot bound
// away from the pole or, clamped, from the clamp's edge): use binary128.
// den_ref: the forward reference's den, whose |den ⊕ ε| the normalized
// magnitudes divide by (generation and proof alike). `bounds` (tests): each
// element's error term, the bound that certification screens against.
bool fast_group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                         const std::vector<double>& den_ref, Index b, Index kvh, Index t0, Index t1, Index chunk, GroupGradient<double>& x,
                         GroupGradient<double>& flags, GroupGradient<double>* bounds = nullptr);
// The same by the double engine, for the proof of stored gradients: values
// (with their magnitudes, as fast_group_gradient's) and a bound of each
// value's error (its dq, dk, dv, dstate members).
bool fast_group_bounds(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                       const std::vector<double>& den_ref, Index b, Index kvh, Index t0, Index t1, GroupGradient<double>& values,
                       GroupGradient<double>& bounds);

}  // namespace hla::engine
