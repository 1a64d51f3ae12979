// Our state-difference backward (rule 3's order for the state-difference
// class, gradient_internal.hpp paper_state_gradients): the reverse mode of
// hla2's paper-state recurrence with the corrected decay (SPEC §3):
//   S_t = γS + k kᵀ,  C_t = γC + q vᵀ,  G_t = γ²G + γ k (kᵀ C_{t−1}),
//   y_t = (qᵀS_t + λqᵀ) C_t − qᵀ G_t,
// whose backward subtracts the unmasked terms it forms, as a kernel that
// differentiates through S·C − G does. Adjoints, g = ∂L/∂y_t:
//   Ḡ −= q g,  C̄ += (S_tᵀq + λq) g,  S̄ += q (C_t gᵀ)ᵀ,  q̄ = (S_t + λI) C_t gᵀ − G_t gᵀ + C̄ v;
//   through G's update (a = kᵀC_{t−1}): k̄ += γ Ḡ aᵀ + γ C_{t−1} Ḡᵀ k, C̄_{t−1} gets γ k kᵀ Ḡ;
//   k̄ += (S̄ + S̄ᵀ) k, v̄ = C̄ᵀ q; then S̄ ← γS̄, C̄ ← γC̄ + γ k kᵀ Ḡ, Ḡ ← γ²Ḡ.
// Chunks of 64 tokens: a forward pass keeps the state before each chunk, the
// reverse pass recomputes a chunk's states (memory O(64·(d² + d·dv))).
// Float or double; every operation in that precision.
#include "hla/engine/gradient_groups.hpp"

