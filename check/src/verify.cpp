// A fixture's reference must belong to its inputs: a digest only
// shows that a file changed, so every read also proves, from the inputs, that
// the stored reference, magnitudes and flags are what an honest generator
// writes. Our float64 streaming evaluation is within (K+1)·u64·M of the exact
// value (the a priori bound every fast form of ours meets), the stored f64
// reference within 1 ulp of it; so the two differ by at most (K+2)·u64·M.
#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"

#include "hla/bounds.hpp"
#include "hla/evaluate.hpp"
#include "hla/fast/engine.hpp"
#include "hla/io/printable.hpp"
#include "internal.hpp"

#include <cmath>
#include <cstdio>
#include <atomic>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace hla::check {

using engine::compute_reference;
using engine::evaluate_sequence;
using engine::gradient_depth_bound;
using engine::has_state_difference_magnitude;
using engine::kIllConditioned;
using engine::kUncertified;

namespace {

// One head's values from our evaluation, in double.
struct HeadValues {
  std::vector<double> out, num, den;          // [n, dv], [n, dv], [n]
  std::vector<double> mag_num, mag_den;        // masked magnitude
  std::vector<double> sd_num, sd_den;          // unmasked-order magnitude (= masked when none)
  std::vector<double> err_num, err_den;        // the magnitude the streaming form's error scales with
  // The fast engine's running bound per token (phi in units of 2^-53, alpha
  // absolute); empty for the streaming form, whose a priori bound is K.
  std::vector<double> phi, alpha;
};

// The same values from the fast engine in double (the chunked matmul form,
// which only adds terms: its error scales with the masked magnitude), with its
// running bound. Inputs finite; the variant has a chunked form.
HeadValues fast_head_values(const BatchProblem& p, Index b, Index h, Index t0, Index t1, bool with_unmasked) {
  const Options& o = p.opt;
  const Index n = t1 - t0;
  auto run = [&](const Options& opt, bool absolute) {
    auto at = [&](const std::vector<double>& x, auto index) {
      return [&, index](Index t, Index c) { return absolute ? std::fabs(x[index(t, c)]) : x[index(t, c)]; };
    };
    return fast::evaluate_head(fast::make_fast_head<double>(
        opt, n, p.d, p.dv, at(p.q, [&](Index t, Index c) { return p.q_index(b, h, t0 + t, c); }),
        at(p.k, [&](Index t, Index c) { return p.k_index(b, h, t0 + t, c); }),
        at(p.v, [&](Index t, Index c) { return p.v_index(b, h, t0 + t, c); }), 64, !absolute));
  };
  const fast::HeadResult<double> r = run(o, false);
  HeadValues v;
  const double eps = to_double(o.eps);
  for (Index t = 0; t < n; ++t) {
    const double den = r.val.at(t, p.dv);
    v.den.push_back(den);
    v.mag_den.push_back(r.mag.at(t, p.dv));
    for (Index c = 0; c < p.dv; ++c) {
      const double num = r.val.at(t, c);
      v.num.push_back(num);
      v.out.push_back(o.normalize ? num / normalizer(den, eps, o.eps_mode) : num);
      v.mag_num.push_back(r.mag.at(t, c));
    }
    v.phi.push_back(r.phi[static_cast<size_t>(t)]);
    v.alpha.push_back(r.tiny ? r.alpha[static_cast<size_t>(t)] : 0.0);
  }
  v.err_num = v.mag_num, v.err_den = v.mag_den;
  if (!r.finite) v.out.assign(v.out.size(), NAN);  // overflow: the caller retries in binary128
  if (with_unmasked && has_state_difference_magnitude(o)) {
    // The unmasked operator on absolute values: its value is the
    // unmasked-order magnitude (no magnitude half needed).
    Options un = o;
    un.masked = false;
    un.scale = abs(o.scale);
    const fast::HeadResult<double> s = run(un, true);
    for (Index t = 0; t < n; ++t) {
      v.sd_den.push_back(s.val.at(t, p.dv));  // on |inputs| the value is the magnitude
      for (Index c = 0; c < p.dv; ++c) v.sd_num.push_back(s.val.at(t, c));
      v.phi[static_cast<size_t>(t)] = std::max(v.phi[static_cast<size_t>(t)], s.phi[static_cast<size_t>(t)]);
      if (s.tiny) v.alpha[static_cast<size_t>(t)] = std::max(v.alpha[static_cast<size_t>(t)], s.alpha[static_cast<size_t>(t)]);
    }
    if (!s.finite) v.out.assign(v.out.size(), NAN);
  } else {
    v.sd_num = v.mag_num, v.sd_den = v.mag_den;
  }
  return v;
}

template <class S> HeadValues evaluate_head(const BatchProblem& p, Index b, Index h, Index t0, Index t1) {
  const Options& o = p.opt;
  const bool sd = has_state_difference_magnitude(o);
  const auto [v, m, msd] = evaluate_sequence<S>(p, b, h, t0, t1, sd);
  const bool subtracts = subtracts_partial_sums(o, Form::streaming) && sd;
  HeadValues r;
  auto flat = [](const auto& x) {
    std::vector<double> out;
    for (Index i = 0; i < x.rows(); ++i)
      for (Index j = 0; j < x.cols(); ++j) out.push_back(static_cast<double>(x(i, j)));
    return out;
  };
  r.out = flat(v.out), r.num = flat(v.num), r.den = flat(v.den);
  r.mag_num = flat(m.num), r.mag_den = flat(m.den);
  r.sd_num = flat(msd.num), r.sd_den = flat(msd.den);
  r.err_num = subtracts ? r.sd_num : r.mag_num;
  r.err_den = subtracts ? r.sd_den : r.mag_den;
  return r;
}

bool all_finite(const HeadValues& v) {
  for (const auto* x : {&v.out, &v.num, &v.den, &v.mag_num, &v.mag_den, &v.sd_num, &v.sd_den})
    for (double e : *x)
      if (!std::isfinite(e)) return false;
  return true;
}

// Collects mismatches: a count per tensor and the first few in words.
struct Findings {
  std::map<std::string, size_t> count;
  std::vector<std::string> first;
  std::vector<std::pair<std::string, std::string>> first_of_tensor;  // in order of first occurrence (for merging)
  void add(const std::string& tensor, const std::string& what) {
    if (count[tensor]++ == 0) {
      if (first.size() < 4) first.push_back(what);
      first_of_tensor.emplace_back(tensor, what);
    }
  }
  // As if other's findings had been added after these, one by one.
  void merge(const Findings& other) {
    for (const auto& [tensor, what] : other.first_of_tensor)
      if (count[tensor] == 0) {
        if (first.size() < 4) first.push_back(what);
        first_of_tensor.emplace_back(tensor, what);
      }
    for (const auto& [tensor, n] : other.count) count[tensor] += n;
  }
  [[noreturn]] void raise(const std::string& how) const {
    std::string s = "this fixture does not match its inputs (" + how + "):";
    for (const auto& [t, n] : count) s += " " + t + " " + std::to_string(n) + " element(s);";
    for (const auto& w : first) s += "\n    " + w;
    s += "\n  the file was edited or generated from other inputs or options; regenerate it";
    throw InputError(s);
  }
};

std::string at(const char* tensor, Index b, Index h, Index t, Index c = -1) {
  return std::string(tensor) + "[" + std::to_string(b) + "," + std::to_string(h) + "," + std::to_string(t) +
         (c >= 0 ? "," + std::to_string(c) : "") + "]";
}

// The fixture's fields that contradict each other, into bad.
void contradictions(const io::Fixture& f, Findings& bad) {
  const BatchProblem& p = f.problem;
  if (f.exact_tier && f.reference_bits != 0)
    bad.add("metadata", "exact_tier = true needs an exact reference, but reference_bits = " + std::to_string(f.reference_bits));
  if (f.reference_bits != 0 && f.reference_bits < 100)
    bad.add("metadata", "reference_bits = " + std::to_string(f.reference_bits) + ": a reference needs at least 100 bits");
  if (f.exact_tier && !p.all_finite()) bad.add("metadata", "exact_tier = true with NaN/Inf inputs");
  for (size_t i = 0; i < f.den_flags.size(); ++i)
    if (f.den_flags[i] & io::kFlagIllConditioned) bad.add("den_flags", "den_flags[" + std::to_string(i) + "] says ill-conditioned, which only a normalized output can be");
  if (!p.opt.normalize)
    for (size_t i = 0; i < f.flags.size(); ++i)
      if (f.flags[i] & io::kFlagIllConditioned) bad.add("flags", "flags[" + std::to_string(i) + "] says ill-conditioned on a problem that is not normalized");
}

// A normalized ref_out[i] (head b, h, token t, column col; li its index in v):
// a quotient of our num and den within their bounds (residual, the comparison's
// c and slack), or non-finite only where den ⊕ ε may be 0.
void verify_normalized_out(const io::Fixture& f, const HeadValues& v, Index b, Index h, Index t, Index col, size_t i, size_t li,
                           size_t lt, double c, double slack, Findings& bad) {
  const Options& o = f.problem.opt;
  const double u = std::ldexp(1.0, -53), eps = to_double(o.eps);
  const double D = normalizer(v.den[lt], eps, o.eps_mode), MD = v.err_den[lt] + eps;
  const double out = f.ref_out[i], N = v.num[li], MN = v.err_num[li];
  if (!std::isfinite(N) || !std::isfinite(D)) {
    if (std::isfinite(out)) bad.add("ref_out", at("ref_out", b, h, t, col) + " = " + num(out) + " is finite, but it depends on a NaN/Inf input");
    return;
  }
  const bool near_pole = o.eps_mode == EpsMode::add ? std::fabs(D) <= c * MD + slack : std::fabs(v.den[lt]) <= c * v.err_den[lt] + slack;
  if (!std::isfinite(out)) {
    if (!near_pole) bad.add("ref_out", at("ref_out", b, h, t, col) + " = " + num(out) + ", but the inputs give den + eps = " + num(D) + ", far from 0");
    return;
  }
  const double tol = (c + 2 * u) * (MN + std::fabs(out) * MD) + slack;
  double r = std::fabs(out * D - N);
  if (o.eps_mode == EpsMode::clamp && near_pole) r = std::min(r, std::fabs(out * -D - N));
  if (!(r <= tol))
    bad.add("ref_out", at("ref_out", b, h, t, col) + " = " + num(out) + ", but the inputs give num / (den ⊕ eps) = " + num(N) + " / " + num(D) +
                           " (residual " + num(r) + ", allowed " + num(tol) + ")");
}

// One head's sequence [t0, t1): the stored reference, magnitudes and (exact
// tier) values against ours from its inputs, into bad.
void verify_head(const io::Fixture& f, Index b, Index h, Index t0, Index t1, bool sd_stored, Findings& bad) {
  const BatchProblem& p = f.problem;
  const Options& o = p.opt;
  const double u = std::ldexp(1.0, -53), slack0 = std::ldexp(1.0, -1000);
  const bool finite_inputs = p.head_finite(b, h, t0, t1);
  // The fast engine (GEMM-shaped, with its own running bound) where it
  // applies, else the streaming form; float64 may overflow where the exact
  // value does not: then binary128.
  // (From an initial state: the streaming form, which starts from it.)
  HeadValues v = fast::supports(o.variant) && finite_inputs && !p.has_state() ? fast_head_values(p, b, h, t0, t1, sd_stored)
                                                                              : evaluate_head<double>(p, b, h, t0, t1);
  if (!all_finite(v) && finite_inputs) v = evaluate_head<f113>(p, b, h, t0, t1);
  const double K = depth_bound(o.variant, t1 - t0, p.d);
  double c = (K + 2) * u, slack = slack0;
  // |stored − ours| within c·M; both non-finite (a NaN/Inf input reaches both) agrees.
  auto close = [&](double stored, double ours, double M) {
    if (!std::isfinite(stored) || !std::isfinite(ours)) return !std::isfinite(stored) && !std::isfinite(ours);
    return std::fabs(stored - ours) <= c * M + slack;
  };
  auto compare = [&](const char* tensor, double stored, double ours, double M, Index t, Index col, double scale = 1) {
    if (!close(stored, ours, scale * M))
      bad.add(tensor, at(tensor, b, h, t, col) + " = " + num(stored) + ", but the inputs give " + num(ours) +
                       " (allowed difference " + num(c * scale * M + slack) + ")");
  };
  // A generator may store the unmasked-order magnitude as a float64 sum
  // rounded up by 2K·u (fill_state_difference_magnitude): three times the room.
  const double up = 3;
  for (Index t = t0; t < t1; ++t) {
    const size_t lt = static_cast<size_t>(t - t0), di = p.den_index(b, h, t);
    // The fast engine's own bound where it is larger than K (never tighter than the a priori one).
    if (!v.phi.empty()) c = (std::max(K, v.phi[lt]) + 2) * u, slack = slack0 + 2 * v.alpha[lt];
    compare("mag_den", f.mag_den[di], v.mag_den[lt], v.mag_den[lt], t, -1);
    if (sd_stored) compare("mag_den_unmasked", f.mag_den_unmasked[di], v.sd_den[lt], v.sd_den[lt], t, -1, up);
    compare("ref_den", f.ref_den[di], v.den[lt], v.err_den[lt], t, -1);
    if (f.exact_tier && !(f.ref_den[di] == v.den[lt]))
      bad.add("ref_den", at("ref_den", b, h, t) + " = " + num(f.ref_den[di]) + " differs from the exact-tier value " + num(v.den[lt]));
    for (Index col = 0; col < p.dv; ++col) {
      const size_t i = p.out_index(b, h, t, col), li = lt * static_cast<size_t>(p.dv) + static_cast<size_t>(col);
      compare("mag_num", f.mag_num[i], v.mag_num[li], v.mag_num[li], t, col);
      if (sd_stored) compare("mag_num_unmasked", f.mag_num_unmasked[i], v.sd_num[li], v.sd_num[li], t, col, up);
      if (!f.ref_num.empty()) compare("ref_num", f.ref_num[i], v.num[li], v.err_num[li], t, col);
      if (f.exact_tier && !(f.ref_out[i] == v.out[li]))
        bad.add("ref_out", at("ref_out", b, h, t, col) + " = " + num(f.ref_out[i]) + " differs from the exact-tier value " + num(v.out[li]));
      if (o.normalize) verify_normalized_out(f, v, b, h, t, col, i, li, lt, c, slack, bad);
      else compare("ref_out", f.ref_out[i], v.out[li], v.err_num[li], t, col);
    }
  }
}

}  // namespace

