// Gradients in the check layer (gradient.hpp; SPEC §9): the reference, the
// verdict on a candidate's dq, dk, dv, and the proof that stored gradients
// belong to their inputs. The algebra is the reference's (hla/backward.hpp).
#include "hla/check/gradient.hpp"

#include "hla/backward.hpp"
#include "hla/bounds.hpp"
#include "hla/evaluate.hpp"
#include "gradient_internal.hpp"
#include "internal.hpp"

#include <algorithm>
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

// κ_t of one normalized output token (gradient.hpp), +inf where ill-conditioned.
// Ku: the forward's error bound per unit of magnitude (K_f·u). With den's
// relative error δ = Ku·M̃_den/|D| < 1/2: |1/D̂ − 1/D| ≤ (1/(1−δ) − 1)/|D| and
// |1/D̂² − 1/D²| ≤ (1/(1−δ)² − 1)/D² = Ku·(2−δ)/(1−δ)²·(M̃_den/|D|)/D², so
// ∂L/∂Y errs by at most Ku·(ρ_t + (2−δ)/(1−δ)²·M̃_den/|D|) of its magnitude.
double token_kappa(const Options& o, double den, double mden_err, const double* mnum, const double* mnum_err, Index dv, double Ku) {
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

template <class S>
GroupGradient<S> group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b,
                                Index kvh, Index t0, Index t1, BackwardForm form = BackwardForm::streaming, Index chunk = 16,
                                bool magnitudes = true) {
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
    if (p.has_state()) {  // the continued sequence and ∂L/∂X0
      const StateMats<S> X0 = p.head_state<S>(p.sequence_of(b, t0), h);
      x = backward_from(ph, X0, up, dd, form, chunk);
      if (magnitudes) m = backward_magnitude_from(ph, X0, up, dd);
    } else {
      x.tokens = backward(ph, up, dd, form, chunk);
      if (magnitudes) m.tokens = backward_magnitude(ph, up, dd);
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

size_t q_at(const BatchProblem& p, Index b, Index h, Index t, Index c) { return p.q_index(b, h, t, c); }
size_t kv_at(const BatchProblem& p, Index b, Index kvh, Index t, Index c, Index cols) {
  return static_cast<size_t>(((b * p.kv_heads + kvh) * p.n + t) * cols + c);
}
size_t kv_row(const BatchProblem& p, Index b, Index kvh, Index t) { return static_cast<size_t>((b * p.kv_heads + kvh) * p.n + t); }

struct Task {
  Index b, kvh, t0, t1;
};
std::vector<Task> group_tasks(const BatchProblem& p) {
  std::vector<Task> tasks;
  const auto seqs = p.sequences();
  for (Index b = 0; b < p.batch; ++b)
    for (Index kvh = 0; kvh < p.kv_heads; ++kvh)
      for (const auto& [t0, t1] : seqs) tasks.push_back({b, kvh, t0, t1});
  return tasks;
}

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
void gradients_in(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form,
                  Index chunk, DType out, CandidateOutputs& c) {
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
    for_each_element(p, k, group_gradient<S>(p, dout, dden, k.b, k.kvh, k.t0, k.t1, form, chunk, false),
                     [&](int w, size_t at, const S& v, const S&, size_t) { (*values[w])[at] = round_to(out, static_cast<double>(v)); });
  });
}