namespace hla::engine {
namespace {

template <class T> struct PaperState { Mat<T> S, C, G; };

template <class T>
void head(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index h, Index t0, Index t1,
          Mat<T>& dq, Mat<T>& dk, Mat<T>& dv) {
  const Index n = t1 - t0, d = p.d, dv1 = p.dv + 1, W = 64;
  const Problem<T> ph = p.head<T>(b, h, t0, t1);
  const T gamma = from_rational<T>(p.opt.gamma), lambda = from_rational<T>(p.opt.lambda), scale = from_rational<T>(p.opt.scale),
          eps = from_rational<T>(p.opt.eps);
  const Mat<T> Q = ph.q * scale, K = ph.k;
  Mat<T> V(n, dv1);
  V.leftCols(p.dv) = ph.v;
  V.col(p.dv).setOnes();
  auto advance = [&](PaperState<T>& X, Index t) {
    const Vec<T> q = Q.row(t).transpose(), k = K.row(t).transpose();
    const Mat<T> Cp = X.C;
    X.S = gamma * X.S + k * k.transpose();
    X.C = gamma * X.C + q * V.row(t);
    X.G = gamma * gamma * X.G + gamma * k * (k.transpose() * Cp);
    return Cp;
  };
  PaperState<T> X{Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv1), Mat<T>::Zero(d, dv1)};
  std::vector<PaperState<T>> starts;
  Mat<T> Y(n, dv1);
  for (Index t = 0; t < n; ++t) {
    if (t % W == 0) starts.push_back(X);
    advance(X, t);
    const RowVec<T> q = Q.row(t);
    Y.row(t) = (q * X.S + lambda * q) * X.C - q * X.G;
  }
  // ∂L/∂Y from this order's own outputs (SPEC §9).
  Mat<T> dY(n, dv1);
  for (Index t = 0; t < n; ++t) {
    for (Index c = 0; c < p.dv; ++c) dY(t, c) = static_cast<T>(dout[p.out_index(b, h, t0 + t, c)]);
    dY(t, p.dv) = dden.empty() ? T(0) : static_cast<T>(dden[p.den_index(b, h, t0 + t)]);
    if (!p.opt.normalize) continue;
    const T D = normalizer(Y(t, p.dv), eps, p.opt.eps_mode);
    const T s = dY.row(t).head(p.dv).dot(Y.row(t).head(p.dv));
    dY.row(t).head(p.dv) /= D;
    using std::abs;
    if (!(p.opt.eps_mode == EpsMode::clamp && abs(Y(t, p.dv)) < eps)) dY(t, p.dv) -= s / (D * D);
  }
  dq = Mat<T>::Zero(n, d), dk = Mat<T>::Zero(n, d), dv = Mat<T>::Zero(n, dv1);
  Mat<T> Sb = Mat<T>::Zero(d, d), Cb = Mat<T>::Zero(d, dv1), Gb = Mat<T>::Zero(d, dv1);
  for (Index c = static_cast<Index>(starts.size()) - 1; c >= 0; --c) {
    const Index c0 = c * W, L = std::min(W, n - c0);
    std::vector<PaperState<T>> tape;
    std::vector<Mat<T>> prev;
    PaperState<T> Z = starts[static_cast<size_t>(c)];
    for (Index t = c0; t < c0 + L; ++t) {
      prev.push_back(advance(Z, t));
      tape.push_back(Z);
    }
    for (Index t = c0 + L - 1; t >= c0; --t) {
      const PaperState<T>& A = tape[static_cast<size_t>(t - c0)];
      const Mat<T>& Cp = prev[static_cast<size_t>(t - c0)];
      const Vec<T> q = Q.row(t).transpose(), k = K.row(t).transpose(), v = V.row(t).transpose();
      const RowVec<T> g = dY.row(t);
      const Vec<T> Cg = A.C * g.transpose();
      Gb -= q * g;
      Cb += (A.S.transpose() * q + lambda * q) * g;
      Sb += q * Cg.transpose();
      Vec<T> gq = A.S * Cg + lambda * Cg - A.G * g.transpose() + Cb * v;
      const RowVec<T> a = k.transpose() * Cp;
      Vec<T> gk = gamma * (Gb * a.transpose()) + gamma * (Cp * (Gb.transpose() * k)) + (Sb + Sb.transpose()) * k;
      dq.row(t) = gq.transpose() * scale;
      dk.row(t) = gk.transpose();
      dv.row(t) = (Cb.transpose() * q).transpose();
      Sb *= gamma;
      Cb = gamma * Cb + gamma * k * (k.transpose() * Gb);
      Gb *= gamma * gamma;
    }
  }
}

template <class T> CandidateOutputs gradients(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) {
  CandidateOutputs out;
  out.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  out.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  out.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  const std::vector<Task> tasks = group_tasks(p);
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {
    const Task& k = tasks[i];
    const Index L = k.t1 - k.t0, group = p.heads / p.kv_heads;
    Mat<T> sk = Mat<T>::Zero(L, p.d), sv = Mat<T>::Zero(L, p.dv + 1);
    for (Index j = 0; j < group; ++j) {
      const Index h = k.kvh * group + j;
      Mat<T> dq, dk, dv;
      head<T>(p, dout, dden, k.b, h, k.t0, k.t1, dq, dk, dv);
      sk += dk, sv += dv;
      for (Index t = 0; t < L; ++t)
        for (Index c = 0; c < p.d; ++c) out.dq[p.q_index(k.b, h, k.t0 + t, c)] = static_cast<double>(dq(t, c));
    }
    for (Index t = 0; t < L; ++t) {
      for (Index c = 0; c < p.d; ++c) out.dk[kv_at(p, k.b, k.kvh, k.t0 + t, c, p.d)] = static_cast<double>(sk(t, c));
      for (Index c = 0; c < p.dv; ++c) out.dv[kv_at(p, k.b, k.kvh, k.t0 + t, c, p.dv)] = static_cast<double>(sv(t, c));
    }
  });
  return out;
}

}  // namespace

CandidateOutputs paper_state_gradients(const BatchProblem& p, Precision prec, const std::vector<double>& dout,
                                       const std::vector<double>& dden) {
  if (prec == Precision::f64) return gradients<double>(p, dout, dden);
  return gradients<float>(p, dout, dden);
}

}  // namespace hla::engine
