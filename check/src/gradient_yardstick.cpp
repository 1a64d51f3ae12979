// The magnitude each gradient element is judged by (SPEC §9, "Judging
// gradients"): gradient_yardstick in gradient_internal.hpp.
//
// A candidate's gradient is the backward of its own upstream Ȳ_t: exact input
// [do | dden] without normalize; with normalize [do/D | dden − ⟨do, o⟩/D]
// formed from the candidate's own num, den, whose error per token is at most
// K_q·u·κ_t of its magnitude Ȳmag_t (κ_t from den ⊕ ε's conditioning). The
// backward only adds terms and is linear in the upstream, so
//   |ĝ − g| ≤ u·(K_b·M(Ȳmag) + K_q·M(κ·Ȳmag)),
// M(·) the backward over absolute values with that upstream: every token's
// upstream error is weighed by its own conditioning and by how much the
// element depends on it, so a far token near its pole does not loosen the
// bound of an element that hardly depends on it. An element that depends on
// a token whose D is not bounded away from 0 (δ_t ≥ 1/2; clamped: its sign or
// branch) cannot be bounded: M(1 at those tokens) > 0 marks it ill-conditioned.
// The state-difference class forms the unmasked terms too: its M is the
// unmasked operator's (with a state: plus the masked one's, as the forward's).
#include "hla/engine/gradient_groups.hpp"
#include "internal.hpp"

#include "hla/fast/heads.hpp"

#include <mutex>

