// Our state-difference backwards (rule 3's orders for the state-difference
// class, gradient_reference.hpp paper_state_gradients): the reverse mode of a
// recurrence that subtracts the unmasked terms it forms, as a kernel that
// differentiates through it (autograd or by hand) does.
//
// hla2's paper state with the corrected decay (SPEC §3):
//   S_t = γS + k kᵀ,  C_t = γC + q vᵀ,  G_t = γ²G + γ k (kᵀ C_{t−1}),
//   y_t = (qᵀS_t + λqᵀ) C_t − qᵀ G_t.
// Adjoints, g = ∂L/∂y_t:
//   Ḡ −= q g,  C̄ += (S_tᵀq + λq) g,  S̄ += q (C_t gᵀ)ᵀ,  q̄ = (S_t + λI) C_t gᵀ − G_t gᵀ + C̄ v;
//   through G's update (a = kᵀC_{t−1}): k̄ += γ Ḡ aᵀ + γ C_{t−1} Ḡᵀ k, C̄_{t−1} gets γ k kᵀ Ḡ;
//   k̄ += (S̄ + S̄ᵀ) k, v̄ = C̄ᵀ q; then S̄ ← γS̄, C̄ ← γC̄ + γ k kᵀ Ḡ, Ḡ ← γ²Ḡ.
// From an initial state (SPEC §8; layout S, C, F = S·C − G, as the fast
// engine's paper_state_final reads it) the carry is G0 = S0·C0 − F0, formed
// by subtracting too: S̄0 += Ḡ C0ᵀ, C̄0 += S0ᵀḠ, F̄0 = −Ḡ.
//
// hla3's (reference ops/hla3.hpp streaming_paper_state): with a = SQ_{t−1}k,
// c = S_{t−1}a,  G_t = γ³G + γ k (aᵀP_t) + γ² c vᵀ,  y_t = ((qᵀS_t)SQ_t)P_t − qᵀG_t.
// Adjoints: r1 = qᵀS_t, r2 = r1·SQ_t, w2 = P_t gᵀ, w1 = SQ_tᵀw2:
//   P̄ += r2ᵀg, S̄Q += r1ᵀw2ᵀ, S̄ += q w1ᵀ, q̄ = S_t w1 − G_t gᵀ, Ḡ −= q g;
//   through G's update: b̄ = γkᵀḠ, c̄ = γ²Ḡv, ā = P_t b̄ᵀ + S_{t−1}ᵀc̄, P̄ += a b̄;
//   k̄ = γḠ(aᵀP_t)ᵀ + SQ_{t−1}ᵀā + P̄v + (S̄ + S̄ᵀ)k, v̄ = γ²Ḡᵀc + P̄ᵀk, q̄ += (S̄Q + S̄Qᵀ)q;
//   then S̄ ← γS̄ + c̄aᵀ, S̄Q ← γS̄Q + ā kᵀ, P̄ ← γP̄, Ḡ ← γ³Ḡ.
// From an initial state (layout S, P, F; no SQ): SQ0 = 0 and G0 = −F0, so
// S̄0 = S̄, P̄0 = P̄, F̄0 = −Ḡ.
// (The state's gradient as formed, not symmetrized: the check symmetrizes both sides.)
//
// Chunks of 64 tokens: a forward pass keeps the state before each chunk, the
// reverse pass recomputes a chunk's states (memory O(64·(d² + d·dv))).
// Double, float, bf16 or f16 (Eigen's bfloat16/half: every product and sum
// rounded, products summed left to right, hla/scalar.hpp); every operation,
// inputs and upstream included, in that precision.
#include "hla/engine/gradient_groups.hpp"

