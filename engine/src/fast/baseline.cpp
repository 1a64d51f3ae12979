// Our honest evaluation orders at scale (check.hpp fast_ours): the streaming
// recurrence and the chunked matmul form in the candidate's precision, by the
// fast engine's vectorized kernels, heads in parallel.
#include "hla/engine/orders.hpp"

#include "hla/bounds.hpp"
#include "hla/fast/streaming.hpp"
#include "hla/engine/detail.hpp"

#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

namespace hla::engine {
namespace {

template <class S> S input_as(double x, DType) {
  if constexpr (std::is_same_v<S, double>) return x;
  else if constexpr (std::is_same_v<S, fast::Emu<0>>) return S(static_cast<float>(x));  // RNE
  else if constexpr (std::is_same_v<S, fast::Emu<1>>) return S(static_cast<float>(round_to(DType::bf16, x)));
  else return S(static_cast<float>(round_to(DType::f16, x)));
}

template <class S>
void run_head(const BatchProblem& p, const BaselineForm& f, CandidateOutputs& out, DType out_dtype, Index b, Index h, Index t0, Index t1) {
  const Options& o = p.opt;
  auto q_at = [&](Index t, Index c) { return input_as<S>(p.q[p.q_index(b, h, t0 + t, c)], p.dtype); };
  auto k_at = [&](Index t, Index c) { return input_as<S>(p.k[p.k_index(b, h, t0 + t, c)], p.dtype); };
  auto v_at = [&](Index t, Index c) { return input_as<S>(p.v[p.v_index(b, h, t0 + t, c)], p.dtype); };
  // The streaming orders; from an initial state they run as chunks of one
  // token (the corrected-state recurrence), since streaming_head has no carry.
  const bool one_token = f.form == Form::streaming || f.form == Form::streaming_paper_state;
  fast::FastHead<S> fh = fast::make_fast_head<S>(o, t1 - t0, p.d, p.dv, q_at, k_at, v_at, one_token ? 1 : f.chunk);
  const BatchProblem::StateView X0 = p.state_of(b, h, t0);
  fast::set_initial_carry(fh, X0.layout, [&](size_t i, Index r, Index c) { return input_as<S>(X0.at(i, r, c), p.state_dtype); });
  if (f.log_along != LogAlong::none) fast::set_log_decay(fh, o.gamma, f.log_along == LogAlong::rounded_once);
  const fast::Dense<S> Y =
      one_token && !p.has_state() ? fast::streaming_head(fh, f.form == Form::streaming_paper_state) : fast::evaluate_head(fh).val;
  using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
  constexpr int K = std::is_same_v<S, fast::Emu<1>> ? 1 : std::is_same_v<S, fast::Emu<2>> ? 2 : 0;
  auto rnd = [](T x) -> T {
    if constexpr (std::is_same_v<T, double>) return x;
    else return fast::emu_round<K>(x);
  };
  T eps = 0;
  if constexpr (std::is_same_v<S, double>) eps = from_rational<double>(o.eps);
  else eps = fast::emu_from_rational<S>(o.eps);
  for (Index t = t0; t < t1; ++t) {
    const Index lt = t - t0;
    const T den = static_cast<T>(Y.at(lt, p.dv));
    out.den[p.den_index(b, h, t)] = round_to(out_dtype, static_cast<double>(den));
    // SPEC §1 normalization as finish() does it, every operation rounded.
    T div = 1;
    if (o.normalize) div = o.eps_mode == EpsMode::add ? rnd(den + eps) : normalizer(den, eps, o.eps_mode);
    for (Index c = 0; c < p.dv; ++c) {
      const T num = static_cast<T>(Y.at(lt, c));
      const T v = o.normalize ? rnd(num / div) : num;
      out.out[p.out_index(b, h, t, c)] = round_to(out_dtype, static_cast<double>(v));
    }
  }
}

// Head (b, h)'s final state by form f in S, into `state` (laid out as BatchProblem::state).
template <class S>
void state_head(const BatchProblem& p, const BaselineForm& f, std::vector<double>& state, Index b, Index h, Index t0, Index t1) {
  auto at = [&](const std::vector<double>& x, size_t (BatchProblem::*index)(Index, Index, Index, Index) const) {
    return [&, index](Index t, Index c) { return input_as<S>(x[(p.*index)(b, h, t0 + t, c)], p.dtype); };
  };
  const bool one_token = f.form == Form::streaming;
  fast::FastHead<S> fh = fast::make_fast_head<S>(p.opt, t1 - t0, p.d, p.dv, at(p.q, &BatchProblem::q_index),
                                                 at(p.k, &BatchProblem::k_index), at(p.v, &BatchProblem::v_index), one_token ? 1 : f.chunk);
  fh.full_carry = true;
  const BatchProblem::StateView X0 = p.state_of(b, h, t0);
  fast::set_initial_carry(fh, X0.layout, [&](size_t i, Index r, Index c) { return input_as<S>(X0.at(i, r, c), p.state_dtype); });
  if (f.log_along != LogAlong::none) fast::set_log_decay(fh, p.opt.gamma, f.log_along == LogAlong::rounded_once);
  std::vector<fast::Dense<S>> X;
  if (f.form == Form::streaming_paper_state) X = fast::paper_state_final(fh);
  else
    for (fast::BMat<S>& m : fast::final_carry(fh)) X.push_back(std::move(m.val));
  p.for_each_state_entry(p.sequence_of(b, t0), h, [&](size_t i, Index r, Index c, size_t at) {
    if (i < X.size()) state[at] = static_cast<double>(X[i].at(r, c));
  });
}

// run(S(), b, h, t0, t1) for every head and sequence of p, heads in parallel, S the engine's scalar for prec.
template <class Run> void each_head_in(const BatchProblem& p, Precision prec, Run&& run) {
  struct Task {
    Index b, h, t0, t1;
  };
  std::vector<Task> tasks;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { tasks.push_back({b, h, t0, t1}); });
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {
    const Task& t = tasks[i];
    const fast::OperandRounding operands(operand_format(prec));
    switch (prec) {
      case Precision::f64:
        return run(double(), t.b, t.h, t.t0, t.t1);
      case Precision::f32:
      case Precision::tf32:  // tensor-core precisions: our orders in f32
      case Precision::bf16_f32:
      case Precision::f16_f32:
        return run(fast::Emu<0>(), t.b, t.h, t.t0, t.t1);
      case Precision::bf16:
        return run(fast::Emu<1>(), t.b, t.h, t.t0, t.t1);
      case Precision::f16:
        return run(fast::Emu<2>(), t.b, t.h, t.t0, t.t1);
    }
  });
}

}  // namespace

