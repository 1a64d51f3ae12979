#include "hla/engine/reference.hpp"

#include "hla/bounds.hpp"
#include "hla/engine/fast_reference.hpp"
#include "hla/evaluate.hpp"
#include "hla/exact.hpp"
#include "hla/fast/engine.hpp"
#include "hla/engine/detail.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace hla::engine {

double depth_bound(Variant v, Index n, Index d) { return static_cast<double>((order_of(v) + 1) * (n + d) + 16); }

double literal_terms(const Options& o, Index w) {
  const double x = static_cast<double>(std::max<Index>(w, 0));
  const bool unmasked = !o.masked && has_unmasked(o.variant);
  double terms = x;
  switch (order_of(o.variant)) {
    case 1:
      break;
    case 2:
      terms = unmasked ? x * x : x * (x + 1) / 2;
      break;
    default:
      terms = unmasked || o.variant == Variant::hla3_paper ? x * x * x : x * (x + 1) * (2 * x + 1) / 6;
      break;
  }
  return terms + (o.lambda != 0 ? x : 0);
}

double flat_path_ratio(const Options& o, Index n, Index d, FormClass c) {
  if (!c.is_flat()) return 1;
  return 1 + literal_terms(o, c.width == 0 ? n : std::min<Index>(c.width, n)) / depth_bound(o.variant, n, d);
}

double depth_bound(const Options& o, Index n, Index d, FormClass c) {
  double K = depth_bound(o.variant, n, d);
  if (c.is_flat()) K += literal_terms(o, c.width == 0 ? n : std::min<Index>(c.width, n));
  // γ < 1: every step of the p+1 nested prefix sums also multiplies by γ (one
  // rounding each), γ itself is rounded to the precision (γ^e, e ≤ p·n, errs by
  // e·u), and decay in log space errs as above.
  const double L = std::fabs(std::log(to_double(o.gamma))), x = static_cast<double>(n), p = order_of(o.variant);
  if (L > 0) K += (p + 1) * x + p * x + p * (L * x * (x + 2) + 2);
  return K;
}

namespace {

struct Sink {
  Reference& ref;
  const BatchProblem& p;
  size_t out_at(Index b, Index h, Index t, Index c) const { return p.out_index(b, h, t, c); }
};

void exact_head(Sink& s, Index b, Index h, Index t0, Index t1) {
  const auto [o, m, msd] = evaluate_sequence<Rational>(s.p, b, h, t0, t1, has_state_difference_magnitude(s.p.opt));
  for (Index t = t0; t < t1; ++t) {
    const Index lt = t - t0;
    const size_t di = s.p.den_index(b, h, t);
    s.ref.den[di] = to_double(o.den(lt));
    s.ref.mag_den[di] = to_double(m.den(lt));
    s.ref.mag_den_sd[di] = to_double(msd.den(lt));
    for (Index c = 0; c < s.p.dv; ++c) {
      const size_t i = s.out_at(b, h, t, c);
      s.ref.out[i] = to_double(o.out(lt, c));
      s.ref.num[i] = to_double(o.num(lt, c));
      s.ref.mag_num[i] = to_double(m.num(lt, c));
      s.ref.mag_num_sd[i] = to_double(msd.num(lt, c));
    }
  }
}

// Tokens [t0, t1) of the head; t1 may end before the sequence does (a
// prefix: the streaming form is causal, so those tokens' values are the same;
// bound_n is then the whole sequence's length, whose a priori bound they get).
void f113_head(Sink& s, Index b, Index h, Index t0, Index t1, Index bound_n = -1) {
  const Options& opt = s.p.opt;
  // The reference form's own error: K·u113 times the magnitude of what it adds
  // (the unmasked-order magnitude where it subtracts partial sums; a variant
  // without an unmasked form — hla3_paper — already has it in m).
  const bool other = subtracts_partial_sums(opt, Form::streaming) && has_unmasked(opt.variant) && opt.masked;
  const auto [o, m, M] = evaluate_sequence<f113>(s.p, b, h, t0, t1, other);
  const f113 k = f113(depth_bound(opt.variant, bound_n < 0 ? t1 - t0 : bound_n, s.p.d)) *
                 f113(std::ldexp(1.0, -112));  // 2·u113: slack for the bound's own rounding
  const f113 eps = from_rational<f113>(opt.eps);
  for (Index t = t0; t < t1; ++t) {
    const Index lt = t - t0;
    const size_t di = s.p.den_index(b, h, t);
    const f113 eD = k * M.den(lt);
    s.ref.den[di] = static_cast<double>(o.den(lt));
    s.ref.mag_den[di] = static_cast<double>(m.den(lt));
    if (!certifies(o.den(lt), eD)) s.ref.den_flags[di] |= kUncertified;
    for (Index c = 0; c < s.p.dv; ++c) {
      const size_t i = s.out_at(b, h, t, c);
      const f113 eN = k * M.num(lt, c);
      s.ref.out[i] = static_cast<double>(o.out(lt, c));
      s.ref.num[i] = static_cast<double>(o.num(lt, c));
      s.ref.mag_num[i] = static_cast<double>(m.num(lt, c));
      if (!opt.normalize) {
        if (!certifies(o.num(lt, c), eN)) s.ref.flags[i] |= kUncertified;
        continue;
      }
      const auto eO = normalized_error_bound(o.num(lt, c), o.den(lt), eps, opt.eps_mode, eN, eD);
      if (!eO) s.ref.flags[i] |= kIllConditioned | kUncertified;
      else if (!certifies(o.out(lt, c), *eO)) s.ref.flags[i] |= kUncertified;
    }
  }
}

// Clears the flags of tokens [t0, t1) of a head (before recomputing them).
void clear_flags(Sink& s, Index b, Index h, Index t0, Index t1) {
  for (Index t = t0; t < t1; ++t) {
    s.ref.den_flags[s.p.den_index(b, h, t)] = 0;
    for (Index c = 0; c < s.p.dv; ++c) s.ref.flags[s.p.out_index(b, h, t, c)] = 0;
  }
}

}  // namespace

