#include "hla/fuzz/campaign.hpp"

#include "hla/fuzz/features.hpp"
#include "hla/fuzz/gradients.hpp"
#include "hla/fuzz/signals.hpp"
#include "hla_impl.h"
#include "process.hpp"
#include "state_backward.hpp"

#include "hla/check/fixture.hpp"
#include "hla/io/atomic_file.hpp"
#include "hla/io/printable.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

namespace hla::fuzz {
namespace {

namespace fs = std::filesystem;

Verdict failed_run(const RunResult& r) {
  Verdict v;
  v.kind = to_string(r.status), v.message = r.message;
  return v;
}

// The check could not judge (too little scored): not a pass, not a finding.
Verdict inconclusive() {
  Verdict v;
  v.inconclusive = true;
  return v;
}

std::string failed_rules(const check::Report& r) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : ",") + std::string(name);
  };
  add(r.nonfinite > 0, "nonfinite");
  add(r.over_bound > 0, "bound");
  add(!(r.baseline_ratio <= r.ratio_limit), "ratio");
  add(r.exact_mismatches > 0, "exact");
  for (const auto& g : r.gradients) {
    add(g.nonfinite > 0 && s.find("grad_nonfinite") == std::string::npos, "grad_nonfinite");
    add(g.over_bound > 0 && s.find("grad_bound") == std::string::npos, "grad_bound");
    add(g.over_ratio && s.find("grad_ratio") == std::string::npos, "grad_ratio");
    add(g.exact_mismatches > 0 && s.find("grad_exact") == std::string::npos, "grad_exact");
  }
  return s;
}

// Rules that cannot fail on r's case: rule 3 of gradients where it does not
// apply (normalized, a 16-bit precision, from a state).
std::string unapplied_rules(const check::Report& r) {
  bool applied = r.gradients.empty();
  for (const auto& g : r.gradients) applied = applied || g.baseline_applied;
  return applied ? "" : "grad_ratio";
}

bool forward_fails(const check::Report& r) {
  return r.nonfinite > 0 || r.over_bound > 0 || !(r.baseline_ratio <= r.ratio_limit) || r.exact_mismatches > 0;
}

// The tensor that failed: out or den (the worst element's) when the outputs
// fail, else the first failing gradient or final-state part.
std::string failing_tensor(const check::Report& r) {
  if (forward_fails(r)) return !r.worst.empty() && r.worst.front().c < 0 ? "den" : "out";
  for (const auto* rows : {&r.gradients, &r.states})
    for (const auto& g : *rows)
      if (g.fails()) return g.name;
  return "";
}

// A failed check's verdict.
Verdict failing(const std::string& kind, const std::string& message, const engine::CandidateOutputs& out, const check::Report& rep) {
  Verdict v;
  v.kind = kind, v.message = message, v.outputs = out, v.has_outputs = true;
  v.rules = failed_rules(rep), v.unapplied = unapplied_rules(rep), v.other_class_passes = rep.passing_class.has_value();
  v.tensor = failing_tensor(rep), v.cause = cause_of(rep);
  return v;
}

// What the shrinker could not take away from a failing case.
std::string features_of(const FuzzCase& c) {
  std::string s = feature_names(required_features(c.p));
  if (c.p.batch * c.p.heads > 1) s += ", several heads";
  if (c.p.dtype != DType::f32) s += ", " + to_string(c.p.dtype) + " inputs";
  if (c.grad) s += c.dden.empty() ? ", gradients" : ", gradients with dden";
  return s;
}

// The rows of x ([lead][n][cols]) in the token ranges rs, in order (as
// pieces() lays them out); empty stays empty.
std::vector<double> rows_of(const std::vector<double>& x, Index lead, Index n, const Ranges& rs, Index cols) {
  std::vector<double> o;
  if (x.empty()) return o;
  for (Index i = 0; i < lead; ++i)
    for (const auto& [t0, t1] : rs)
      for (Index t = t0; t < t1; ++t)
        for (Index c = 0; c < cols; ++c) o.push_back(x[static_cast<size_t>((i * n + t) * cols + c)]);
  return o;
}
// One [lead][n][cols] from x, the rows of the ranges a (rows_of's layout), and y, those of b.
std::vector<double> stitch_rows(const std::vector<double>& x, const std::vector<double>& y, Index lead, Index n, const Ranges& a,
                                const Ranges& b, Index cols) {
  std::vector<double> o(static_cast<size_t>(lead * n * cols));
  auto place = [&](const std::vector<double>& src, const Ranges& rs) {
    size_t from = 0;
    for (Index i = 0; i < lead; ++i)
      for (const auto& [t0, t1] : rs)
        for (Index t = t0; t < t1; ++t)
          for (Index c = 0; c < cols && from < src.size(); ++c) o[static_cast<size_t>((i * n + t) * cols + c)] = src[from++];
  };
  place(x, a);
  place(y, b);
  return o;
}

