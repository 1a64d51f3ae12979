// Gradients in the check layer (gradient.hpp; SPEC §9): the reference, the
// verdict on a candidate's dq, dk, dv, and the proof that stored gradients
// belong to their inputs. The algebra is the reference's (hla/backward.hpp).
#include "hla/check/gradient.hpp"

#include "hla/backward.hpp"
#include "hla/bounds.hpp"
#include "hla/evaluate.hpp"
#include "hla/exact.hpp"
#include "gradient_internal.hpp"
#include "hla/fast/engine.hpp"
#include "internal.hpp"

#include <algorithm>
#include <tuple>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <stdexcept>

namespace hla::check {

double backward_depth_bound(Variant v, Index n, Index d, Index dv) { return depth_bound(v, n, d) + static_cast<double>(dv + 1); }
double quotient_depth_bound(Variant v, Index n, Index d, Index dv) { return depth_bound(v, n, d) + static_cast<double>(dv + 4); }
double gradient_depth_bound(const Options& o, Index n, Index d, Index dv) {
  return backward_depth_bound(o.variant, n, d, dv) + (o.normalize ? quotient_depth_bound(o.variant, n, d, dv) : 0.0);
}

namespace {

// The backward of a head: the reference library's in S; exact ones (Rational)
// by the fast exact engine (hla/exact.hpp), the same rationals.
template <class S> struct BackwardEngine {
  template <class... A> static auto grad(const A&... a) { return backward(a...); }
  template <class... A> static auto mag(const A&... a) { return backward_magnitude(a...); }
  template <class... A> static auto grad_from(const A&... a) { return backward_from(a...); }
  template <class... A> static auto mag_from(const A&... a) { return backward_magnitude_from(a...); }
};
template <> struct BackwardEngine<Rational> {
  template <class... A> static auto grad(const A&... a) { return exact::backward(a...); }
  template <class... A> static auto mag(const A&... a) { return exact::backward_magnitude(a...); }
  template <class... A> static auto grad_from(const A&... a) { return exact::backward_from(a...); }
  template <class... A> static auto mag_from(const A&... a) { return exact::backward_magnitude_from(a...); }
};

template <class S>
GroupGradient<S> group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index kvh,
                                Index t0, Index t1, BackwardForm form = BackwardForm::streaming, Index chunk = 16, bool magnitudes = true,
                                bool log_decay = false) {
  const Index L = t1 - t0, group = p.heads / p.kv_heads;
  GroupGradient<S> g;
  g.dk = g.mdk = Mat<S>::Zero(L, p.d);
  g.dv = g.mdv = Mat<S>::Zero(L, p.dv);
  for (Index h = kvh * group; h < (kvh + 1) * group; ++h) {
    const Problem<S> ph = p.head<S>(b, h, t0, t1);
    Mat<S> up(L, p.dv);
    Vec<S> dd = Vec<S>::Zero(L);
    for (Index t = 0; t < L; ++t) {
      for (Index c = 0; c < p.dv; ++c) up(t, c) = BatchProblem::convert(dout[p.out_index(b, h, t0 + t, c)], S());
      if (!dden.empty()) dd(t) = BatchProblem::convert(dden[p.den_index(b, h, t0 + t)], S());
    }
    GradientFrom<S> x, m;
    using E = BackwardEngine<S>;
    if (p.has_state()) {  // the continued sequence and ∂L/∂X0
      const StateMats<S> X0 = p.head_state<S>(p.sequence_of(b, t0), h);
      x = E::grad_from(ph, X0, up, dd, form, chunk);
      if (magnitudes) m = E::mag_from(ph, X0, up, dd);
    } else {
      if constexpr (is_exact_v<S>) x.tokens = E::grad(ph, up, dd, form, chunk);
      else x.tokens = E::grad(ph, up, dd, form, chunk, log_decay);
      if (magnitudes) m.tokens = E::mag(ph, up, dd);
    }
    g.dq.push_back(x.tokens.dq);
    g.dk += x.tokens.dk, g.dv += x.tokens.dv;
    g.dstate.push_back(std::move(x.dstate));
    if (!magnitudes) continue;
    g.mdq.push_back(m.tokens.dq);
    g.mdk += m.tokens.dk, g.mdv += m.tokens.dv;
    g.mdstate.push_back(std::move(m.dstate));
  }
  return g;
}

const std::vector<double>& scale_of(const GradientScale& s, int tensor) { return tensor == 0 ? s.q : tensor == 3 ? s.state : s.kv; }

// "dstate.<part>[sequence,head,row(,column)]" of entry `at` of a state's gradient (BatchProblem::state layout).
struct StateEntry {
  std::string part;
  Index seq, h, r, c;  // c = -1: a denominator part (one column)
};
StateEntry state_entry(const BatchProblem& p, size_t at) {
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  const size_t size = static_cast<size_t>(state_size(layout));
  size_t off = at % size;
  StateEntry e{"", static_cast<Index>(at / size / static_cast<size_t>(p.heads)), static_cast<Index>(at / size % static_cast<size_t>(p.heads)), 0, 0};
  for (const StatePart& m : layout) {
    if (off < static_cast<size_t>(m.size())) {
      e.r = static_cast<Index>(off) / m.width();
      const Index c = static_cast<Index>(off) % m.width();
      e.part = c == m.cols ? m.ones : m.name;
      e.c = c == m.cols ? -1 : c;
      return e;
    }
    off -= static_cast<size_t>(m.size());
  }
  return e;
}
std::string where_of(const StateEntry& e) {
  return "dstate." + e.part + "[" + std::to_string(e.seq) + "," + std::to_string(e.h) + "," + std::to_string(e.r) +
         (e.c < 0 ? "" : "," + std::to_string(e.c)) + "]";
}

// The magnitudes that the streaming forward's error scales with (the
// unmasked-order ones where it subtracts partial sums).
struct ErrMags {
  const std::vector<double>& num;
  const std::vector<double>& den;
};
ErrMags streaming_error_magnitudes(const BatchProblem& p, const Reference& r) {
  if (subtracts_partial_sums(p.opt, Form::streaming) && has_state_difference_magnitude(p.opt)) return {r.mag_num_sd, r.mag_den_sd};
  return {r.mag_num, r.mag_den};
}

}  // namespace