// Rule 3's yardsticks (SPEC §9): our own backward forms in the candidate's
// compute precision (float for f32, double for f64), with their names. None
// with normalize: the upstream through the quotient (⟨do, num⟩/D² or ⟨do, o⟩/D,
// each with its own cancellation) makes honest orders differ by more than
// rule 3 allows (321× measured on a correct 2-token la1 backward); none in
// other precisions or from an initial state.
std::vector<std::pair<std::string, CandidateOutputs>> gradient_baselines(const BatchProblem& p, const GradientReference& g,
                                                                         Precision prec) {
  std::vector<std::pair<std::string, CandidateOutputs>> out;
  if ((prec != Precision::f32 && prec != Precision::f64) || p.has_state() || p.opt.normalize) return out;
  for (const auto& [form, chunk] : {std::pair{BackwardForm::streaming, Index(16)}, {BackwardForm::chunked, Index(16)},
                                    {BackwardForm::chunked_matmul, Index(64)}}) {
    if (!has_backward_form(p.opt.variant, form)) continue;
    CandidateOutputs c;
    if (prec == Precision::f32) gradients_in<float>(p, g.dout, g.dden, form, chunk, DType::f64, c);
    else gradients_in<double>(p, g.dout, g.dden, form, chunk, DType::f64, c);
    out.emplace_back(to_string(form) + (form == BackwardForm::streaming ? "" : "/" + std::to_string(chunk)), std::move(c));
  }
  return out;
}