namespace hla::engine {
namespace {

// The member of the variant's state layout named `name` (its index in X0 and dstate).
size_t member(const BatchProblem& p, const char* name) {
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  for (size_t i = 0; i < layout.size(); ++i)
    if (layout[i].name == name) return i;
  throw InputError(std::string("the paper state's backward needs state member ") + name);
}

// One head's inputs in T (q scaled; v with its ones column).
template <class T> struct Inputs {
  Mat<T> Q, K, V;
  T gamma, lambda;
  Inputs(const BatchProblem& p, Index b, Index h, Index t0, Index t1)
      : gamma(from_rational<T>(p.opt.gamma)), lambda(from_rational<T>(p.opt.lambda)) {
    const Problem<T> ph = p.head<T>(b, h, t0, t1);
    Q = ph.q * from_rational<T>(p.opt.scale), K = ph.k;
    V.resize(t1 - t0, p.dv + 1);
    V.leftCols(p.dv) = ph.v;
    V.col(p.dv).setOnes();
  }
};

template <class T> struct Hla2 {
  struct State {
    Mat<T> S, C, G;
  };
  using Prev = Mat<T>;  // C_{t−1}
  const Inputs<T>& in;
  size_t iS = 0, iC = 0, iF = 0;
  State zero(Index d, Index dv1) const { return {Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv1), Mat<T>::Zero(d, dv1)}; }
  State initial(const BatchProblem& p, const StateMats<T>& X0) {
    iS = member(p, "S"), iC = member(p, "C"), iF = member(p, "F");
    return {X0[iS], X0[iC], X0[iS] * X0[iC] - X0[iF]};
  }
  Prev advance(State& X, Index t) const {
    const Vec<T> q = in.Q.row(t).transpose(), k = in.K.row(t).transpose();
    const T gamma = in.gamma;
    Mat<T> Cp = X.C;
    X.S = gamma * X.S + k * k.transpose();
    X.C = gamma * X.C + q * in.V.row(t);
    X.G = gamma * gamma * X.G + gamma * k * (k.transpose() * Cp);
    return Cp;
  }
  RowVec<T> readout(const State& X, Index t) const {
    const RowVec<T> q = in.Q.row(t);
    return (q * X.S + in.lambda * q) * X.C - q * X.G;
  }
  // The adjoints Xb of the state after token t, back to before it; q̄, k̄, v̄ of the token.
  void reverse(State& Xb, const State& A, const Prev& Cp, Index t, const RowVec<T>& g, Vec<T>& gq, Vec<T>& gk, Vec<T>& gv) const {
    const Vec<T> q = in.Q.row(t).transpose(), k = in.K.row(t).transpose(), v = in.V.row(t).transpose();
    const T gamma = in.gamma, lambda = in.lambda;
    Mat<T>&Sb = Xb.S, &Cb = Xb.C, &Gb = Xb.G;
    const Vec<T> Cg = A.C * g.transpose();
    Gb -= q * g;
    Cb += (A.S.transpose() * q + lambda * q) * g;
    Sb += q * Cg.transpose();
    gq = A.S * Cg + lambda * Cg - A.G * g.transpose() + Cb * v;
    const RowVec<T> a = k.transpose() * Cp;
    gk = gamma * (Gb * a.transpose()) + gamma * (Cp * (Gb.transpose() * k)) + (Sb + Sb.transpose()) * k;
    gv = Cb.transpose() * q;
    Sb *= gamma;
    Cb = gamma * Cb + gamma * k * (k.transpose() * Gb);
    Gb *= gamma * gamma;
  }
  void initial_gradient(const State& Xb, const StateMats<T>& X0, StateMats<T>& dstate) const {
    dstate[iS] = Xb.S + Xb.G * X0[iC].transpose();  // G0 = S0·C0 − F0
    dstate[iC] = Xb.C + X0[iS].transpose() * Xb.G;
    dstate[iF] = -Xb.G;
  }
};

template <class T> struct Hla3 {
  struct State {
    Mat<T> S, SQ, P, G;
  };
  struct Prev {
    Mat<T> S, SQ;
  };
  const Inputs<T>& in;
  size_t iS = 0, iP = 0, iF = 0;
  State zero(Index d, Index dv1) const { return {Mat<T>::Zero(d, d), Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv1), Mat<T>::Zero(d, dv1)}; }
  State initial(const BatchProblem& p, const StateMats<T>& X0) {
    iS = member(p, "S"), iP = member(p, "P"), iF = member(p, "F");
    return {X0[iS], Mat<T>::Zero(p.d, p.d), X0[iP], -X0[iF]};  // SQ0 = 0: G0 = −F0
  }
  Prev advance(State& X, Index t) const {
    const Vec<T> q = in.Q.row(t).transpose(), k = in.K.row(t).transpose();
    const T gamma = in.gamma;
    Prev pr{X.S, X.SQ};
    const Vec<T> a = X.SQ * k, c = X.S * a;
    X.S = gamma * X.S + k * k.transpose();
    X.SQ = gamma * X.SQ + q * q.transpose();
    X.P = gamma * X.P + k * in.V.row(t);
    X.G = gamma * gamma * gamma * X.G + gamma * k * (a.transpose() * X.P) + gamma * gamma * c * in.V.row(t);
    return pr;
  }
  RowVec<T> readout(const State& X, Index t) const {
    const RowVec<T> q = in.Q.row(t);
    return ((q * X.S) * X.SQ) * X.P - q * X.G;
  }
  void reverse(State& Xb, const State& A, const Prev& pr, Index t, const RowVec<T>& g, Vec<T>& gq, Vec<T>& gk, Vec<T>& gv) const {
    const Vec<T> q = in.Q.row(t).transpose(), k = in.K.row(t).transpose(), v = in.V.row(t).transpose();
    const T gamma = in.gamma;
    Mat<T>&Sb = Xb.S, &SQb = Xb.SQ, &Pb = Xb.P, &Gb = Xb.G;
    const RowVec<T> r1 = q.transpose() * A.S, r2 = r1 * A.SQ;
    const Vec<T> w2 = A.P * g.transpose(), w1 = A.SQ.transpose() * w2;
    Pb += r2.transpose() * g;
    SQb += r1.transpose() * w2.transpose();
    Sb += q * w1.transpose();
    gq = A.S * w1 - A.G * g.transpose();
    Gb -= q * g;
    const Vec<T> a = pr.SQ * k, c = pr.S * a;
    const RowVec<T> b1 = a.transpose() * A.P, bb = gamma * (k.transpose() * Gb);
    const Vec<T> cb = gamma * gamma * (Gb * v), ab = A.P * bb.transpose() + pr.S.transpose() * cb;
    Pb += a * bb;
    gk = gamma * (Gb * b1.transpose()) + pr.SQ.transpose() * ab + Pb * v + (Sb + Sb.transpose()) * k;
    gv = gamma * gamma * (Gb.transpose() * c) + Pb.transpose() * k;
    gq += (SQb + SQb.transpose()) * q;
    Sb = gamma * Sb + cb * a.transpose();
    SQb = gamma * SQb + ab * k.transpose();
    Pb *= gamma;
    Gb *= gamma * gamma * gamma;
  }
  void initial_gradient(const State& Xb, const StateMats<T>&, StateMats<T>& dstate) const {
    dstate[iS] = Xb.S, dstate[iP] = Xb.P, dstate[iF] = -Xb.G;
  }
};