GradientScale gradient_scale(const BatchProblem& p, const std::vector<double>& den, const std::vector<double>& mag_num,
                             const std::vector<double>& mnum_err, const std::vector<double>& mden_err, double u) {
  GradientScale s{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n), 1.0),
                  std::vector<double>(static_cast<size_t>(p.batch * p.kv_heads * p.n), 1.0),
                  std::vector<double>(static_cast<size_t>(p.sequence_count() * p.heads), 1.0)};
  if (!p.opt.normalize) return s;
  const Index L = longest_sequence(p);
  const double Kb = backward_depth_bound(p.opt.variant, L, p.d, p.dv), Kq = quotient_depth_bound(p.opt.variant, L, p.d, p.dv);
  const double Ku = depth_bound(p.opt.variant, L, p.d) * u;
  std::fill(s.kv.begin(), s.kv.end(), 0.0);
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    double kappa = 0;  // the largest κ_t over t ≥ x, x running down
    for (Index t = t1 - 1; t >= t0; --t) {
      const size_t di = p.den_index(b, h, t), oi = p.out_index(b, h, t, 0);
      kappa = std::max(kappa, token_kappa(p.opt, den[di], mden_err[di], &mag_num[oi], &mnum_err[oi], p.dv, Ku));
      s.q[di] = (Kb + Kq * kappa) / (Kb + Kq);
      double& kv = s.kv[kv_row(p, b, p.kv_head_of(h), t)];
      kv = std::max(kv, s.q[di]);
    }
    if (t1 > t0) s.state[static_cast<size_t>(p.sequence_of(b, t0) * p.heads + h)] = s.q[p.den_index(b, h, t0)];
  });
  return s;
}

