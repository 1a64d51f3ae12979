// The check layer's gradient rules that are not scoring (gradient.hpp): the
// exact tier of gradients, and the proof that stored gradients belong to
// their inputs and upstream (the engine's backward or float64 streaming).
#include "hla/check/gradient.hpp"

#include "hla/backward.hpp"
#include "hla/bounds.hpp"
#include "hla/engine/gradient_groups.hpp"
#include "internal.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <mutex>
#include <string>

namespace hla::check {

using engine::evaluate_sequence;
using engine::fast_group_bounds;
using engine::for_each_element;
using engine::gradient_depth_bound;
using engine::gradient_scale;
using engine::GradientScale;
using engine::group_gradient;
using engine::group_tasks;
using engine::GroupGradient;
using engine::has_state_difference_magnitude;
using engine::kIllConditioned;
using engine::scale_of;
using engine::SequenceValues;
using engine::Task;

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
  const double worst =
      std::max({fm.num.size() ? fm.num.maxCoeff() : 0.0, fm.den.size() ? fm.den.maxCoeff() : 0.0, gm.dq.size() ? gm.dq.maxCoeff() : 0.0,
                gm.dk.size() ? gm.dk.maxCoeff() : 0.0, gm.dv.size() ? gm.dv.maxCoeff() : 0.0}) *
      static_cast<double>(p.heads / p.kv_heads);  // dk, dv sum over the group
  return worst < limit;
}

namespace {

// "dstate.<part>[sequence,head,row(,column)]" of entry `at` of a state's gradient (BatchProblem::state layout).
struct StateEntry {
  std::string part;
  Index seq, h, r, c;  // c = -1: a denominator part (one column)
};
StateEntry state_entry(const BatchProblem& p, size_t at) {
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  const size_t size = static_cast<size_t>(state_size(layout));
  size_t off = at % size;
  StateEntry e{"", static_cast<Index>(at / size / static_cast<size_t>(p.heads)),
               static_cast<Index>(at / size % static_cast<size_t>(p.heads)), 0, 0};
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
void verify_task_streaming(const BatchProblem& p, const GradientReference& g, const Task& k, const GradientScale& sc, double Kg,
                           const Add& add) {
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
    const bool ok = engine && verify_task_engine(p, g, forward.den, tasks[i],
                                                 [&](const std::string& t, const std::string& w) { found.emplace_back(t, w); });
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