bool has_state_difference_magnitude(const Options& o) { return o.masked && has_unmasked(o.variant); }

namespace {
// The evaluations of a sequence: the reference library's in S; exact ones
// (Rational) by the fast exact engine (hla/exact.hpp), the same rationals.
template <class S> struct Engine {
  static Output<S> values(const Problem<S>& p) { return evaluate(p, Form::streaming); }
  static Output<S> mag(const Problem<S>& p, bool unmasked = false) { return magnitude(p, unmasked); }
  static Output<S> values_from(const Problem<S>& p, const StateMats<S>& X) { return evaluate_from(p, X); }
  static Output<S> mag_from(const Problem<S>& p, const StateMats<S>& X) { return magnitude_from(p, X); }
};
template <> struct Engine<Rational> {
  static Output<Rational> values(const Problem<Rational>& p) { return exact::evaluate(p, Form::streaming); }
  static Output<Rational> mag(const Problem<Rational>& p, bool unmasked = false) { return exact::magnitude(p, unmasked); }
  static Output<Rational> values_from(const Problem<Rational>& p, const StateMats<Rational>& X) { return exact::evaluate_from(p, X); }
  static Output<Rational> mag_from(const Problem<Rational>& p, const StateMats<Rational>& X) { return exact::magnitude_from(p, X); }
};
}  // namespace

template <class S>
SequenceValues<S> evaluate_sequence(const BatchProblem& p, Index b, Index h, Index t0, Index t1, bool with_sd, bool with_values) {
  using E = Engine<S>;
  const Problem<S> ph = p.head<S>(b, h, t0, t1);
  SequenceValues<S> r;
  if (!p.has_state()) {
    if (with_values) r.values = E::values(ph), r.magnitude = E::mag(ph);
    r.sd_magnitude = with_sd ? E::mag(ph, true) : r.magnitude;
    return r;
  }
  const StateMats<S> X = p.head_state<S>(p.sequence_of(b, t0), h);
  if (with_values) r.values = E::values_from(ph, X);
  r.magnitude = E::mag_from(ph, X);  // from a state also a part of the state-difference magnitude
  if (!with_sd) {
    r.sd_magnitude = r.magnitude;
    return r;
  }
  // The unmasked-order magnitude from a state: that of the tokens from the
  // members the unmasked state shares with the masked one (S, C or P; an
  // unmasked-only member such as hla3's SQ is not given: zero), plus the
  // masked magnitude, which holds the state's own terms.
  Problem<S> un = ph;
  un.opt.masked = false;
  const auto from = state_layout(p.opt, p.d, p.dv), to = state_layout(un.opt, p.d, p.dv);
  StateMats<S> Y;
  for (size_t i = 0; i < to.size(); ++i) Y.push_back(from[i].name == to[i].name ? X[i] : Mat<S>(Mat<S>::Zero(to[i].rows, to[i].width())));
  r.sd_magnitude = E::mag_from(un, Y);
  r.sd_magnitude.num += r.magnitude.num;
  r.sd_magnitude.den += r.magnitude.den;
  return r;
}
template SequenceValues<Rational> evaluate_sequence(const BatchProblem&, Index, Index, Index, Index, bool, bool);
template SequenceValues<f113> evaluate_sequence(const BatchProblem&, Index, Index, Index, Index, bool, bool);
template SequenceValues<double> evaluate_sequence(const BatchProblem&, Index, Index, Index, Index, bool, bool);