// Outputs of a state case's two calls (state_parts), as one call's.
engine::CandidateOutputs stitch(const BatchProblem& p, const engine::CandidateOutputs& x, const engine::CandidateOutputs& y,
                                const Ranges& a, const Ranges& b) {
  engine::CandidateOutputs o{stitch_rows(x.out, y.out, p.batch * p.heads, p.n, a, b, p.dv), {}, x.out_dtype, x.den_dtype};
  if (!x.den.empty() && !y.den.empty()) o.den = stitch_rows(x.den, y.den, p.batch * p.heads, p.n, a, b, 1);
  return o;
}

std::string summarize(const check::Report& r) {
  std::string m = r.reasons.empty() ? "check failed" : r.reasons.front();
  // The class hint (check::explain_failure: another class passes it), in the adapter's syntax.
  for (const std::string& why : r.reasons)
    if (r.passing_class && why.rfind("hint: ", 0) == 0) m += " (" + why + ")";
  // The worst element of what failed: the outputs, else the first failing gradient.
  const check::Element* e = r.worst.empty() || !forward_fails(r) ? nullptr : &r.worst.front();
  std::string what = e && e->c < 0 ? "den" : "";
  for (const auto& g : r.gradients)
    if (!e && g.fails() && !g.worst.empty())
      e = g.over_bound || g.nonfinite || !g.over_ratio ? &g.worst.front() : &g.ratio_element, what = g.name + " ";
  if (e) {
    char buf[300];
    std::snprintf(buf, sizeof buf, "; worst: batch %ld %shead %ld token %ld %s: candidate %.9g, reference %.9g (score %.3g)",
                  static_cast<long>(e->b), what == "dk " || what == "dv " ? "kv " : "", static_cast<long>(e->h),
                  static_cast<long>(e->t), what == "den" ? "den" : (what + "column " + std::to_string(e->c)).c_str(),
                  e->candidate, e->reference, e->score);
    m += buf;
  }
  return m;
}

// The candidate's outputs of c, with its gradients when c has an upstream:
// those run() returned (an exec candidate's file, from the fixture's `do`),
// else the backward's.
RunResult run_candidate(Adapter& a, const FuzzCase& c, const engine::Reference* ref) {
  RunResult r = a.run(c.p, ref, nullptr, false);
  if (r.status != RunResult::Status::ok) return r;
  if (c.grad && r.out.dq.empty() && r.out.dk.empty() && r.out.dv.empty()) {
    RunResult g = a.run_backward(c.p, c.dout, c.dden);
    if (g.status != RunResult::Status::ok) return g;
    r.out.dq = std::move(g.out.dq), r.out.dk = std::move(g.out.dk), r.out.dv = std::move(g.out.dv);
    r.out.dq_dtype = g.out.dq_dtype, r.out.dk_dtype = g.out.dk_dtype, r.out.dv_dtype = g.out.dv_dtype;
  }
  return r;
}

// Whether the planted NaN travelled where SPEC §7 / §9 forbid: a value of
// the candidate is non-finite where the reference (NaN wherever the NaN may
// reach) is finite, and the same candidate makes it finite with the NaN as 0.
// Such an element's inputs are the same in both runs, so only the NaN can
// tell them apart; a NaN the kernel makes either way (0/0 in its padding) is
// a numerics or gradient finding, not a causality one. zero_ref: the
// reference of the case with the NaN as 0 (an exec candidate's fixture), or null.
bool nan_travelled(Adapter& a, const FuzzCase& c, const engine::Reference& ref, const engine::CandidateOutputs& got,
                   const engine::Reference* zero_ref) {
  const FuzzCase z = without_planted_nan(c);
  const RunResult r = run_candidate(a, z, zero_ref);
  if (r.status != RunResult::Status::ok) return true;  // no evidence that the kernel makes it by itself
  auto travelled = [](const std::vector<double>& reference, const std::vector<double>& with_nan, const std::vector<double>& with_0) {
    for (size_t i = 0; i < reference.size() && i < with_nan.size() && i < with_0.size(); ++i)
      if (std::isfinite(reference[i]) && !std::isfinite(with_nan[i]) && std::isfinite(with_0[i])) return true;
    return false;
  };
  if (c.grad)
    return travelled(ref.grad->dq, got.dq, r.out.dq) || travelled(ref.grad->dk, got.dk, r.out.dk) ||
           travelled(ref.grad->dv, got.dv, r.out.dv);
  return travelled(ref.out, got.out, r.out.out) || travelled(ref.den, got.den, r.out.den);
}