std::vector<double> fast_ours_state(const BatchProblem& p, Precision prec, const BaselineForm& f) {
  if (!fast_baseline_applies(p, f, true) || (f.form == Form::streaming_paper_state && !p.opt.masked))
    throw std::logic_error("fast_ours_state: not a form the fast engine evaluates");
  std::vector<double> state(static_cast<size_t>(p.sequence_count() * p.heads * state_size(state_layout(p.opt, p.d, p.dv))), 0);
  each_head_in(p, prec, [&](auto s, Index b, Index h, Index t0, Index t1) { state_head<decltype(s)>(p, f, state, b, h, t0, t1); });
  return state;
}

bool fast_baseline_applies(const BatchProblem& p, const BaselineForm& f, bool known_finite) {
  if (!fast::supports(p.opt.variant) || (!known_finite && !p.all_finite())) return false;
  if (f.log_decay) return f.form == Form::chunked_matmul && f.log_along != LogAlong::none;  // the engine's decay in log space
  return f.form == Form::streaming || f.form == Form::chunked_matmul ||
         (f.form == Form::streaming_paper_state && p.opt.variant == Variant::hla2);  // the engine's paper state is hla2's
}

CandidateOutputs fast_ours(const BatchProblem& p, Precision prec, const BaselineForm& f, DType out_dtype) {
  if (!fast_baseline_applies(p, f, true)) throw std::logic_error("fast_ours: not a form the fast engine evaluates");
  CandidateOutputs out{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                       std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), out_dtype, out_dtype};
  each_head_in(p, prec, [&](auto s, Index b, Index h, Index t0, Index t1) { run_head<decltype(s)>(p, f, out, out_dtype, b, h, t0, t1); });
  return out;
}

}  // namespace hla::engine