void verify_fixture(const io::Fixture& f, const std::function<void(double, double)>& progress, bool with_unmasked) {
  const BatchProblem& p = f.problem;
  Findings bad;
  contradictions(f, bad);
  if (!bad.count.empty()) bad.raise("contradictory fields");

  const bool sd_stored = with_unmasked && !f.mag_num_unmasked.empty();
  struct Task {
    Index b, h, t0, t1;
  };
  std::vector<Task> tasks;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) { tasks.push_back({b, h, t0, t1}); });
  // Heads in parallel, each with its own findings, merged in order (the same report as one pass).
  std::vector<Findings> found(tasks.size());
  std::atomic<size_t> done{0};
  std::mutex mu;  // progress
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {
    verify_head(f, tasks[i].b, tasks[i].h, tasks[i].t0, tasks[i].t1, sd_stored, found[i]);
    const size_t d = ++done;
    if (progress) {
      std::lock_guard lock(mu);
      progress(static_cast<double>(d), static_cast<double>(tasks.size()));
    }
  });
  for (const Findings& fnd : found) bad.merge(fnd);
  if (bad.count.empty()) verify_final_state(f, [&](const std::string& t, const std::string& what) { bad.add(t, what); });
  // Gradients: a float64 backward of the stored inputs and upstream.
  if (f.gradients && bad.count.empty()) {
    if (!p.all_finite()) bad.add("metadata", "gradients with NaN/Inf inputs (a gradient fixture's inputs are finite)");
    else {
      const Reference r = reference_of(f);
      verify_gradients(p, r, r.grad.value(), [&](const std::string& t, const std::string& what) { bad.add(t, what); });
    }
  }
  if (!bad.count.empty()) bad.raise("checked against a float64 evaluation of its inputs within the a priori bound");
}