// Our backward form in scalar S on every group and sequence, rounded to `out`.
template <class S>
void gradients_in(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form, Index chunk,
                  DType out, CandidateOutputs& c, bool log_decay = false) {
  p.validate();
  if (!has_backward_form(p.opt.variant, form))
    throw InputError("variant " + to_string(p.opt.variant) + " has no backward form " + to_string(form));
  c.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  c.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  c.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  c.dq_dtype = c.dk_dtype = c.dv_dtype = c.dstate_dtype = out;
  c.dstate.assign(p.state.size(), 0);
  c.dstate_parts.clear();
  if (p.has_state())
    for (const StatePart& m : state_layout(p.opt, p.d, p.dv))
      if (m.role != StatePart::Role::unused)
        for (const std::string& name : {m.name, m.ones})
          if (!name.empty()) c.dstate_parts.push_back(name);
  std::vector<double>* values[] = {&c.dq, &c.dk, &c.dv, &c.dstate};
  const std::vector<Task> tasks = group_tasks(p);
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {  // tasks write disjoint elements
    const Task& k = tasks[i];
    for_each_element(p, k, group_gradient<S>(p, dout, dden, k.b, k.kvh, k.t0, k.t1, form, chunk, false, log_decay),
                     [&](int w, size_t at, const S& v, const S&, size_t) { (*values[w])[at] = round_to(out, static_cast<double>(v)); });
  });
}

// The gradients of a problem with reversed features (with_reversed_features)
// as gradients of p: dq's and dk's columns and the state's features back.
CandidateOutputs unreversed(const BatchProblem& p, CandidateOutputs c) {
  for (auto* x : {&c.dq, &c.dk})
    for (size_t row = 0; row < x->size(); row += static_cast<size_t>(p.d))
      std::reverse(x->begin() + static_cast<std::ptrdiff_t>(row), x->begin() + static_cast<std::ptrdiff_t>(row) + p.d);
  if (p.has_state() && !c.dstate.empty()) reverse_state_features(p, c.dstate);
  return c;
}

// Rule 3's yardsticks (SPEC §9): our own backward forms in the candidate's
// precision and class, named. On small problems in f32 or f64 the reference
// library's streaming, chunked/16 and chunked_matmul/64 backwards (in float,
// double); at every size and precision the fast engine's chunked backward
// at widths 16 and 64 and at 64 with reversed features (every dot product
// summed in the opposite order). Each forms a normalized upstream from its own
// forward, in that precision.
std::vector<std::pair<std::string, CandidateOutputs>> gradient_baselines(const BatchProblem& p, const GradientReference& g, Precision prec,
                                                                         FormClass cls,
                                                                         std::vector<std::pair<std::string, CandidateOutputs>>* masked_done) {
  std::vector<std::pair<std::string, CandidateOutputs>> out;
  // The state-difference class: our own subtracting backward (hla2's paper
  // state, S·C − G), also with reversed features, whose honest error the
  // cancellation of unmasked terms makes 10-50x the masked orders' (measured
  // on a correct autograd through S·C − G: tests/falarm).
  const bool sd = cls == FormClass::state_difference && info(p.opt.variant).forms.has(Form::streaming_paper_state) && p.opt.masked &&
                  !p.has_state() &&
                  (prec == Precision::f32 || prec == Precision::tf32 || prec == Precision::f64);
  if (sd) {
    out.emplace_back("paper state (S*C - G)", paper_state_gradients(p, prec, g.dout, g.dden));
    out.emplace_back("paper state (S*C - G), reversed features",
                     unreversed(p, paper_state_gradients(with_reversed_features(p), prec, g.dout, g.dden)));
  }
  if (masked_done) {  // the rest does not depend on the class
    std::move(masked_done->begin(), masked_done->end(), std::back_inserter(out));
    masked_done->clear();
    return out;
  }
  // Decay in log space (exp of a cumulative sum of log γ per chunk, as
  // production chunk kernels and autograd through them form it), at γ < 1,
  // in the chunked forms; one chunk: per sequence.
  std::vector<std::tuple<BackwardForm, Index, bool>> forms{
      {BackwardForm::streaming, 16, false}, {BackwardForm::chunked, 16, false}, {BackwardForm::chunked_matmul, 64, false}};
  if (p.opt.gamma != 1 && !p.has_state()) {
    for (const Index w : {Index(16), Index(64), std::max<Index>(longest_sequence(p), 1)})
      forms.emplace_back(BackwardForm::chunked_matmul, w, true);
    // The literal sums' backward, per sequence, on small heads (every variant has it; hla3 no chunked one).
    if (std::pow(static_cast<double>(longest_sequence(p)), order_of(p.opt.variant) + 1) * p.d <= std::ldexp(1.0, 27))
      forms.emplace_back(BackwardForm::naive, 1, true);
  }
  if ((prec == Precision::f32 || prec == Precision::f64) && !fast_baseline_wanted(p))
    for (const auto& [form, chunk, lg] : forms) {
      if (!has_backward_form(p.opt.variant, form)) continue;
      CandidateOutputs c;
      if (prec == Precision::f32) gradients_in<float>(p, g.dout, g.dden, form, chunk, DType::f64, c, lg);
      else gradients_in<double>(p, g.dout, g.dden, form, chunk, DType::f64, c, lg);
      out.emplace_back(to_string(form) +
                           (form == BackwardForm::streaming || form == BackwardForm::naive ? "" : "/" + std::to_string(chunk)) +
                           (lg ? " (log-space decay)" : ""),
                       std::move(c));
    }
  if (!fast::supports(p.opt.variant)) return out;
  for (const Index w : {Index(16), Index(64)})
    out.emplace_back("engine chunked/" + std::to_string(w), fast_ours_gradients(p, prec, g.dout, g.dden, w));
  out.emplace_back("engine chunked/64 reversed features", unreversed(p, fast_ours_gradients(with_reversed_features(p), prec, g.dout, g.dden, 64)));
  return out;
}