// The running campaign's phase clocks (Summary::phases; none outside a campaign).
thread_local Summary::Phases* phases = nullptr;

// f(), its seconds added to the running campaign's phase `field`.
template <class F> auto timed(double Summary::Phases::*field, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Add {
    double Summary::Phases::*field;
    std::chrono::steady_clock::time_point t0;
    ~Add() {
      if (phases) phases->*field += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } add{field, t0};
  return f();
}

// Whether the candidate's outputs overflowed: ±inf where the reference is
// finite (so are the inputs that element depends on), and no NaN there.
bool overflowed(const engine::Reference& ref, const engine::CandidateOutputs& got) {
  bool inf = false;
  auto scan = [&](const std::vector<double>& reference, const std::vector<double>& candidate) {
    for (size_t i = 0; i < reference.size() && i < candidate.size(); ++i)
      if (std::isfinite(reference[i]) && !std::isfinite(candidate[i])) {
        if (std::isnan(candidate[i])) return false;
        inf = true;
      }
    return true;
  };
  return scan(ref.out, got.out) && scan(ref.den, got.den) && inf;
}

// An overflow's verdict: its own kind, and rule "overflow" for "nonfinite".
Verdict overflow(Verdict v) {
  v.kind = "overflow";
  v.message = "an output overflows to ±inf from finite inputs: " + v.message;
  std::vector<std::string> rules = split_list(v.rules);
  for (auto& r : rules)
    if (r == "nonfinite") r = "overflow";
  v.rules.clear();
  for (const auto& r : rules) v.rules += (v.rules.empty() ? "" : ",") + r;
  return v;
}

// How the candidate's outputs of c are judged: as declared; our orders stop
// once a PASS is certain (CheckOptions::complete_baseline).
check::CheckOptions check_options(const Adapter& a, const FuzzCase& c) {
  check::CheckOptions opt;
  opt.precision = a.supports().precision_for(c.p.dtype);
  opt.form_class = a.supports().form_class;
  opt.interface = a.supports().interface;
  opt.exact_tier = c.exact_tier;
  opt.complete_baseline = false;
  return opt;
}

Verdict run_and_check(Adapter& a, const FuzzCase& c, const engine::Reference& ref, const engine::Reference* zero_ref = nullptr) {
  RunResult r = timed(&Summary::Phases::candidate, [&] { return run_candidate(a, c, &ref); });
  if (r.status != RunResult::Status::ok) return failed_run(r);
  const check::CheckOptions opt = check_options(a, c);
  const check::Report rep = timed(&Summary::Phases::check, [&] { return check::check(c.p, ref, r.out, opt); });
  if (rep.pass) return {};
  if (rep.inconclusive) return inconclusive();  // nothing to judge on (e.g. every output depends on a NaN input)
  std::string kind = "numerics";
  bool grad_nonfinite = false;
  for (const auto& g : rep.gradients) grad_nonfinite = grad_nonfinite || g.nonfinite > 0;
  if (c.probe == Probe::nan_causality && rep.nonfinite > 0 && nan_travelled(a, c, ref, r.out, nullptr)) kind = "nan_causality";
  else if (!forward_fails(rep) && std::none_of(rep.gradients.begin(), rep.gradients.end(), [](const auto& g) { return g.fails(); }))
    kind = "final_state";        // the outputs and gradients are right, the returned final state is not
  else if (!forward_fails(rep))  // the outputs are right, their gradients are not
    kind = c.probe == Probe::grad_nan_causality && grad_nonfinite && nan_travelled(a, c, ref, r.out, zero_ref)
               ? "gradient_nan_causality"
               : "gradient";
  else if (rep.exact_mismatches > 0 && rep.over_bound == 0 && rep.nonfinite == 0 && rep.baseline_ratio <= rep.ratio_limit) kind = "exact_tier";
  Verdict v = failing(kind, summarize(rep), r.out, rep);
  return kind == "numerics" && rep.nonfinite > 0 && overflowed(ref, r.out) ? overflow(std::move(v)) : v;
}

void note(const CampaignOptions& o, const std::string& message) {
  if (o.on_note) o.on_note(message);
}

// Writes a finding's fixture (and candidate) as DIR/NAME.safetensors (NAME
// may start with its group's folder). When the
// findings folder fails (removed, full, read-only, a name taken by a folder),
// the files go to a fallback folder made once per campaign under $TMPDIR or
// /tmp: a finding that took minutes to find and shrink is never lost, and the
// campaign goes on. Says where in a note (on_note); the summary says it too.
void write_finding(Finding& f, const std::string& name, const io::Fixture& fx, const Verdict& v, const CampaignOptions& o,
                   Summary& s) {
  auto write_to = [&](const fs::path& dir) {
    fs::create_directories((dir / name).parent_path());
    const std::string stem = (dir / name).string();
    if (v.has_outputs) {
      check::dump_case(stem, fx, v.outputs);
      f.candidate = stem + ".candidate.safetensors";
    } else {
      io::write_fixture(stem + ".safetensors", fx);
    }
    f.fixture = stem + ".safetensors";
  };
  // Writes the finding into dir; "" or why it could not.
  auto attempt = [&](const std::string& dir) -> std::string {
    try {
      write_to(dir);
      return {};
    } catch (const InputError& e) {
      return e.what();
    } catch (const fs::filesystem_error& e) {
      return e.what();
    }
  };
  const std::string error = attempt(o.findings_dir);
  if (error.empty()) return;
  f.candidate.clear();
  if (s.findings_error.empty()) s.findings_error = error;
  if (s.fallback_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = (fs::path(tmp && *tmp ? tmp : "/tmp") / "hla-findings-XXXXXX").string();
    if (::mkdtemp(templ.data()) != nullptr) s.fallback_dir = templ;
  }
  std::string error2 = "no fallback folder could be made under $TMPDIR or /tmp";
  if (!s.fallback_dir.empty()) {
    error2 = attempt(s.fallback_dir);
    if (error2.empty()) {
      note(o, "cannot write finding " + name + " to " + io::printable(o.findings_dir) + " (" + io::printable(error, 1000) +
                  "); wrote it to " + io::printable(s.fallback_dir) + " instead");
      return;
    }
  }
  f.fixture.clear();
  f.candidate.clear();
  f.write_error = error + "; fallback: " + error2;
  note(o, "cannot write finding " + name + " anywhere (" + io::printable(f.write_error, 1000) + "); its case is in the summary");
}

// The shrinker's test: w (a reduction's verdict) fails as v (the finding's)
// for the same reason: the same kind, every rule v failed, more only where
// they could not apply to v's case (dropping normalize turns rule 3 of
// gradients on: with normalize the finding could never keep it otherwise),
// and not newly explained by the other evaluation class (cancellation).
bool same_failure(const Verdict& w, const Verdict& v) {
  if (w.kind != v.kind || w.other_class_passes != v.other_class_passes) return false;
  const std::vector<std::string> had = split_list(v.rules), has = split_list(w.rules), could_not = split_list(v.unapplied);
  auto in = [](const std::vector<std::string>& xs, const std::string& x) { return std::find(xs.begin(), xs.end(), x) != xs.end(); };
  for (const auto& r : had)
    if (!in(has, r)) return false;
  for (const auto& r : has)
    if (!in(had, r) && !in(could_not, r)) return false;
  return true;
}

}  // namespace