GradientReference compute_gradient_reference(const BatchProblem& p, const Reference& forward, std::vector<double> dout,
                                             std::vector<double> dden, const GradientOptions& opt) {
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
      if (fast_group_gradient(p, g.dout, g.dden, k.b, k.kvh, k.t0, k.t1, opt.chunk, x, fl)) {
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

void check_gradients(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r) {
  const bool has_any = !cand.dq.empty() || !cand.dk.empty() || !cand.dv.empty() || !cand.dstate_parts.empty();
  if (!ref.grad) {
    if (has_any)
      throw InputError("the candidate holds gradients (dq, dk, dv), but the fixture carries none (no upstream do to differentiate "
                       "against): use a fixture written with gradients (hla gen --case ...,grad=true, or the golden *-grad fixtures)");
    if (opt.require_gradients)
      throw InputError("gradients are required (--require-grad), but the fixture carries none (no upstream do): use a fixture "
                       "written with gradients");
    return;
  }
  const GradientReference& g = *ref.grad;
  if (!cand.dstate_parts.empty() && (!p.has_state() || g.dstate.size() != p.state.size()))
    throw InputError("the candidate holds the gradient of an initial state (dstate), but the fixture " +
                     std::string(p.has_state() ? "carries no reference for it" : "has no initial state"));
  // The forward's error scales with the magnitudes of the candidate's class (SPEC §7).
  const bool sd = opt.form_class == FormClass::state_difference;
  const GradientScale sc = gradient_scale(p, ref.den, ref.mag_num, sd ? ref.mag_num_sd : ref.mag_num,
                                          sd ? ref.mag_den_sd : ref.mag_den, r.u);
  const double K = gradient_depth_bound(p.opt, longest_sequence(p), p.d, p.dv);
  r.gradient_bound = K + 1;
  const double tiny = info(r.precision).smallest_normal();
  // Exact tier (SPEC §9): bit equality for dq, dk, dv stored in f32 or f64.
  const bool exact_tier = opt.exact_tier && (!cand.dq.empty() || !cand.dk.empty() || !cand.dv.empty()) && gradient_exact_tier(p, g);
  // Rule 3's yardsticks: our own backward forms, scored alike (dq, dk, dv).
  const bool any_checked = !cand.dq.empty() || !cand.dk.empty() || !cand.dv.empty();
  const auto bases = any_checked ? gradient_baselines(p, g, r.precision) : decltype(gradient_baselines(p, g, r.precision)){};
  // Scores element e (magnitude already scaled by s) into row and all; `base`:
  // which of our forms' tensors holds its values (dq 0, dk 1, dv 2; -1: none), at i.
  auto score = [&](GradientRow& row, std::vector<Element>& all, Element e, double s, DType dtype, int base = -1, size_t i = 0) {
    ++row.elements;
    if (!std::isfinite(s) || !std::isfinite(e.reference)) {
      ++row.ill_conditioned;
      return;
    }
    if (std::fabs(e.reference) > info(dtype).largest_finite()) {
      ++row.out_of_range;
      return;
    }
    if (r.u * e.magnitude < tiny && e.magnitude > 0) {
      ++row.underflow;
      return;
    }
    ++row.scored;
    if (!std::isfinite(e.candidate)) {
      e.score = HUGE_VAL;
      ++row.nonfinite;
    } else {
      const double err = std::max(0.0, std::fabs(e.candidate - e.reference) - info(dtype).rounding_error(e.reference));
      e.score = err == 0 ? 0.0 : e.magnitude > 0 ? err / (r.u * e.magnitude) : HUGE_VAL;
    }
    e.unit = e.magnitude > 0 ? std::fabs(e.reference) / e.magnitude : 0;
    if (base >= 0)
      for (const auto& [form, b] : bases) {
        const double ours = (base == 0 ? b.dq : base == 1 ? b.dk : b.dv)[i], err = std::fabs(ours - e.reference);
        const double sb = err == 0 ? 0.0 : e.magnitude > 0 ? err / (r.u * e.magnitude) : HUGE_VAL;
        if (sb > row.baseline_max_score) row.baseline_max_score = sb, row.baseline_worst_form = form;
      }
    if (e.score > r.gradient_bound) ++row.over_bound;
    if (exact_tier && base >= 0 && (dtype == DType::f32 || dtype == DType::f64) && !(e.candidate == e.reference)) ++row.exact_mismatches;
    row.max_score = std::max(row.max_score, e.score);
    all.push_back(e);
  };
  // The row's worst elements and reasons; `at` says where its worst element is.
  auto finish = [&](GradientRow& row, std::vector<Element> all, const std::function<std::string(const Element&)>& at) {
    // Rule 3 per element, as for outputs: its score against the worst of our
    // orders, or against kFloorRoundings roundings of its own value if larger.
    if (row.baseline_applied) {
      row.ratio_limit = ratio_limit(row.scored);
      for (const Element& e : all) {
        if (!std::isfinite(e.score)) continue;  // non-finite: failed by its own rule
        const double ratio = e.score == 0 ? 0 : e.score / std::max(row.baseline_max_score, kFloorRoundings * e.unit);
        if (ratio > row.baseline_ratio) row.baseline_ratio = ratio, row.ratio_element = e;
      }
      row.over_ratio = row.baseline_ratio > row.ratio_limit;
    }
    row.worst = worst_of(std::move(all), opt.worst);
    if (row.nonfinite) r.reasons.push_back(row.name + ": " + std::to_string(row.nonfinite) + " non-finite values where the reference is finite");
    if (row.over_bound) {
      const Element& w = row.worst.front();
      char buf[120];
      std::snprintf(buf, sizeof buf, " elements exceed the a priori gradient bound %.4g u·magnitude (worst score %.4g at ", r.gradient_bound, w.score);
      r.reasons.push_back(row.name + ": " + std::to_string(row.over_bound) + buf + at(w) + ")");
    }
    if (row.exact_mismatches)
      r.reasons.push_back(row.name + ": " + std::to_string(row.exact_mismatches) +
                          " elements differ from the exact reference (exact tier demands bit equality)");
    if (row.over_ratio) {
      const Element& w = row.ratio_element;
      char buf[300];
      std::snprintf(buf, sizeof buf,
                    " is %.4g times the worst of our own backward forms in %s (%.4g by %s) and the element's floor (%.4g); "
                    "limit %.4gx for %zu scored elements",
                    row.baseline_ratio, to_string(r.precision).c_str(), row.baseline_max_score, row.baseline_worst_form.c_str(),
                    kFloorRoundings * w.unit, row.ratio_limit, row.scored);
      char score_text[40];
      std::snprintf(score_text, sizeof score_text, "%.4g", w.score);
      r.reasons.push_back(row.name + ": score " + score_text + " at " + at(w) + buf);
    }
    r.gradients.push_back(std::move(row));
  };
  struct Tensor {
    const char* name;
    const std::vector<double>& cand;
    DType dtype;
    const std::vector<double>& ref;
    const std::vector<double>& mag;
    Index heads, cols;
    const std::vector<double>& scale;
  };
  const Tensor tensors[] = {{"dq", cand.dq, cand.dq_dtype, g.dq, g.mag_dq, p.heads, p.d, sc.q},
                            {"dk", cand.dk, cand.dk_dtype, g.dk, g.mag_dk, p.kv_heads, p.d, sc.kv},
                            {"dv", cand.dv, cand.dv_dtype, g.dv, g.mag_dv, p.kv_heads, p.dv, sc.kv}};
  std::vector<std::string> missing;
  int which = -1;
  for (const Tensor& x : tensors) {
    ++which;
    GradientRow row;
    row.name = x.name;
    row.baseline_applied = !bases.empty();
    row.exact_tier = exact_tier && (x.dtype == DType::f32 || x.dtype == DType::f64);
    row.checked = !x.cand.empty();
    const size_t size = static_cast<size_t>(p.batch * x.heads * p.n * x.cols);
    if (!row.checked) {
      missing.push_back(x.name);
      r.gradients.push_back(row);
      continue;
    }
    if (x.cand.size() != size)
      throw InputError(std::string("candidate ") + x.name + " holds " + std::to_string(x.cand.size()) + " values, expected " + std::to_string(size));
    std::vector<Element> all;
    for (Index b = 0; b < p.batch; ++b)
      for (Index h = 0; h < x.heads; ++h)
        for (Index t = 0; t < p.n; ++t) {
          const size_t row_at = static_cast<size_t>((b * x.heads + h) * p.n + t);
          const double s = x.scale[row_at];
          for (Index c = 0; c < x.cols; ++c) {
            const size_t i = row_at * static_cast<size_t>(x.cols) + static_cast<size_t>(c);
            score(row, all, Element{b, h, t, c, x.cand[i], x.ref[i], x.mag[i] * s}, s, x.dtype, which, i);
          }
        }
    finish(row, std::move(all), [](const Element& w) {
      return "batch " + std::to_string(w.b) + " head " + std::to_string(w.h) + " token " + std::to_string(w.t) + " column " + std::to_string(w.c);
    });
  }
  // From an initial state: one row per part of the state's gradient.
  if (p.has_state() && g.dstate.size() == p.state.size()) {
    if (!cand.dstate_parts.empty() && cand.dstate.size() != p.state.size())
      throw InputError("candidate dstate holds " + std::to_string(cand.dstate.size()) + " values, expected " + std::to_string(p.state.size()));
    // Symmetric members are judged along symmetric directions, as the
    // reference's are (hla::symmetrize_gradient): (G + Gᵀ)/2 of the candidate's.
    std::vector<double> cand_dstate = cand.dstate;
    if (!cand_dstate.empty())
      for (Index seq = 0; seq < p.sequence_count(); ++seq)
        for (Index h = 0; h < p.heads; ++h) {
          const BatchProblem::StateView X = p.state_view(seq, h);
          for (size_t m = 0; m < X.layout.size(); ++m) {
            if (!X.layout[m].symmetric) continue;
            const Index w = X.layout[m].width();
            for (Index a = 0; a < X.layout[m].rows; ++a)
              for (Index b = a + 1; b < X.layout[m].cols; ++b) {
                double &x = cand_dstate[X.start[m] + static_cast<size_t>(a * w + b)], &y = cand_dstate[X.start[m] + static_cast<size_t>(b * w + a)];
                x = y = (x + y) / 2;
              }
          }
        }
    const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
    for (size_t mi = 0; mi < layout.size(); ++mi) {
      const StatePart& m = layout[mi];
      if (m.role == StatePart::Role::unused) continue;
      for (const bool ones : {false, true}) {
        const std::string part = ones ? m.ones : m.name;
        if (part.empty()) continue;
        GradientRow row;
        row.name = "dstate." + part;
        row.checked = std::find(cand.dstate_parts.begin(), cand.dstate_parts.end(), part) != cand.dstate_parts.end();
        if (!row.checked) {
          if (m.role == StatePart::Role::required) missing.push_back(row.name);
          r.gradients.push_back(row);
          continue;
        }
        std::vector<Element> all;
        p.for_each_state_entry([&](Index seq, Index h, size_t i_m, Index rr, Index c, size_t at) {
          if (i_m != mi || (c == m.cols) != ones) return;
          const double s = sc.state[static_cast<size_t>(seq * p.heads + h)];
          score(row, all, Element{seq, h, rr, ones ? -1 : c, cand_dstate[at], g.dstate[at], g.mag_dstate[at] * s}, s, cand.dstate_dtype);
        });
        finish(row, std::move(all), [](const Element& w) {
          return "sequence " + std::to_string(w.b) + " head " + std::to_string(w.h) + " row " + std::to_string(w.t) +
                 (w.c < 0 ? "" : " column " + std::to_string(w.c));
        });
      }
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& s : missing) list += (list.empty() ? "" : ", ") + s;
    const bool none = std::none_of(r.gradients.begin(), r.gradients.end(), [](const GradientRow& x) { return x.checked; });
    r.gradients_note = (none ? "gradients not checked: the candidate has no " : "not checked: the candidate has no ") + list;
    if (opt.require_gradients) r.reasons.push_back("the candidate lacks " + list + ", required by --require-grad");
  }
}

void ours_gradients(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form,
                    Index chunk, DType out, CandidateOutputs& c) {
  gradients_in<double>(p, dout, dden, form, chunk, out, c);
}

void verify_gradients(const BatchProblem& p, const GradientReference& g,
                      const std::function<void(const std::string&, const std::string&)>& add) {
  if (p.has_state() && (g.dstate.size() != p.state.size() || g.mag_dstate.size() != p.state.size())) {
    add("ref_dstate", "gradients from an initial state without the state's gradient");
    return;
  }
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
  const std::vector<double>* values[] = {&g.dq, &g.dk, &g.dv, &g.dstate};
  const std::vector<double>* mags[] = {&g.mag_dq, &g.mag_dk, &g.mag_dv, &g.mag_dstate};
  for (const Task& k : group_tasks(p)) {
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
    // |stored − ours| within 2^-53·(K_g·scale + 2)·M: ours within K_g·scale·u·M of the exact value, the stored one within an ulp.
    for_each_element(p, k, x, [&](int w, size_t at, double ours, double mag, size_t row) {
      const double scale = scale_of(sc, w)[row];
      if (!std::isfinite(scale)) return;
      const double tol = u * (Kg * scale + 2) * mag + 0x1p-1000;
      const char* name[] = {"dq", "dk", "dv", "dstate"};
      std::string where;
      if (w == 3) {
        where = where_of(state_entry(p, at)).substr(6);  // ".<part>[seq,head,row(,column)]"
      } else {  // [b, head, t, c] of the element (heads: query heads for dq, K/V heads for dk, dv).
        const size_t cols = static_cast<size_t>(w == 2 ? p.dv : p.d), heads = static_cast<size_t>(w == 0 ? p.heads : p.kv_heads),
                     n = static_cast<size_t>(p.n);
        where = "[" + std::to_string(at / cols / n / heads) + "," + std::to_string(at / cols / n % heads) + "," +
                std::to_string(at / cols % n) + "," + std::to_string(at % cols) + "]";
      }
      const double stored = (*values[w])[at], stored_mag = (*mags[w])[at];
      if (!(std::fabs(stored - ours) <= tol))
        add(std::string("ref_") + name[w], std::string("ref_") + name[w] + where + " = " + num(stored) + ", but the inputs and upstream give " +
                                               num(ours) + " (allowed difference " + num(tol) + ")");
      if (!(std::fabs(stored_mag - mag) <= tol))
        add(std::string("mag_") + name[w], std::string("mag_") + name[w] + where + " = " + num(stored_mag) +
                                               ", but the inputs and upstream give " + num(mag) + " (allowed difference " + num(tol) + ")");
    });
  }
}

}  // namespace hla::check