template <template <class> class Model, class T>
void head(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index h, Index t0, Index t1,
          Mat<T>& dq, Mat<T>& dk, Mat<T>& dv, StateMats<T>& dstate) {
  const Index n = t1 - t0, d = p.d, dv1 = p.dv + 1, W = 64;
  const T eps = from_rational<T>(p.opt.eps), scale = from_rational<T>(p.opt.scale);
  const Inputs<T> in(p, b, h, t0, t1);
  Model<T> m{in};
  using State = typename Model<T>::State;
  using Prev = typename Model<T>::Prev;
  State X = m.zero(d, dv1);
  StateMats<T> X0;
  if (p.has_state()) {
    X0 = p.head_state<T>(p.sequence_of(b, t0), h);
    X = m.initial(p, X0);
  }
  std::vector<State> starts;
  Mat<T> Y(n, dv1);
  for (Index t = 0; t < n; ++t) {
    if (t % W == 0) starts.push_back(X);
    m.advance(X, t);
    Y.row(t) = m.readout(X, t);
  }
  // ∂L/∂Y from this order's own outputs (SPEC §9).
  Mat<T> dY(n, dv1);
  for (Index t = 0; t < n; ++t) {
    for (Index c = 0; c < p.dv; ++c) dY(t, c) = BatchProblem::convert(dout[p.out_index(b, h, t0 + t, c)], T());
    dY(t, p.dv) = dden.empty() ? T(0) : BatchProblem::convert(dden[p.den_index(b, h, t0 + t)], T());
    if (!p.opt.normalize) continue;
    const T D = normalizer(Y(t, p.dv), eps, p.opt.eps_mode);
    const T s = dY.row(t).head(p.dv).dot(Y.row(t).head(p.dv));
    dY.row(t).head(p.dv) /= D;
    using std::abs;
    if (!(p.opt.eps_mode == EpsMode::clamp && abs(Y(t, p.dv)) < eps)) dY(t, p.dv) -= s / (D * D);
  }
  dq = Mat<T>::Zero(n, d), dk = Mat<T>::Zero(n, d), dv = Mat<T>::Zero(n, dv1);
  State Xb = m.zero(d, dv1);
  for (Index c = static_cast<Index>(starts.size()) - 1; c >= 0; --c) {
    const Index c0 = c * W, L = std::min(W, n - c0);
    std::vector<State> tape;
    std::vector<Prev> prev;
    State Z = starts[static_cast<size_t>(c)];
    for (Index t = c0; t < c0 + L; ++t) {
      prev.push_back(m.advance(Z, t));
      tape.push_back(Z);
    }
    for (Index t = c0 + L - 1; t >= c0; --t) {
      Vec<T> gq, gk, gv;
      m.reverse(Xb, tape[static_cast<size_t>(t - c0)], prev[static_cast<size_t>(t - c0)], t, dY.row(t), gq, gk, gv);
      dq.row(t) = gq.transpose() * scale;
      dk.row(t) = gk.transpose();
      dv.row(t) = gv.transpose();
    }
  }
  if (!p.has_state()) return;
  dstate.assign(X0.size(), Mat<T>());
  for (size_t i = 0; i < X0.size(); ++i) dstate[i] = Mat<T>::Zero(X0[i].rows(), X0[i].cols());
  m.initial_gradient(Xb, X0, dstate);
}