namespace {
// A timeout is replayed once before it is reported (a loaded machine, a
// restart's start-up): a kernel is judged, not its environment. The timed-out
// worker or server is gone; a one-token call first starts a new one, under
// the start-up allowance, so that the replay meets a warm one.
Verdict replay_timeout(Adapter& a, const FuzzCase& c, const engine::Reference& ref, const engine::Reference* zero_ref, Verdict v) {
  FuzzCase tiny = c;
  tiny.p = slice_tokens(c.p, 0, std::min<Index>(c.p.n, 1));
  tiny.grad = false, tiny.dout.clear(), tiny.dden.clear();
  a.allow_startup();
  const bool warm = run_candidate(a, tiny, nullptr).status != RunResult::Status::timeout;
  if (warm) v = run_and_check(a, c, ref, zero_ref);
  if (v.kind == "timeout") v.message += warm ? " (replayed once on a warm worker: again)" : " (a one-token call timed out as well)";
  return v;
}

// The reference of c; without gradients or the exact tier, the engine first
// where exact rationals would serve (ReferenceOptions::engine_first).
engine::Reference case_reference(const FuzzCase& c, double budget, Index exact_max_n, bool final_state) {
  engine::ReferenceOptions o;
  o.exact_max_n = exact_max_n, o.max_seconds = budget;
  o.engine_first = !c.grad && !c.exact_tier;
  o.final_state = final_state;  // only for a candidate that can return one (nothing else reads it)
  engine::Reference r = engine::compute_reference(c.p, o);
  return c.grad ? with_gradients(c, std::move(r), false) : r;
}
}  // namespace

