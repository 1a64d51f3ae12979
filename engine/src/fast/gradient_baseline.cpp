// Our backward orders at scale in a candidate's precision (gradient
// baselines, rule 3; gradient_internal.hpp fast_ours_gradients): the fast
// engine's chunked backward in double or an emulated precision (every product
// and sum rounded as Eigen's bfloat16/half round it), the normalized
// upstream [do/D | dden − ⟨do, num⟩/D²] formed from its own forward in that
// precision, heads × sequences in parallel.
#include "hla/engine/gradient_groups.hpp"

#include "hla/fast/backward.hpp"

namespace hla::engine {
namespace {

template <class S> using Real = std::conditional_t<std::is_same_v<S, double>, double, float>;
template <class S> constexpr int kKind = std::is_same_v<S, fast::Emu<1>> ? 1 : std::is_same_v<S, fast::Emu<2>> ? 2 : 0;

// x rounded to S (an exact input of dtype `from`: f32 and wider as given).
template <class S> Real<S> input_as(double x) {
  if constexpr (std::is_same_v<S, double>) return x;
  else if constexpr (kKind<S> == 1) return static_cast<float>(round_to(DType::bf16, x));
  else if constexpr (kKind<S> == 2) return static_cast<float>(round_to(DType::f16, x));
  else return static_cast<float>(x);
}
template <class S> Real<S> rnd(Real<S> x) {
  if constexpr (std::is_same_v<S, double>) return x;
  else return fast::emu_round<kKind<S>>(x);
}

template <class S> S scalar(Real<S> x) {
  if constexpr (std::is_same_v<S, double>) return x;
  else return S(x);
}

template <class S> fast::FastHead<S> head_in(const BatchProblem& p, Index b, Index h, Index t0, Index t1, Index chunk, LogAlong along) {
  auto at = [&](const std::vector<double>& x, auto index) {
    return [&x, index](Index t, Index c) { return scalar<S>(input_as<S>(x[index(t, c)])); };
  };
  fast::FastHead<S> fh =
      fast::make_fast_head<S>(p.opt, t1 - t0, p.d, p.dv, at(p.q, [&](Index t, Index c) { return p.q_index(b, h, t0 + t, c); }),
                              at(p.k, [&](Index t, Index c) { return p.k_index(b, h, t0 + t, c); }),
                              at(p.v, [&](Index t, Index c) { return p.v_index(b, h, t0 + t, c); }), chunk, false);
  const BatchProblem::StateView X0 = p.state_of(b, h, t0);
  fast::set_initial_carry(fh, X0.layout, [&](size_t i, Index r, Index c) { return scalar<S>(input_as<S>(X0.at(i, r, c))); });
  if (along != LogAlong::none) fast::set_log_decay(fh, p.opt.gamma, along == LogAlong::rounded_once);
  return fh;
}

// ∂L/∂Y in S from the forward's rows (SPEC §9 output_adjoint), every operation rounded.
template <class S>
fast::BMat<S> upstream_in(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index h,
                          Index t0, Index t1, const fast::HeadResult<S>* Y) {
  using T = Real<S>;
  const Index n = t1 - t0, dv = p.dv;
  fast::Dense<S> G = fast::Dense<S>::zero(n, dv + 1);
  T eps = 0;
  if constexpr (std::is_same_v<S, double>) eps = from_rational<double>(p.opt.eps);
  else eps = fast::emu_from_rational<S>(p.opt.eps);
  for (Index t = 0; t < n; ++t) {
    const T dd = dden.empty() ? T(0) : input_as<S>(dden[p.den_index(b, h, t0 + t)]);
    if (!p.opt.normalize) {
      for (Index c = 0; c < dv; ++c) G.at(t, c) = input_as<S>(dout[p.out_index(b, h, t0 + t, c)]);
      G.at(t, dv) = dd;
      continue;
    }
    const T den = static_cast<T>(Y->val.at(t, dv));
    const T D = p.opt.eps_mode == EpsMode::add ? rnd<S>(den + eps) : normalizer(den, eps, p.opt.eps_mode);
    const bool flat = p.opt.eps_mode == EpsMode::clamp && std::fabs(den) < eps;
    T s = 0;
    for (Index c = 0; c < dv; ++c) {
      const T g = input_as<S>(dout[p.out_index(b, h, t0 + t, c)]);
      G.at(t, c) = rnd<S>(g / D);
      s = rnd<S>(s + rnd<S>(g * static_cast<T>(Y->val.at(t, c))));
    }
    G.at(t, dv) = flat ? dd : rnd<S>(dd - rnd<S>(s / rnd<S>(D * D)));
  }
  return fast::exact_input(std::move(G), false);
}

template <class S>
void run_task(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index chunk, LogAlong along,
              const Task& k, CandidateOutputs& out) {
  using T = Real<S>;
  const Index L = k.t1 - k.t0, group = p.heads / p.kv_heads;
  std::vector<T> dk(static_cast<size_t>(L * p.d), 0), dv(static_cast<size_t>(L * p.dv), 0);
  for (Index i = 0; i < group; ++i) {
    const Index h = k.kvh * group + i;
    const fast::FastHead<S> fh = head_in<S>(p, k.b, h, k.t0, k.t1, chunk, along);
    const fast::Tape<S> tp = fast::forward_tape(fh, p.opt.normalize);
    const fast::HeadGradient<S> r = fast::backward_head(fh, tp, upstream_in<S>(p, dout, dden, k.b, h, k.t0, k.t1, &tp.outputs));
    for (Index t = 0; t < L; ++t) {
      for (Index c = 0; c < p.d; ++c) {
        out.dq[p.q_index(k.b, h, k.t0 + t, c)] = static_cast<T>(r.dq.val.at(t, c));
        T& x = dk[static_cast<size_t>(t * p.d + c)];
        x = rnd<S>(x + static_cast<T>(r.dk.val.at(t, c)));
      }
      for (Index c = 0; c < p.dv; ++c) {
        T& x = dv[static_cast<size_t>(t * p.dv + c)];
        x = rnd<S>(x + static_cast<T>(r.dv.val.at(t, c)));
      }
    }
    if (!p.has_state()) continue;
    const BatchProblem::StateView X = p.state_view(p.sequence_of(k.b, k.t0), h);
    for (size_t m = 0; m < r.dstate.size(); ++m)
      for (Index a = 0; a < r.dstate[m].rows(); ++a)
        for (Index c = 0; c < r.dstate[m].cols(); ++c)
          out.dstate[X.start[m] + static_cast<size_t>(a * r.dstate[m].cols() + c)] = static_cast<T>(r.dstate[m].val.at(a, c));
  }
  for (Index t = 0; t < L; ++t) {
    for (Index c = 0; c < p.d; ++c) out.dk[kv_at(p, k.b, k.kvh, k.t0 + t, c, p.d)] = dk[static_cast<size_t>(t * p.d + c)];
    for (Index c = 0; c < p.dv; ++c) out.dv[kv_at(p, k.b, k.kvh, k.t0 + t, c, p.dv)] = dv[static_cast<size_t>(t * p.dv + c)];
  }
}

}  // namespace

CandidateOutputs fast_ours_gradients(const BatchProblem& p, Precision prec, const std::vector<double>& dout,
                                     const std::vector<double>& dden, Index chunk, LogAlong along) {
  CandidateOutputs out;
  out.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  out.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  out.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  out.dstate.assign(p.state.size(), 0);
  const std::vector<Task> tasks = group_tasks(p);
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {
    const fast::OperandRounding operands(operand_format(prec));
    switch (prec) {
      case Precision::f64:
        run_task<double>(p, dout, dden, chunk, along, tasks[i], out);
        break;
      case Precision::f32:
      case Precision::tf32:  // tensor-core precisions: our orders in f32
      case Precision::bf16_f32:
      case Precision::f16_f32:
        run_task<fast::Emu<0>>(p, dout, dden, chunk, along, tasks[i], out);
        break;
      case Precision::bf16:
        run_task<fast::Emu<1>>(p, dout, dden, chunk, along, tasks[i], out);
        break;
      case Precision::f16:
        run_task<fast::Emu<2>>(p, dout, dden, chunk, along, tasks[i], out);
        break;
    }
  });
  return out;
}

}  // namespace hla::engine
