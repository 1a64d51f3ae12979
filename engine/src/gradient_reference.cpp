// The reference gradients (gradient_reference.hpp; SPEC §9): exact
// rationals, the double-double engine's backward with its certification, or
// binary128, per group task; and the bounds their certification uses. The
// algebra is the reference's (hla/backward.hpp).
#include "hla/engine/gradient_reference.hpp"

#include "hla/backward.hpp"
#include "hla/bounds.hpp"
#include "hla/engine/detail.hpp"
#include "hla/engine/gradient_groups.hpp"
#include "hla/evaluate.hpp"
#include "hla/exact.hpp"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

namespace hla::engine {

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

template <class S>
GroupGradient<S> group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index kvh,
                                Index t0, Index t1, BackwardForm form, Index chunk, bool magnitudes, bool log_decay) {
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
template GroupGradient<Rational> group_gradient(const BatchProblem&, const std::vector<double>&, const std::vector<double>&, Index, Index,
                                                Index, Index, BackwardForm, Index, bool, bool);
template GroupGradient<f113> group_gradient(const BatchProblem&, const std::vector<double>&, const std::vector<double>&, Index, Index,
                                            Index, Index, BackwardForm, Index, bool, bool);
template GroupGradient<double> group_gradient(const BatchProblem&, const std::vector<double>&, const std::vector<double>&, Index, Index,
                                              Index, Index, BackwardForm, Index, bool, bool);
template GroupGradient<float> group_gradient(const BatchProblem&, const std::vector<double>&, const std::vector<double>&, Index, Index,
                                             Index, Index, BackwardForm, Index, bool, bool);

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

namespace {
// Throws InputError unless the problem has a backward, the upstream do and
// dden (or none) are finite values of the problem's dtype in its shapes, and
// the forward reference is of the problem's shape.
void check_upstream(const BatchProblem& p, const Reference& forward, const std::vector<double>& dout, const std::vector<double>& dden) {
  p.validate();  // finite inputs: a gradient fixture's reference is finite
  if (!has_backward(p.opt.variant))
    throw InputError("variant " + to_string(p.opt.variant) + " has no backward form (SPEC §9): no gradients for it");
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  if (dout.size() != no)
    throw InputError("upstream do holds " + std::to_string(dout.size()) + " values, expected " + std::to_string(no) +
                     " = batch·heads·n·dv");
  if (!dden.empty() && dden.size() != nd)
    throw InputError("upstream dden holds " + std::to_string(dden.size()) + " values, expected " + std::to_string(nd) + " = batch·heads·n");
  for (const auto& [name, x] : {std::pair{"do", &dout}, {"dden", &dden}})
    for (size_t i = 0; i < x->size(); ++i) {
      const double e = (*x)[i];
      if (!std::isfinite(e))
        throw InputError(std::string("upstream ") + name + "[" + std::to_string(i) + "] = " + num(e) + " is not finite");
      if (round_to(p.dtype, e) != e)
        throw InputError(std::string("upstream ") + name + "[" + std::to_string(i) + "] = " + num(e) + " is not representable in " +
                         to_string(p.dtype));
    }
  if (forward.den.size() != nd || forward.mag_den.size() != nd)
    throw InputError("the forward reference does not match the problem's shape");
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
      // Every flag anew: a task recomputed here replaces the engine's flags too.
      if (!std::isfinite(scale)) (*flags[w])[at] = kUncertified | kIllConditioned;
      else (*flags[w])[at] = certifies(v, f113(0x1p-112) * f113(Kg * scale) * m) ? 0 : kUncertified;
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

}  // namespace hla::engine