Verdict judge(Adapter& a, const FuzzCase& c, double reference_budget, Index exact_max_n) {
  engine::Reference ref =
      timed(&Summary::Phases::reference, [&] { return case_reference(c, reference_budget, exact_max_n, a.returns_final_state()); });
  std::optional<engine::Reference> zero_ref;  // a NaN upstream's: the reference with the NaN as 0, unhidden
  if (c.grad && c.probe == Probe::grad_nan_causality) zero_ref = ref, hide_reach(c, ref);
  Verdict v = run_and_check(a, c, ref, zero_ref ? &*zero_ref : nullptr);
  if (v.kind == "timeout") v = replay_timeout(a, c, ref, zero_ref ? &*zero_ref : nullptr, std::move(v));
  if (!v.kind.empty()) {
    // A packed batch that fails while its failing sequence alone passes leaks across sequences.
    if (v.kind == "numerics" && c.p.offsets.size() > 2) {
      for (size_t s = 0; s + 1 < c.p.offsets.size(); ++s) {
        FuzzCase one = c;
        one.p = slice_tokens(c.p, c.p.offsets[s], c.p.offsets[s + 1]);
        one.grad = false, one.dout.clear(), one.dden.clear();  // the outputs failed: judged without gradients
        if (one.probe == Probe::grad_nan_causality) one.probe = Probe::plain;
        if (!run_and_check(a, one, engine::compute_reference(one.p)).kind.empty()) return v;  // wrong on its own
      }
      v.kind = "varlen";
      v.message = "every packed sequence passes alone, the packed batch fails: " + v.message;
    }
    return v;
  }
  // Nothing found: a plain verdict, inconclusive or not (the campaign counts those).
  if (c.probe != Probe::state_continuation || v.inconclusive) return v;
  // One pass was right; now [t0, m) and [m, t1) of every sequence with the state handed over.
  const auto [first, second] = state_parts(c);
  std::string where = c.splits.size() > 1 ? "at tokens" : "at token";
  for (size_t i = 0; i < c.splits.size(); ++i) where += (i ? ", " : " ") + std::to_string(c.splits[i]);
  const RunResult ra = a.run(pieces(c.p, first), nullptr, nullptr, true);
  if (ra.status != RunResult::Status::ok) return failed_run(ra);
  const RunResult rb = a.run(pieces(c.p, second), nullptr, &ra.state_out, false);
  if (rb.status != RunResult::Status::ok) return failed_run(rb);
  auto out = stitch(c.p, ra.out, rb.out, first, second);
  check::CheckOptions opt = check_options(a, c);
  opt.exact_tier = false;
  opt.continuation_splits = c.splits;  // the diagnosis's continuation rows
  check::Report rep = check::check(c.p, ref, out, opt);
  if (rep.pass && c.grad) {
    // State-gradient continuation (ABI 1.4): the backward of the second parts
    // from the state after the first hands its state's gradient to the
    // backward of the first parts; together they must give one backward's dq, dk, dv.
    auto* sb = dynamic_cast<StateBackward*>(&a);
    if (!sb || !a.supports().has(HLA_FEAT_BACKWARD_STATE)) return {};
    const BatchProblem& p = c.p;
    const Index BH = p.batch * p.heads, BK = p.batch * p.kv_heads;
    auto upstream = [&](const Ranges& rs) { return std::pair{rows_of(c.dout, BH, p.n, rs, p.dv), rows_of(c.dden, BH, p.n, rs, 1)}; };
    const auto [dout2, dden2] = upstream(second);
    const RunResult gb = sb->run_backward_state(pieces(p, second), dout2, dden2, &ra.state_out, nullptr, true);
    if (gb.status != RunResult::Status::ok) return failed_run(gb);
    const auto [dout1, dden1] = upstream(first);
    const RunResult ga = sb->run_backward_state(pieces(p, first), dout1, dden1, nullptr, &gb.state_out, false);
    if (ga.status != RunResult::Status::ok) return failed_run(ga);
    out.dq = stitch_rows(ga.out.dq, gb.out.dq, BH, p.n, first, second, p.d);
    out.dk = stitch_rows(ga.out.dk, gb.out.dk, BK, p.n, first, second, p.d);
    out.dv = stitch_rows(ga.out.dv, gb.out.dv, BK, p.n, first, second, p.dv);
    out.dq_dtype = ga.out.dq_dtype, out.dk_dtype = ga.out.dk_dtype, out.dv_dtype = ga.out.dv_dtype;
    rep = check::check(p, ref, out, opt);
    if (rep.pass) return {};
    if (rep.inconclusive) return inconclusive();
    return failing("state_gradient_continuation",
                   "one backward is right, two with the state's gradient handed back " + where + " are not: " + summarize(rep), out, rep);
  }
  if (rep.pass) return {};
  if (rep.inconclusive) return inconclusive();  // the stitched outputs leave too little to score, as a single pass can
  return failing("state_continuation", "one pass is right, two passes with the state handed over " + where + " are not: " + summarize(rep),
                 out, rep);
}