namespace {
// Throws InputError unless the problem has a backward, the upstream do and
// dden (or none) are finite values of the problem's dtype in its shapes, and
// the forward reference is of the problem's shape.
void check_upstream(const BatchProblem& p, const Reference& forward, const std::vector<double>& dout, const std::vector<double>& dden) {
  p.validate();  // finite inputs: a gradient fixture's reference is finite
  if (!has_backward(p.opt.variant))
    throw InputError("variant " + to_string(p.opt.variant) + " has no backward form (SPEC §9): no gradients for it");
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  if (dout.size() != no) throw InputError("upstream do holds " + std::to_string(dout.size()) + " values, expected " + std::to_string(no) + " = batch·heads·n·dv");
  if (!dden.empty() && dden.size() != nd)
    throw InputError("upstream dden holds " + std::to_string(dden.size()) + " values, expected " + std::to_string(nd) + " = batch·heads·n");
  for (const auto& [name, x] : {std::pair{"do", &dout}, {"dden", &dden}})
    for (size_t i = 0; i < x->size(); ++i) {
      const double e = (*x)[i];
      if (!std::isfinite(e)) throw InputError(std::string("upstream ") + name + "[" + std::to_string(i) + "] = " + num(e) + " is not finite");
      if (round_to(p.dtype, e) != e)
        throw InputError(std::string("upstream ") + name + "[" + std::to_string(i) + "] = " + num(e) + " is not representable in " + to_string(p.dtype));
    }
  if (forward.den.size() != nd || forward.mag_den.size() != nd) throw InputError("the forward reference does not match the problem's shape");
}

// A gradient reference for upstream dout, dden with every tensor sized for p and zero.
GradientReference zero_gradients(const BatchProblem& p, std::vector<double> dout, std::vector<double> dden) {
  GradientReference g;
  g.dout = std::move(dout);
  g.dden = std::move(dden);
  const size_t nq = static_cast<size_t>(p.batch * p.heads * p.n * p.d), nk = static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d),
               nv = static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv);
  g.dq.assign(nq, 0), g.mag_dq.assign(nq, 0), g.dq_flags.assign(nq, 0);
  g.dk.assign(nk, 0), g.mag_dk.assign(nk, 0), g.dk_flags.assign(nk, 0);
  g.dv.assign(nv, 0), g.mag_dv.assign(nv, 0), g.dv_flags.assign(nv, 0);
  const size_t ns = p.state.size();  // 0 without a state
  g.dstate.assign(ns, 0), g.mag_dstate.assign(ns, 0), g.dstate_flags.assign(ns, 0);
  return g;
}
}  // namespace