void fill_state_difference_magnitude(const BatchProblem& p, Reference& ref) {
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  if (!has_state_difference_magnitude(p.opt)) {
    ref.mag_num_sd = ref.mag_num;
    ref.mag_den_sd = ref.mag_den;
    return;
  }
  ref.mag_num_sd.assign(no, 0);
  ref.mag_den_sd.assign(nd, 0);
  struct Task {
    Index b, h, t0, t1;
  };
  std::vector<Task> tasks;
  double work = 0;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    tasks.push_back({b, h, t0, t1});
    work += static_cast<double>(t1 - t0) * p.d * (p.d + p.dv);
  });
  parallel_for(tasks.size(), work <= 0x1p20 ? 1 : worker_threads(), [&](size_t i) {
    const auto [b, h, t0, t1] = tasks[i];
    // Large heads: the unmasked operator on absolute values by the fast double
    // engine; its magnitude is within phi·2^-53·M + alpha of the exact one, so
    // (M̂ + 2 alpha)(1 + 2(phi + 2)·2^-53) bounds it from above (the +2: this
    // line's own roundings). Small heads keep the streaming form (as fixtures
    // of earlier versions store it): both are upper bounds of the same magnitude.
    if (fast::supports(p.opt.variant) && !p.has_state() && static_cast<double>(t1 - t0) * p.d * (p.d + p.dv) > 0x1p22 &&
        p.head_finite(b, h, t0, t1)) {
      Options un = p.opt;
      un.masked = false, un.normalize = false, un.scale = abs(p.opt.scale);
      auto at = [&](const std::vector<double>& x, auto index) {
        return [&x, index](Index t, Index c) { return std::fabs(x[index(t, c)]); };
      };
      const fast::HeadResult<double> r = fast::evaluate_head(fast::make_fast_head<double>(
          un, t1 - t0, p.d, p.dv, at(p.q, [&, b = b, h = h, t0 = t0](Index t, Index c) { return p.q_index(b, h, t0 + t, c); }),
          at(p.k, [&, b = b, h = h, t0 = t0](Index t, Index c) { return p.k_index(b, h, t0 + t, c); }),
          at(p.v, [&, b = b, h = h, t0 = t0](Index t, Index c) { return p.v_index(b, h, t0 + t, c); }), 64, false));
      if (r.finite) {
        for (Index t = t0; t < t1; ++t) {
          const size_t row = static_cast<size_t>(t - t0);
          const double up = 1 + 2 * (r.phi[row] + 2) * 0x1p-53, a = r.tiny ? 2 * r.alpha[row] : 0;
          // On |inputs| the computed value is the magnitude, with the same bound.
          ref.mag_den_sd[p.den_index(b, h, t)] = (r.val.at(t - t0, p.dv) + a) * up;
          for (Index c = 0; c < p.dv; ++c) ref.mag_num_sd[p.out_index(b, h, t, c)] = (r.val.at(t - t0, c) + a) * up;
        }
        return;
      }
    }
    // Sums of non-negative terms: relative error at most K·2^-53 (K = depth_bound;
    // a state's terms pass fewer roundings than the tokens'); scaling by
    // 1 + 2K·2^-53 makes the double an upper bound.
    const Output<double> m = evaluate_sequence<double>(p, b, h, t0, t1, true, false).sd_magnitude;
    const double up = 1 + 2 * depth_bound(p.opt.variant, t1 - t0, p.d) * std::ldexp(1.0, -53);
    for (Index t = t0; t < t1; ++t) {
      ref.mag_den_sd[p.den_index(b, h, t)] = m.den(t - t0) * up;
      for (Index c = 0; c < p.dv; ++c) ref.mag_num_sd[p.out_index(b, h, t, c)] = m.num(t - t0, c) * up;
    }
  });
}

bool is_complete(const Reference& ref) {
  return ref.num.size() == ref.out.size() && ref.mag_num_sd.size() == ref.mag_num.size() && ref.mag_den_sd.size() == ref.mag_den.size() &&
         ref.final_state.mag_sd.size() == ref.final_state.mag.size();
}