std::string Progress::text() const {
  char buf[120];
  std::snprintf(buf, sizeof buf, "[%zu/%zu cases] %zu finding(s), %.1f s", cases, max_cases, findings, seconds);
  return buf + (jobs > 1 ? ", " + std::to_string(jobs) + " jobs" : "");
}

// The message may quote the candidate's output.
std::string Finding::headline() const {
  return "finding [" + kind + "] at case " + std::to_string(case_index) + ": " + io::printable(message, 2000);
}

std::string Summary::text() const {
  std::ostringstream os;
  os << "hla fuzz: " << cases << " cases in " << seconds << " s (" << (cases ? 1e3 * seconds / cases : 0) << " ms/case); "
     << findings.size() << " finding(s)\n";
  if (cases) {
    const double ms = 1e3 / static_cast<double>(cases);
    os << "  per case: reference " << ms * phases.reference << " ms, candidate " << ms * phases.candidate << " ms (with its I/O), check "
       << ms * phases.check << " ms (our orders, scoring), other " << ms * (seconds - phases.reference - phases.candidate - phases.check)
       << " ms\n";
  }
  os << "  probes:";
  for (const auto& [p, n] : probes) os << " " << p << " " << n;
  auto counts = [](const std::map<std::string, size_t>& m) {
    std::string t;
    for (const auto& [x, n] : m) t += (t.empty() ? " " : ", ") + x + " " + std::to_string(n);
    return t;
  };
  os << "\n  streams:";
  for (const Stream& x : streams)
    os << (&x == &streams.front() ? " " : ", ") << "seed " << x.seed << " shard " << x.shard << "/" << x.shards;
  os << "\n  coverage:" << counts(coverage.variants) << ";" << counts(coverage.dtypes) << ";" << counts(coverage.options) << "\n";
  if (inconclusive) os << "  inconclusive (too little scored to judge, not findings): " << inconclusive << "\n";
  if (signal) os << "  stopped by signal " << signal << " (" << strsignal(signal) << ")\n";
  if (!by_kind.empty()) {
    os << "  findings by kind:";
    for (const auto& [k, n] : by_kind) os << " " << k << " " << n;
    os << "\n";
  }
  if (!fallback_dir.empty() || !findings_error.empty())
    os << "  the findings folder failed (" << findings_error << "); "
       << (fallback_dir.empty() ? std::string("no fallback folder could be made") : "findings were written to " + fallback_dir + " instead")
       << "\n";
  if (!groups.empty()) os << "  " << groups.size() << " group(s) of findings (same kind and cause):\n";
  for (const auto& g : groups) {
    os << "  [" << g.kind << "] " << g.count << " finding(s)" << (g.rules.empty() ? "" : ", rules " + g.rules)
       << (g.tensor.empty() ? "" : ", tensor " + g.tensor) << (g.cause.empty() ? "" : ", " + g.cause) << ": " << g.dir << "/ ("
       << g.examples.size() << " example(s))\n";
    for (size_t e : g.examples) {
      const Finding& f = findings.at(e);
      os << "    case " << f.case_index << " (after " << f.cases_run << " cases, " << f.seconds << " s), shrunk in " << f.shrink_steps
         << " steps\n      " << f.message << "\n      minimal case: " << f.shrunk << "\n";
      if (!f.write_error.empty()) os << "      NOT WRITTEN: " << f.write_error << "\n";
      else os << "      fixture: " << f.fixture << "\n";
      if (!f.candidate.empty())
        os << "      reproduce: hla check " << f.fixture << " " << f.candidate << " --precision " << f.precision
           << (f.form_class == "masked" ? "" : " --form-class " + f.form_class) << "\n";
    }
  }
  return os.str();
}