GradientReference compute_gradient_reference(const BatchProblem& p, const Reference& forward, std::vector<double> dout,
                                             std::vector<double> dden, const GradientOptions& opt) {
  check_upstream(p, forward, dout, dden);
  GradientReference g = zero_gradients(p, std::move(dout), std::move(dden));
  const bool exact = forward.bits == 0;
  g.bits = exact ? 0 : 113;
  // The binary128 error bound per element: 2·2^-113·(K_b + K_q·κ_x)·M_g = 2^-112·K_g·scale·M_g.
  Reference completed = forward;
  if (!is_complete(completed)) complete_reference(p, completed);
  const ErrMags em = streaming_error_magnitudes(p, completed);
  const GradientScale sc = gradient_scale(p, completed.den, completed.mag_num, em.num, em.den, 0x1p-112);
  const double Kg = gradient_depth_bound(p.opt, longest_sequence(p), p.d, p.dv);
  const std::vector<Task> tasks = group_tasks(p);
  std::mutex mu;
  std::vector<double>* values[] = {&g.dq, &g.dk, &g.dv, &g.dstate};
  std::vector<double>* mags[] = {&g.mag_dq, &g.mag_dk, &g.mag_dv, &g.mag_dstate};
  std::vector<uint8_t>* flags[] = {&g.dq_flags, &g.dk_flags, &g.dv_flags, &g.dstate_flags};
  auto store_exact = [&](const GroupGradient<Rational>& x, const Task& k) {
    for_each_element(p, k, x, [&](int w, size_t at, const Rational& v, const Rational& m, size_t) {
      (*values[w])[at] = to_double(v), (*mags[w])[at] = to_double(m);
    });
  };
  auto store_f113 = [&](const GroupGradient<f113>& x, const Task& k) {
    for_each_element(p, k, x, [&](int w, size_t at, const f113& v, const f113& m, size_t row) {
      const double scale = scale_of(sc, w)[row];
      (*values[w])[at] = static_cast<double>(v), (*mags[w])[at] = static_cast<double>(m);
      if (!std::isfinite(scale)) (*flags[w])[at] = kUncertified | kIllConditioned;
      else if (!certifies(v, f113(0x1p-112) * f113(Kg * scale) * m)) (*flags[w])[at] = kUncertified;
    });
  };
  // The double-double engine's values, magnitudes and flags of a task; whether any element is uncertified.
  auto store_fast = [&](const GroupGradient<double>& x, const GroupGradient<double>& fl, const Task& k) {
    std::vector<uint8_t> bits;
    for_each_element(p, k, fl, [&](int, size_t, double f, double, size_t) { bits.push_back(static_cast<uint8_t>(f)); });
    size_t i = 0;
    bool any = false;
    for_each_element(p, k, x, [&](int w, size_t at, double v, double m, size_t) {
      const uint8_t f = bits[i++];
      (*values[w])[at] = v, (*mags[w])[at] = m, (*flags[w])[at] = f;
      any = any || f != 0;
    });
    return any;
  };
  // Exact rationals stay single-threaded (small heads), like the forward's.
  parallel_for(tasks.size(), exact ? 1 : worker_threads(), [&](size_t i) {
    const Task& k = tasks[i];
    if (exact) {
      try {
        store_exact(group_gradient<Rational>(p, g.dout, g.dden, k.b, k.kvh, k.t0, k.t1), k);
        return;
      } catch (const std::domain_error&) {  // den + ε = 0 exactly: binary128 flags it
        std::lock_guard lock(mu);
        g.bits = 113;
      }
    } else if (opt.fast) {
      GroupGradient<double> x, fl;
      if (fast_group_gradient(p, g.dout, g.dden, completed.den, k.b, k.kvh, k.t0, k.t1, opt.chunk, x, fl)) {
        const bool uncertified = store_fast(x, fl, k);
        // Uncertified elements: the whole task again in binary128 where that is cheap (tokens·d·(d + dv) per head, as the forward's).
        const double work = static_cast<double>(k.t1 - k.t0) * p.d * (p.d + p.dv) * static_cast<double>(p.heads / p.kv_heads);
        if (!uncertified || work > opt.recompute_work) return;
      }
    }
    store_f113(group_gradient<f113>(p, g.dout, g.dden, k.b, k.kvh, k.t0, k.t1), k);
  });
  for (const auto* f : {&g.dq_flags, &g.dk_flags, &g.dv_flags, &g.dstate_flags})
    for (uint8_t x : *f) g.uncertified += (x & kUncertified) != 0;
  return g;
}