void complete_reference(const BatchProblem& p, Reference& ref) {
  if (ref.num.size() != ref.out.size()) {
    ref.num = ref.out;
    if (p.opt.normalize) {
      const double eps = to_double(p.opt.eps);
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < p.heads; ++h)
          for (Index t = 0; t < p.n; ++t)
            for (Index c = 0; c < p.dv; ++c)
              ref.num[p.out_index(b, h, t, c)] *= normalizer(ref.den[p.den_index(b, h, t)], eps, p.opt.eps_mode);
    }
  }
  if (ref.mag_num_sd.size() != ref.mag_num.size() || ref.mag_den_sd.size() != ref.mag_den.size()) fill_state_difference_magnitude(p, ref);
  if (ref.final_state.mag_sd.size() != ref.final_state.mag.size()) fill_state_difference_state_magnitude(p, ref.final_state);
}

bool exact_options_cheap(const Options& o) {
  auto bits = [](const Rational& x) { return mp::msb(mp::abs(mp::numerator(x)) + 1) + mp::msb(mp::denominator(x)) + 1; };
  // gamma enters as gamma^(3n): its size multiplies every number of the exact
  // evaluation; the others enter a fixed number of times.
  return bits(o.gamma) <= 128 && bits(o.scale) <= 256 && bits(o.eps) <= 256 && bits(o.lambda) <= 256;
}

bool exact_applies(const BatchProblem& p, Index exact_max_n) {
  bool exact = p.d <= 16 && p.dv <= 16 && p.all_finite() && exact_options_cheap(p.opt);
  for (const auto& [t0, t1] : p.sequences()) exact = exact && t1 - t0 <= exact_max_n;
  return exact;
}

Reference compute_reference(const BatchProblem& p, Index exact_max_n, double max_seconds) {
  ReferenceOptions o;
  o.exact_max_n = exact_max_n;
  o.max_seconds = max_seconds;
  return compute_reference(p, o);
}