nlohmann::json Summary::json() const {
  nlohmann::json j{{"candidate", candidate},
                   {"support", support},
                   {"streams", nlohmann::json::array()},
                   {"cases", cases},
                   {"inconclusive", inconclusive},
                   {"seconds", seconds},
                   {"phases", {{"reference", phases.reference}, {"candidate", phases.candidate}, {"check", phases.check}}},
                   {"by_kind", by_kind},
                   {"probes", probes},
                   {"coverage", {{"variants", coverage.variants}, {"dtypes", coverage.dtypes}, {"options", coverage.options}}}};
  for (const Stream& x : streams) j["streams"].push_back({{"seed", x.seed}, {"shard", x.shard}, {"shards", x.shards}});
  j["findings"] = nlohmann::json::array();
  for (const auto& f : findings)
    j["findings"].push_back({{"kind", f.kind}, {"message", f.message}, {"case_index", f.case_index}, {"cases_run", f.cases_run},
                             {"seconds", f.seconds}, {"original", f.original}, {"shrunk", f.shrunk}, {"shrink_steps", f.shrink_steps},
                             {"fixture", f.fixture}, {"candidate", f.candidate}, {"precision", f.precision},
                             {"form_class", f.form_class}, {"needs", f.needs}, {"write_error", f.write_error}, {"rules", f.rules},
                             {"tensor", f.tensor}, {"group", f.group}, {"example", f.example}});
  j["groups"] = nlohmann::json::array();
  for (const auto& g : groups)
    j["groups"].push_back({{"kind", g.kind}, {"rules", g.rules}, {"tensor", g.tensor}, {"needs", g.needs}, {"dir", g.dir},
                           {"count", g.count}, {"examples", g.examples}});
  add_causes(*this, j);
  j["findings_error"] = findings_error;
  j["fallback_dir"] = fallback_dir;
  j["signal"] = signal;
  return j;
}

namespace {

// A running campaign: its options, clock and summary so far.
class Campaign {
 public:
  Campaign(Adapter& a, const CampaignOptions& o)
      : a_(a), o_(o), t0_(std::chrono::steady_clock::now()), clocks_(&s_.phases), deadline_(o.max_seconds) {
    s_.candidate = a.supports().name, s_.support = a.supports().text();
    s_.streams = {{o.seed, o.shard, o.shards}};
  }

  Summary run() {
    for (size_t i = o_.shard; s_.cases < o_.max_cases && !must_stop(); i += o_.shards) {
      const FuzzCase c = make_case(a_.supports(), gen::derive_seed(o_.seed, i));
      Verdict v = judge(a_, c, 0, o_.exact_max_n);
      if (must_stop()) break;  // cut short (its candidate killed, or past --time): no verdict
      ++s_.cases;
      // Plain cases that also run the backward; state cases that also hand back the state's gradient.
      ++s_.probes[c.grad && c.probe == Probe::plain                ? "gradients"
                  : c.grad && c.probe == Probe::state_continuation ? "state_gradient_continuation"
                                                                   : to_string(c.probe)];
      count_coverage(c.p);
      if (v.inconclusive) ++s_.inconclusive;
      if (!v.kind.empty()) record(i, c, std::move(v));
      if (o_.on_progress) o_.on_progress({s_.cases, o_.max_cases, s_.findings.size(), elapsed()});
      if (o_.stop_after && s_.findings.size() >= o_.stop_after) break;
    }
    s_.seconds = elapsed();
    s_.signal = stop_signal();
    write_summary();
    return std::move(s_);
  }

 private:
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  // A stop signal, or --time spent (a hard limit: candidate calls end by then too).
  bool must_stop() const { return stop_signal() || (o_.max_seconds > 0 && elapsed() >= o_.max_seconds); }