// Whether the gradients of an exact-tier case (SPEC §7: integer inputs, no
// decay, scaling or normalization) are exact in any order too (SPEC §9): an
// exact reference, integer upstream, no state, and every intermediate of any
// honest backward form exactly representable in f32 — bounded by the
// magnitudes (forward and backward) of the same-shaped problem whose every
// input and upstream entry is the largest |entry| (at least 1): each
// intermediate sums a subset of terms each at most the largest term there.
bool gradient_exact_tier(const BatchProblem& p, const GradientReference& g) {
  if (g.bits != 0 || p.has_state() || p.opt.normalize) return false;
  double top = 1, up = 1;
  for (const auto* x : {&p.q, &p.k, &p.v})
    for (double e : *x) top = std::max(top, std::fabs(e));
  for (const auto* x : {&g.dout, &g.dden})
    for (double e : *x) {
      if (e != std::trunc(e)) return false;
      up = std::max(up, std::fabs(e));
    }
  const Index n = longest_sequence(p);
  Problem<double> u{p.opt, Mat<double>::Constant(n, p.d, top), Mat<double>::Constant(n, p.d, top), Mat<double>::Constant(n, p.dv, top)};
  u.opt.lambda = abs(p.opt.lambda);
  const Output<double> fm = magnitude(u, true);
  const Mat<double> dout = Mat<double>::Constant(n, p.dv, up);
  const Vec<double> dden = Vec<double>::Constant(n, g.dden.empty() ? 0.0 : up);
  const Gradient<double> gm = backward_magnitude(u, dout, dden);
  // λ = 1/2^k makes every value a multiple of 2^-k: the bound shrinks by 2^k (as for outputs).
  const double limit = std::ldexp(1.0, 24) / to_double(Rational(mp::denominator(p.opt.lambda)));
  const double worst = std::max({fm.num.size() ? fm.num.maxCoeff() : 0.0, fm.den.size() ? fm.den.maxCoeff() : 0.0,
                                 gm.dq.size() ? gm.dq.maxCoeff() : 0.0, gm.dk.size() ? gm.dk.maxCoeff() : 0.0,
                                 gm.dv.size() ? gm.dv.maxCoeff() : 0.0}) *
                       static_cast<double>(p.heads / p.kv_heads);  // dk, dv sum over the group
  return worst < limit;
}

void ours_gradients(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form,
                    Index chunk, DType out, CandidateOutputs& c) {
  gradients_in<double>(p, dout, dden, form, chunk, out, c);
}