template <class T> CandidateOutputs gradients(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) {
  CandidateOutputs out;
  out.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  out.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  out.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  out.dstate.assign(p.state.size(), 0);
  const std::vector<Task> tasks = group_tasks(p);
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {
    const Task& k = tasks[i];
    const Index L = k.t1 - k.t0, group = p.heads / p.kv_heads;
    Mat<T> sk = Mat<T>::Zero(L, p.d), sv = Mat<T>::Zero(L, p.dv + 1);
    for (Index j = 0; j < group; ++j) {
      const Index h = k.kvh * group + j;
      Mat<T> dq, dk, dv;
      StateMats<T> ds;
      if (p.opt.variant == Variant::hla3) head<Hla3, T>(p, dout, dden, k.b, h, k.t0, k.t1, dq, dk, dv, ds);
      else head<Hla2, T>(p, dout, dden, k.b, h, k.t0, k.t1, dq, dk, dv, ds);
      sk += dk, sv += dv;
      for (Index t = 0; t < L; ++t)
        for (Index c = 0; c < p.d; ++c) out.dq[p.q_index(k.b, h, k.t0 + t, c)] = static_cast<double>(dq(t, c));
      if (!p.has_state()) continue;
      const BatchProblem::StateView X = p.state_view(p.sequence_of(k.b, k.t0), h);
      for (size_t m = 0; m < ds.size(); ++m)
        for (Index a = 0; a < ds[m].rows(); ++a)
          for (Index c = 0; c < ds[m].cols(); ++c)
            out.dstate[X.start[m] + static_cast<size_t>(a * ds[m].cols() + c)] = static_cast<double>(ds[m](a, c));
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
  switch (prec) {
    case Precision::f64:
      return gradients<double>(p, dout, dden);
    case Precision::bf16:
      return gradients<bf16>(p, dout, dden);
    case Precision::f16:
      return gradients<f16>(p, dout, dden);
    default:
      return gradients<float>(p, dout, dden);  // f32 and the tensor-core precisions
  }
}

}  // namespace hla::engine