namespace hla::check {

using engine::backward_depth_bound;
using engine::for_each_element;
using engine::group_tasks;
using engine::GroupGradient;
using engine::has_state_difference_magnitude;
using engine::head_for;
using engine::input_matrix;
using engine::mag_up;
using engine::quotient_depth_bound;
using engine::Task;
using engine::token_kappa;

namespace {

using fast::Dense;
using fast::HeadGradient;

// A query head's three upstreams: Ȳmag, κ·Ȳmag (0 at ill tokens), 1 at ill tokens.
struct Upstreams {
  Dense<double> mag, kappa, ill;
  bool any_ill = false;
};
Upstreams upstreams(const BatchProblem& p, const Reference& ref, const GradientReference& g, const std::vector<double>& mnum_err,
                    const std::vector<double>& mden_err, double Ku, Index b, Index h, Index t0, Index t1,
                    std::vector<GradientYardstick::Token>& ill) {
  const Index n = t1 - t0, dv = p.dv;
  Upstreams u{Dense<double>::zero(n, dv + 1), Dense<double>::zero(n, dv + 1), Dense<double>::zero(n, dv + 1)};
  const double eps = to_double(p.opt.eps);
  for (Index t = 0; t < n; ++t) {
    const size_t di = p.den_index(b, h, t0 + t), oi = p.out_index(b, h, t0 + t, 0);
    const double dd = g.dden.empty() ? 0.0 : std::fabs(g.dden[di]);
    double kappa = 1, D = 1;
    bool flat = false;
    if (p.opt.normalize) {
      kappa = token_kappa(p.opt, ref.den[di], mden_err[di], &ref.mag_num[oi], &mnum_err[oi], dv, Ku);
      D = std::fabs(normalizer(ref.den[di], eps, p.opt.eps_mode));
      flat = p.opt.eps_mode == EpsMode::clamp && std::fabs(ref.den[di]) < eps;  // D held at ±ε: D' = 0
    }
    double den_term = dd;
    for (Index c = 0; c < dv; ++c) {
      const double a = std::fabs(g.dout[oi + static_cast<size_t>(c)]);
      u.mag.at(t, c) = a / D;
      if (p.opt.normalize && !flat) den_term += a / D * ref.mag_num[oi + static_cast<size_t>(c)] / D;
    }
    u.mag.at(t, dv) = den_term;
    if (std::isfinite(kappa)) {
      for (Index c = 0; c <= dv; ++c) u.kappa.at(t, c) = u.mag.at(t, c) * kappa;
    } else {
      for (Index c = 0; c <= dv; ++c) u.ill.at(t, c) = 1;
      u.any_ill = true;
      ill.push_back({b, h, t0 + t});
    }
  }
  return u;
}

// Σ over heads of M(upstream) as a task's gradients (dq of each head, dk, dv
// summed over the group, dstate in p's layout, symmetric members symmetrized),
// every value raised to an upper bound of the exact magnitude; `to` is shaped
// for the task (every head) beforehand.
struct TaskSums {
  GroupGradient<double> mag, kappa, ill;
};
void add_run(const BatchProblem& p, const HeadGradient<double>& r, const std::vector<StatePart>& run_layout, size_t head,
             GroupGradient<double>& to) {
  auto up = [](const fast::HeadResult<double>& x, Index cols) {
    Mat<double> m(x.val.rows, cols);
    for (Index t = 0; t < x.val.rows; ++t)
      for (Index c = 0; c < cols; ++c) m(t, c) = mag_up(x.val.at(t, c), x.phi[static_cast<size_t>(t)], x.alpha[static_cast<size_t>(t)], x.tiny);
    return m;
  };
  to.dq[head] += up(r.dq, p.d);
  to.dk += up(r.dk, p.d);
  to.dv += up(r.dv, p.dv);
  if (!p.has_state()) return;
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  for (size_t i = 0; i < run_layout.size(); ++i)
    for (size_t j = 0; j < layout.size(); ++j) {
      if (layout[j].name != run_layout[i].name || layout[j].width() != run_layout[i].width()) continue;
      const fast::BMat<double>& x = r.dstate[i];
      Mat<double> m(x.rows(), x.cols());
      for (Index a = 0; a < x.rows(); ++a)
        for (Index c = 0; c < x.cols(); ++c) m(a, c) = mag_up(x.val.at(a, c), x.phi, x.alpha, x.tiny);
      if (layout[j].symmetric) m = ((m + m.transpose()) / 2).eval();
      to.dstate[head][j] += m;
    }
}

}  // namespace

GradientYardstick gradient_yardstick(const BatchProblem& p, const Reference& ref, const GradientReference& g, FormClass cls, double u) {
  GradientYardstick y;
  const bool sd = cls == FormClass::state_difference && has_state_difference_magnitude(p.opt);
  const bool norm = p.opt.normalize;
  y.q = g.mag_dq, y.k = g.mag_dk, y.v = g.mag_dv, y.state = g.mag_dstate;
  if (!norm && !sd) return y;  // the stored magnitudes (exact upstream, masked terms)
  const Index Lmax = longest_sequence(p);
  const double Kb = backward_depth_bound(p.opt.variant, Lmax, p.d, p.dv), Kq = quotient_depth_bound(p.opt.variant, Lmax, p.d, p.dv);
  const double Ku = depth_bound(p.opt.variant, Lmax, p.d) * u;
  const std::vector<double>&mnum_err = sd ? ref.mag_num_sd : ref.mag_num, &mden_err = sd ? ref.mag_den_sd : ref.mag_den;
  Options un = p.opt;
  un.masked = false;
  const std::vector<Task> tasks = group_tasks(p);
  std::mutex mu;
  std::vector<double>* out[] = {&y.q, &y.k, &y.v, &y.state};
  parallel_for(tasks.size(), worker_threads(), [&](size_t ti) {
    const Task& k = tasks[ti];
    const Index L = k.t1 - k.t0, group = p.heads / p.kv_heads;
    TaskSums s;
    for (auto* x : {&s.mag, &s.kappa, &s.ill}) {
      x->dq.assign(static_cast<size_t>(group), Mat<double>::Zero(L, p.d));
      x->dk = Mat<double>::Zero(L, p.d), x->dv = Mat<double>::Zero(L, p.dv);
      if (!p.has_state()) continue;
      StateMats<double> z;
      for (const StatePart& m : state_layout(p.opt, p.d, p.dv)) z.push_back(Mat<double>::Zero(m.rows, m.width()));
      x->dstate.assign(static_cast<size_t>(group), z);
    }
    std::vector<GradientYardstick::Token> ill;
    bool any_ill = false;
    for (Index i = 0; i < group; ++i) {
      const Index h = k.kvh * group + i;
      Upstreams up = upstreams(p, ref, g, mnum_err, mden_err, Ku, k.b, h, k.t0, k.t1, ill);
      any_ill = any_ill || up.any_ill;
      // The class's operators: masked (from the state as given) and, for the
      // state-difference class, the unmasked one (from the members it shares).
      std::vector<Options> ops;
      if (!sd || p.has_state()) ops.push_back(p.opt);
      if (sd) ops.push_back(un);
      for (const Options& o : ops) {
        const fast::FastHead<double> hd = head_for<double>(p, o, k.b, h, k.t0, k.t1, 64, true);
        const fast::Tape<double> tp = fast::forward_tape(hd, false);
        const std::vector<StatePart> layout = p.has_state() ? state_layout(o, p.d, p.dv) : std::vector<StatePart>{};
        if (sd) add_run(p, fast::backward_head(hd, tp, input_matrix(up.mag)), layout, static_cast<size_t>(i), s.mag);
        if (norm) add_run(p, fast::backward_head(hd, tp, input_matrix(up.kappa)), layout, static_cast<size_t>(i), s.kappa);
        if (up.any_ill) add_run(p, fast::backward_head(hd, tp, input_matrix(up.ill)), layout, static_cast<size_t>(i), s.ill);
      }
    }
    // M* = (K_b·M + K_q·M_κ)/K_g per element (M: stored, or the class's), +inf where ill.
    std::vector<double> mags, kappas, ills;
    if (sd) for_each_element(p, k, s.mag, [&](int, size_t, double v, double, size_t) { mags.push_back(v); });
    if (norm) for_each_element(p, k, s.kappa, [&](int, size_t, double v, double, size_t) { kappas.push_back(v); });
    if (any_ill) for_each_element(p, k, s.ill, [&](int, size_t, double v, double, size_t) { ills.push_back(v); });
    size_t e = 0;
    const GroupGradient<double>& shape = sd ? s.mag : norm ? s.kappa : s.ill;
    for_each_element(p, k, shape, [&](int w, size_t at, double, double, size_t) {
      const double M = sd ? mags[e] : (*out[w])[at];
      double Ms = norm ? (Kb * M + Kq * kappas[e]) / (Kb + Kq) : M;
      if (any_ill && ills[e] > 0) Ms = INFINITY;
      (*out[w])[at] = Ms;
      ++e;
    });
    std::lock_guard lock(mu);
    y.ill.insert(y.ill.end(), ill.begin(), ill.end());
  });
  std::sort(y.ill.begin(), y.ill.end(), [](const auto& a, const auto& b) { return std::tie(a.b, a.h, a.t) < std::tie(b.b, b.h, b.t); });
  return y;
}

}  // namespace hla::check