namespace {

// "[b,head,t,c]" of element `at` of tensor w (dq: query heads; dk, dv: K/V heads), or ".<part>[seq,head,row(,column)]".
std::string where_in(const BatchProblem& p, int w, size_t at) {
  if (w == 3) return where_of(state_entry(p, at)).substr(6);
  const size_t cols = static_cast<size_t>(w == 2 ? p.dv : p.d), heads = static_cast<size_t>(w == 0 ? p.heads : p.kv_heads),
               n = static_cast<size_t>(p.n);
  return "[" + std::to_string(at / cols / n / heads) + "," + std::to_string(at / cols / n % heads) + "," + std::to_string(at / cols % n) +
         "," + std::to_string(at % cols) + "]";
}

using Add = std::function<void(const std::string&, const std::string&)>;

// One task by the float64 streaming backward (binary128 where float64
// overflows), within 2^-53·(K_g·scale + 2)·M: where the engine declines.
void verify_task_streaming(const BatchProblem& p, const GradientReference& g, const Task& k, const GradientScale& sc, double Kg, const Add& add) {
  const double u = 0x1p-53;
  const std::vector<double>* values[] = {&g.dq, &g.dk, &g.dv, &g.dstate};
  const std::vector<double>* mags[] = {&g.mag_dq, &g.mag_dk, &g.mag_dv, &g.mag_dstate};
  GroupGradient<double> x = group_gradient<double>(p, g.dout, g.dden, k.b, k.kvh, k.t0, k.t1);
  bool finite = x.dk.allFinite() && x.dv.allFinite() && x.mdk.allFinite() && x.mdv.allFinite();
  for (size_t i = 0; i < x.dq.size(); ++i) finite = finite && x.dq[i].allFinite() && x.mdq[i].allFinite();
  for (size_t i = 0; i < x.dstate.size(); ++i)
    for (size_t m = 0; m < x.dstate[i].size(); ++m) finite = finite && x.dstate[i][m].allFinite() && x.mdstate[i][m].allFinite();
  if (!finite) {  // float64 overflowed where the exact values may not: binary128
    const GroupGradient<f113> y = group_gradient<f113>(p, g.dout, g.dden, k.b, k.kvh, k.t0, k.t1);
    auto cast = [](const Mat<f113>& a) { return Mat<double>(a.unaryExpr([](const f113& v) { return static_cast<double>(v); })); };
    for (size_t i = 0; i < x.dq.size(); ++i) x.dq[i] = cast(y.dq[i]), x.mdq[i] = cast(y.mdq[i]);
    x.dk = cast(y.dk), x.dv = cast(y.dv), x.mdk = cast(y.mdk), x.mdv = cast(y.mdv);
    for (size_t i = 0; i < x.dstate.size(); ++i)
      for (size_t m = 0; m < x.dstate[i].size(); ++m) x.dstate[i][m] = cast(y.dstate[i][m]), x.mdstate[i][m] = cast(y.mdstate[i][m]);
  }
  const char* name[] = {"dq", "dk", "dv", "dstate"};
  for_each_element(p, k, x, [&](int w, size_t at, double ours, double mag, size_t row) {
    const double scale = scale_of(sc, w)[row];
    if (!std::isfinite(scale)) return;
    const double tol = u * (Kg * scale + 2) * mag + 0x1p-1000;
    const double stored = (*values[w])[at], stored_mag = (*mags[w])[at];
    if (!(std::fabs(stored - ours) <= tol))
      add(std::string("ref_") + name[w], std::string("ref_") + name[w] + where_in(p, w, at) + " = " + num(stored) +
                                             ", but the inputs and upstream give " + num(ours) + " (allowed difference " + num(tol) + ")");
    if (!(std::fabs(stored_mag - mag) <= tol))
      add(std::string("mag_") + name[w], std::string("mag_") + name[w] + where_in(p, w, at) + " = " + num(stored_mag) +
                                             ", but the inputs and upstream give " + num(mag) + " (allowed difference " + num(tol) + ")");
  });
}

// One task by the double engine's backward (fast_group_bounds), each value
// within its own running bound of the exact gradient; a stored value must lie
// within that bound plus its own rounding (half an ulp where certified; an
// uncertified one within 2^-80 of its magnitude, binary128's bound with any
// conditioning below 2^22), a stored magnitude within 2^-40 of ours (both
// computed alike: the same engine run on absolute values, from the stored
// den). False where the engine declines (a pole within its bound, overflow).
bool verify_task_engine(const BatchProblem& p, const GradientReference& g, const std::vector<double>& den, const Task& k, const Add& add) {
  GroupGradient<double> x, e;
  if (!fast_group_bounds(p, g.dout, g.dden, den, k.b, k.kvh, k.t0, k.t1, x, e)) return false;
  std::vector<double> bounds;
  for_each_element(p, k, e, [&](int, size_t, double b, double, size_t) { bounds.push_back(b); });
  const std::vector<double>* values[] = {&g.dq, &g.dk, &g.dv, &g.dstate};
  const std::vector<double>* mags[] = {&g.mag_dq, &g.mag_dk, &g.mag_dv, &g.mag_dstate};
  const std::vector<uint8_t>* flags[] = {&g.dq_flags, &g.dk_flags, &g.dv_flags, &g.dstate_flags};
  const char* name[] = {"dq", "dk", "dv", "dstate"};
  size_t i = 0;
  for_each_element(p, k, x, [&](int w, size_t at, double ours, double mag, size_t) {
    const double bound = bounds[i++];
    const uint8_t f = flags[w]->empty() ? 0 : (*flags[w])[at];
    if (f & kIllConditioned) return;
    const double stored = (*values[w])[at], stored_mag = (*mags[w])[at];
    const double tol = (bound + std::fabs(stored) * 0x1p-53 + (f ? 0x1p-80 * mag : 0)) * (1 + 0x1p-40) + 0x1p-1060;
    if (!(std::fabs(ours - stored) <= tol))
      add(std::string("ref_") + name[w], std::string("ref_") + name[w] + where_in(p, w, at) + " = " + num(stored) +
                                             ", but the inputs and upstream give " + num(ours) + " (allowed difference " + num(tol) + ")");
    const double tol_m = mag * 0x1p-40 + 0x1p-1060;
    if (!(std::fabs(stored_mag - mag) <= tol_m))
      add(std::string("mag_") + name[w], std::string("mag_") + name[w] + where_in(p, w, at) + " = " + num(stored_mag) +
                                             ", but the inputs and upstream give " + num(mag) + " (allowed difference " + num(tol_m) + ")");
  });
  return true;
}

}  // namespace