void verify_inputs(const io::Fixture& f, double max_seconds) {
  const BatchProblem& p = f.problem;
  const Reference r = compute_reference(p, engine::kExactMaxN, max_seconds);
  Findings bad;
  // A recomputation gives the same doubles; an element the generator could not
  // certify may differ in its last bits, within the a priori bound.
  const double c = (depth_bound(p.opt.variant, p.n, p.d) + 2) * std::ldexp(1.0, -53);
  auto same = [&](const char* tensor, const std::vector<double>& stored, const std::vector<double>& fresh,
                  const std::vector<double>& mag, const std::vector<uint8_t>& flags) {
    if (stored.empty()) return;
    for (size_t i = 0; i < stored.size(); ++i) {
      const double a = stored[i], x = fresh[i];
      if (a == x || (std::isnan(a) && std::isnan(x))) continue;
      const bool uncertified = i < flags.size() && (flags[i] & kUncertified);
      if (uncertified && std::isfinite(a) && std::fabs(a - x) <= c * mag[i]) continue;
      bad.add(tensor, std::string(tensor) + "[" + std::to_string(i) + "] = " + num(a) + ", recomputed " + num(x));
    }
  };
  same("ref_out", f.ref_out, r.out, r.mag_num_sd, r.flags);
  same("ref_den", f.ref_den, r.den, r.mag_den_sd, r.den_flags);
  if (!f.ref_num.empty()) same("ref_num", f.ref_num, r.num, r.mag_num_sd, r.flags);
  same("mag_num", f.mag_num, r.mag_num, r.mag_num, {});
  same("mag_den", f.mag_den, r.mag_den, r.mag_den, {});
  same("mag_num_unmasked", f.mag_num_unmasked, r.mag_num_sd, r.mag_num_sd, {});
  same("mag_den_unmasked", f.mag_den_unmasked, r.mag_den_sd, r.mag_den_sd, {});
  auto flags = [&](const char* tensor, const std::vector<uint8_t>& stored, const std::vector<uint8_t>& fresh) {
    for (size_t i = 0; i < fresh.size(); ++i)
      if ((stored.empty() ? 0 : stored[i]) != fresh[i])
        bad.add(tensor, std::string(tensor) + "[" + std::to_string(i) + "] = " + std::to_string(stored.empty() ? 0 : stored[i]) +
                            ", recomputed " + std::to_string(fresh[i]));
  };
  flags("flags", f.flags, r.flags);
  flags("den_flags", f.den_flags, r.den_flags);
  const engine::StateReference& st = r.final_state;
  if (!f.final_state.empty() || !st.values.empty()) {
    same("state", f.final_state, st.values, st.mag, st.flags);
    same("mag_state", f.mag_final_state, st.mag, st.mag, {});
    flags("state_flags", f.final_state_flags, f.final_state.empty() ? std::vector<uint8_t>{} : st.flags);
  }
  if (f.gradients) {
    const GradientReference g = compute_gradient_reference(p, r, f.dout, f.dden);
    const double cg = (gradient_depth_bound(p.opt, p.n, p.d, p.dv) + 2) * std::ldexp(1.0, -53);
    auto near = [&](const char* tensor, const std::vector<double>& stored, const std::vector<double>& fresh, const std::vector<double>& mag,
                    const std::vector<uint8_t>& fl) {
      for (size_t i = 0; i < stored.size(); ++i) {
        const double a = stored[i], x = fresh[i];
        if (a == x) continue;
        // Uncertified elements may differ in their last bits (ill-conditioned ones by more: not compared).
        if (fl[i] & kIllConditioned) continue;
        if ((fl[i] & kUncertified) && std::fabs(a - x) <= cg * mag[i]) continue;
        bad.add(tensor, std::string(tensor) + "[" + std::to_string(i) + "] = " + num(a) + ", recomputed " + num(x));
      }
    };
    near("ref_dq", f.ref_dq, g.dq, g.mag_dq, g.dq_flags);
    near("ref_dk", f.ref_dk, g.dk, g.mag_dk, g.dk_flags);
    near("ref_dv", f.ref_dv, g.dv, g.mag_dv, g.dv_flags);
    same("mag_dq", f.mag_dq, g.mag_dq, g.mag_dq, {});
    same("mag_dk", f.mag_dk, g.mag_dk, g.mag_dk, {});
    same("mag_dv", f.mag_dv, g.mag_dv, g.mag_dv, {});
    flags("dq_flags", f.dq_flags, g.dq_flags);
    flags("dk_flags", f.dk_flags, g.dk_flags);
    flags("dv_flags", f.dv_flags, g.dv_flags);
    near("ref_dstate", f.ref_dstate, g.dstate, g.mag_dstate, g.dstate_flags);
    same("mag_dstate", f.mag_dstate, g.mag_dstate, g.mag_dstate, {});
    flags("dstate_flags", f.dstate_flags, f.ref_dstate.empty() ? std::vector<uint8_t>{} : g.dstate_flags);
  }
  if (!bad.count.empty()) bad.raise("--verify-inputs: recomputed from its inputs in " + std::string(r.bits ? "binary128" : "exact rationals"));
}

}  // namespace hla::check