namespace {

// A head × sequence: what the reference computes in one piece.
struct HeadTask {
  Index b, h, t0, t1;
};

// How the reference computes each head: exact rationals (all small), else the
// fast engine (its own inputs finite), else binary128; exact_fallback (engine
// first): a head the fast engine leaves uncertified anywhere in exact rationals.
struct ReferenceMode {
  bool exact, fast, exact_fallback;
};

// Whether any token of the head is flagged uncertified.
bool head_uncertified(const Sink& s, const HeadTask& t) {
  for (Index i = t.t0; i < t.t1; ++i) {
    if (s.ref.den_flags[s.p.den_index(t.b, t.h, i)] & kUncertified) return true;
    for (Index c = 0; c < s.p.dv; ++c)
      if (s.ref.flags[s.p.out_index(t.b, t.h, i, c)] & kUncertified) return true;
  }
  return false;
}

// One head of the reference into s: exact rationals, else the fast engine (the
// tokens it could not certify again in binary128 when that is cheap, or the
// whole head in exact rationals with exact_fallback), else binary128; the stats
// and bits counted under mu.
void reference_head(Sink& s, const HeadTask& t, ReferenceMode mode, const ReferenceOptions& opt, std::mutex& mu) {
  const BatchProblem& p = s.p;
  Reference& ref = s.ref;
  auto exact = [&] {
    try {
      exact_head(s, t.b, t.h, t.t0, t.t1);
      std::lock_guard lock(mu);
      ++ref.stats.exact;
      return true;
    } catch (const std::domain_error&) {  // den + ε = 0 exactly: let binary128 flag the pole
      std::lock_guard lock(mu);
      ref.bits = 113;
      return false;
    }
  };
  if (mode.exact && exact()) return;
  if (mode.fast && p.head_finite(t.b, t.h, t.t0, t.t1)) {  // a NaN/Inf input elsewhere does not reach this head
    const FastHeadOutcome r = fast_head(p, ref, t.b, t.h, t.t0, t.t1, opt.chunk, opt.double_magnitudes_above);
    if (r.ok && mode.exact_fallback && (r.redo > 0 || head_uncertified(s, t))) {
      clear_flags(s, t.b, t.h, t.t0, t.t1);
      if (exact()) return;  // else a pole: binary128 below
    } else if (r.ok) {
      const bool redo = r.redo > 0 && static_cast<double>(r.redo) * p.d * (p.d + p.dv) <= opt.recompute_work;
      if (redo) {
        clear_flags(s, t.b, t.h, t.t0, t.t0 + r.redo);
        f113_head(s, t.b, t.h, t.t0, t.t0 + r.redo, t.t1 - t.t0);
      }
      std::lock_guard lock(mu);
      ++ref.stats.fast;
      if (redo) ++ref.stats.recomputed;
      else if (r.redo > 0) ref.bits = std::min(ref.bits == 0 ? 113 : ref.bits, 106);
      return;
    }
  }
  f113_head(s, t.b, t.h, t.t0, t.t1);
  std::lock_guard lock(mu);
  ++ref.stats.binary128;
}

// run(i) for every i < total on `threads` workers (this one among them), in
// index order of taking; after each, done(i) under mu. The first exception
// stops the workers and is rethrown.
template <class Run, class Done> void run_tasks(size_t total, int threads, std::mutex& mu, Run&& run, Done&& done) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= total) return;
      {
        std::lock_guard lock(mu);
        if (error) return;
      }
      try {
        run(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
        return;
      }
      std::lock_guard lock(mu);
      done(i);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

namespace {

// The outputs' reference (all but the final state), every head exact or none;
// or with exact_fallback (engine first) exact where the fast engine is uncertified.
Reference outputs_reference(const BatchProblem& p, const ReferenceOptions& opt, bool exact, bool exact_fallback = false) {
  Reference ref;
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  for (auto* x : {&ref.out, &ref.num, &ref.mag_num, &ref.mag_num_sd}) x->assign(no, 0);
  for (auto* x : {&ref.mag_den_sd, &ref.den, &ref.mag_den}) x->assign(nd, 0);
  ref.flags.assign(no, 0);
  ref.den_flags.assign(nd, 0);
  const bool fast = !exact && opt.fast;
  ref.bits = exact ? 0 : 113;
  Sink s{ref, p};
  const auto start = std::chrono::steady_clock::now();
  std::vector<HeadTask> tasks;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { tasks.push_back({b, h, t0, t1}); });
  const size_t total = tasks.size();
  // Work of a head, for progress: tokens · d · (d + dv) · order.
  auto work = [&](const HeadTask& t) { return static_cast<double>(t.t1 - t.t0) * p.d * (p.d + p.dv) * order_of(p.opt.variant); };
  double total_work = 0;
  for (const HeadTask& t : tasks) total_work += work(t);
  std::atomic<size_t> done{0};
  std::mutex mu;  // stats, bits, progress, the first error
  double work_done = 0;
  // Exact rationals and small problems (a fuzz case: starting threads costs
  // more than they save) stay single-threaded; the others use every worker.
  const int threads =
      exact || total_work <= 0x1p20 ? 1 : std::min<int>(worker_threads(opt.threads), static_cast<int>(std::max<size_t>(total, 1)));
  run_tasks(
      total, threads, mu,
      [&](size_t i) {
        if (opt.max_seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > opt.max_seconds)
          throw InputError("computing the reference exceeded its budget of " + std::to_string(opt.max_seconds) + " s after " +
                           std::to_string(done.load()) + " of " + std::to_string(total) + " heads×sequences (raise it with --budget)");
        reference_head(s, tasks[i], {exact, fast, exact_fallback}, opt, mu);
        ++done;
      },
      [&](size_t i) {
        work_done += work(tasks[i]);
        if (opt.progress) opt.progress(work_done, total_work);
      });
  if (ref.bits == 0 && !exact) ref.bits = 113;
  // Binary128 and fast heads: the state-difference magnitude in double (exact heads filled it exactly).
  if (ref.bits != 0) fill_state_difference_magnitude(p, ref);
  ref.stats.heads = total;
  ref.stats.elements = no + nd;
  for (uint8_t f : ref.flags) ref.stats.uncertified += (f & kUncertified) != 0;
  for (uint8_t f : ref.den_flags) ref.stats.uncertified += (f & kUncertified) != 0;
  return ref;
}

}  // namespace

Reference compute_reference(const BatchProblem& p, const ReferenceOptions& opt) {
  p.validate(true);  // NaN/Inf inputs (causality probes) propagate through binary128
  const bool exact = exact_applies(p, opt.exact_max_n);
  // Engine first: each head the fast engine cannot certify in exact rationals
  // (not every head again: 17% of a fuzz campaign's time went there).
  Reference ref = exact && opt.engine_first ? outputs_reference(p, opt, false, true) : outputs_reference(p, opt, exact);
  // The final state by the outputs' route: the engine first where they try it, exact where it applies.
  if (opt.final_state) ref.final_state = compute_state_reference(p, opt.exact_max_n, opt.engine_first);
  return ref;
}

}  // namespace hla::engine