  // Shrinks cur, failing as v: accepts any reduction that fails the same way,
  // until none does, the budget is spent or the campaign must stop (keeping
  // the smallest case so far). Each attempt at a timeout costs the whole
  // timeout: a few only. Returns the steps taken.
  size_t shrink(FuzzCase& cur, Verdict& v) const {
    const size_t budget = v.kind == "timeout" ? std::min<size_t>(o_.shrink_attempts, 6) : o_.shrink_attempts;
    size_t attempts = 0, steps = 0;
    for (bool progressed = true; progressed && attempts < budget && !must_stop();) {
      progressed = false;
      for (const FuzzCase& k : reductions(cur, a_.supports())) {
        if (++attempts > budget) break;
        Verdict w = judge(a_, k, 0, o_.exact_max_n);
        if (must_stop()) break;  // w may be cut short
        if (same_failure(w, v)) {
          cur = k, v = std::move(w), ++steps, progressed = true;
          break;
        }
      }
    }
    return steps;
  }

  // Case i (c) failed as v: shrinks it, writes its files, reports it.
  void record(size_t i, const FuzzCase& c, Verdict v) {
    Finding f;
    f.kind = v.kind;
    f.case_index = i;
    f.cases_run = s_.cases;
    f.seconds = elapsed();
    f.original = c.describe();
    f.cause = v.cause;  // of the case found: more of the bug shows there than in the shrunk one
    FuzzCase cur = c;
    f.shrink_steps = shrink(cur, v);
    f.message = v.message;
    f.shrunk = cur.describe();
    f.needs = features_of(cur);
    f.rules = v.rules, f.tensor = v.tensor;
    f.precision = engine::to_string(a_.supports().precision_for(cur.p.dtype));
    f.form_class = engine::to_string(a_.supports().form_class);
    Group& g = s_.groups[group_finding(s_.groups, f)];
    if (takes_example(g, s_.findings, f, o_.examples_per_group)) {
      // With gradients: the upstream with its non-finite entries as 0 (a fixture's upstream is finite).
      engine::Reference ref = engine::compute_reference(cur.p);
      if (cur.grad) ref = with_gradients(cur, std::move(ref), false);
      const io::Fixture fx =
          check::make_fixture(cur.p, ref, {"fuzz", f.kind + ": " + f.shrunk, gen::derive_seed(o_.seed, i), cur.exact_tier});
      write_finding(f, g.dir + "/" + f.kind + "-" + std::to_string(i), fx, v, o_, s_);
      f.example = true;
      g.examples.push_back(s_.findings.size());
    }
    ++g.count;
    ++s_.by_kind[f.kind];
    if (o_.on_finding) o_.on_finding(f);
    s_.findings.push_back(std::move(f));
  }

  void count_coverage(const BatchProblem& p) {
    ++s_.coverage.variants[to_string(p.opt.variant)];
    ++s_.coverage.dtypes[to_string(p.dtype)];
    const uint32_t f = required_features(p);
    for (uint32_t bit = 1; bit != 0; bit <<= 1)
      if (f & bit) ++s_.coverage.options[feature_names(bit)];
    if (f == 0) ++s_.coverage.options["none"];
  }

  // DIR/summary.json (the campaign, its findings and their groups; `hla
  // fuzz-merge` reads it), unless the findings went to a fallback folder.
  void write_summary() {
    if (!s_.fallback_dir.empty()) return;
    try {
      fs::create_directories(o_.findings_dir);
      io::write_file_atomically(fs::path(o_.findings_dir) / "summary.json",
                                s_.json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } catch (const std::exception& e) {
      note(o_, "cannot write " + io::printable((fs::path(o_.findings_dir) / "summary.json").string()) + ": " + e.what());
    }
  }

  // Sets the running campaign's phase clocks for its lifetime.
  struct Clocks {
    explicit Clocks(Summary::Phases* p) { phases = p; }
    ~Clocks() { phases = nullptr; }
  };

  Adapter& a_;
  const CampaignOptions& o_;
  const std::chrono::steady_clock::time_point t0_;
  Summary s_;
  Clocks clocks_;
  CampaignDeadline deadline_;
};

}  // namespace

Summary run_campaign(Adapter& a, const CampaignOptions& o) {
  if (o.shards == 0 || o.shard >= o.shards) throw InputError("--shard i/N needs 0 <= i < N");
  return Campaign(a, o).run();
}

}  // namespace hla::fuzz