void verify_gradients(const BatchProblem& p, const Reference& forward, const GradientReference& g, const Add& add) {
  if (p.has_state() && (g.dstate.size() != p.state.size() || g.mag_dstate.size() != p.state.size())) {
    add("ref_dstate", "gradients from an initial state without the state's gradient");
    return;
  }
  const std::vector<Task> tasks = group_tasks(p);
  std::vector<char> declined(tasks.size(), 0);
  std::mutex mu;
  const bool engine = g.bits != 0;  // exact references (small heads) are proven by float64 as before
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {
    std::vector<std::pair<std::string, std::string>> found;
    const bool ok = engine && verify_task_engine(p, g, forward.den, tasks[i], [&](const std::string& t, const std::string& w) { found.emplace_back(t, w); });
    std::lock_guard lock(mu);
    declined[i] = !ok;
    for (const auto& [t, w] : found) add(t, w);
  });
  if (std::none_of(declined.begin(), declined.end(), [](char c) { return c != 0; })) return;
  // Our float64 forward (den and magnitudes for the conditioning; from the state, if any) and backward.
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  std::vector<double> den(nd), mnum(no), eden(nd), enumr(no);
  const bool sd = subtracts_partial_sums(p.opt, Form::streaming) && has_state_difference_magnitude(p.opt);
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    const SequenceValues<double> v = evaluate_sequence<double>(p, b, h, t0, t1, sd);
    const Output<double>&o = v.values, &m = v.magnitude, &e = v.sd_magnitude;
    for (Index t = t0; t < t1; ++t) {
      const size_t di = p.den_index(b, h, t);
      den[di] = o.den(t - t0), eden[di] = e.den(t - t0);
      for (Index c = 0; c < p.dv; ++c) mnum[p.out_index(b, h, t, c)] = m.num(t - t0, c), enumr[p.out_index(b, h, t, c)] = e.num(t - t0, c);
    }
  });
  const double u = 0x1p-53;
  const GradientScale sc = gradient_scale(p, den, mnum, enumr, eden, u);
  const double Kg = gradient_depth_bound(p.opt, longest_sequence(p), p.d, p.dv);
  for (size_t i = 0; i < tasks.size(); ++i)
    if (declined[i]) verify_task_streaming(p, g, tasks[i], sc, Kg, add);
}

}  // namespace hla::check
