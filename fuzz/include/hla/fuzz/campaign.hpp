// A fuzz campaign: generate cases inside what the candidate supports, run
// them under their probe, judge with the one check, shrink each finding to a
// minimal failing case and write it as a fixture that `hla check` reproduces.
#pragma once

#include "hla/fuzz/cases.hpp"

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hla::fuzz {

struct Finding;

// How far a campaign is (CampaignOptions::on_progress).
struct Progress {
  size_t cases = 0, max_cases = 0, findings = 0;
  double seconds = 0;
  unsigned jobs = 1;         // processes (run_jobs)
  std::string text() const;  // "[12/1000 cases] 1 finding(s), 0.4 s" (", 2 jobs")
};

struct CampaignOptions {
  uint64_t seed = 1;
  size_t max_cases = 1000;
  double max_seconds = 0;    // 0: no time limit
  size_t shard = 0, shards = 1;  // this campaign takes cases i with i % shards == shard
  size_t stop_after = 0;     // stop after this many findings (0: never)
  size_t shrink_attempts = 300;
  std::string findings_dir = "hla-findings";
  // Findings with one signature (kind and cause: grouping.cpp) form a group:
  // one folder DIR/<kind>-<g>/ with the files of examples_per_group of its
  // findings, of its variety where it has some; the rest are counted.
  size_t examples_per_group = 3;
  // Heads up to this long are judged against exact rationals, longer ones
  // against the certified double-double engine (the same f64 values wherever
  // it certifies them). Cases without gradients or the exact tier take the
  // engine first and exact rationals only where it leaves an element
  // uncertified (ReferenceOptions::engine_first); 0 sends every head to the
  // engine. A finding's fixture is always written with the default reference.
  Index exact_max_n = engine::kExactMaxN;
  // What the campaign reports while it runs; it prints nothing itself (`hla
  // fuzz` prints these on stderr, hla_oracle.fuzz logs them). Each may be
  // empty; all are called on the campaign's thread.
  std::function<void(const Progress&)> on_progress = {};    // after every case
  std::function<void(const Finding&)> on_finding = {};      // each finding, shrunk and written
  std::function<void(const std::string&)> on_note = {};     // e.g. a finding written to the fallback folder
};

struct Finding {
  std::string kind;      // crash, timeout, error, bad_output, numerics, overflow (±inf from finite inputs), exact_tier,
                         // nan_causality, state_continuation, varlen,
                         // gradient (outputs right, dq/dk/dv not), gradient_nan_causality
  std::string message;   // what went wrong, on the shrunk case
  size_t case_index = 0;     // in the campaign stream
  size_t cases_run = 0;      // cases this campaign had run when it was found
  double seconds = 0;        // campaign time when it was found
  std::string original, shrunk;  // FuzzCase::describe() before and after shrinking
  size_t shrink_steps = 0;
  std::string fixture, candidate;  // files written; `hla check fixture candidate --precision P` reproduces numeric kinds
  std::string precision;           // the candidate's declared precision for the case's dtype (P)
  std::string form_class = "masked";  // the candidate's declared evaluation class
  std::string needs;     // features of the shrunk case the shrinker could not remove (e.g. "decay, normalize")
  std::string write_error;  // why the files could not be written even to the fallback folder (then fixture is "")
  std::string rules, tensor;  // numeric kinds: the rules failed ("bound,ratio") and the failing tensor (out, den, dq, …)
  std::string cause;          // numeric kinds: the found case's diagnosis ("matches E1") or error profile (cause_of)
  size_t group = 0;           // its group in Summary::groups
  bool example = false;       // its files were written (one of its group's first examples_per_group)
  std::string headline() const;  // "finding [kind] at case i: message" (the message made printable)
};

// Findings with the same signature: one cause.
struct Group {
  std::string kind, rules, tensor, needs;  // of its first finding
  std::string dir;        // the group's folder in the findings folder: <kind>-<g>
  size_t count = 0;       // its findings
  std::vector<size_t> examples;  // the findings (Summary::findings indices) whose files were written
  std::string cause{};           // Finding::cause
  std::string signature() const;  // "kind|cause"
};

// grouping.cpp: a failing check's cause; f's group in groups (a new one when
// its signature is new), f.group set; whether f's files are written as one
// of g's at most `limit` examples (a variety g's examples lack first).
std::string cause_of(const check::Report& r);
size_t group_finding(std::vector<Group>& groups, Finding& f);
bool takes_example(const Group& g, const std::vector<Finding>& findings, const Finding& f, size_t limit);
struct Summary;
void add_causes(const Summary& s, nlohmann::json& j);  // into Summary::json()'s findings and groups
// Cases i of seed `seed` with i % shards == shard: what a campaign ran.
struct Stream {
  uint64_t seed = 1;
  size_t shard = 0, shards = 1;
  auto operator<=>(const Stream&) const = default;
};

struct Summary {
  // The campaign: the candidate, its support (Supports::text: the case stream
  // depends on it) and the streams run (several once merged).
  std::string candidate, support;
  std::vector<Stream> streams;
  size_t cases = 0;
  size_t inconclusive = 0;  // cases whose check had too little to score (check::Report::inconclusive)
  double seconds = 0;
  // Seconds per phase over all cases, shrinking included: the reference
  // (outputs and gradients), the candidate's runs (with their I/O) and the
  // checks (our baseline orders and the scoring); the rest of `seconds` is
  // generation and findings.
  struct Phases {
    double reference = 0, candidate = 0, check = 0;
  } phases;
  std::map<std::string, size_t> by_kind;
  std::map<std::string, size_t> probes;  // cases run per probe
  // Cases run per variant, input dtype and option (features::feature_names; "none": no option).
  struct Coverage {
    std::map<std::string, size_t> variants, dtypes, options;
  } coverage;
  std::vector<Finding> findings;
  std::vector<Group> groups;  // in the order of their first finding
  // Set when a finding could not be written to the findings folder: the
  // first such error, and the folder ($TMPDIR or /tmp) the files went to instead.
  std::string findings_error, fallback_dir;
  int signal = 0;  // the stop signal that ended the campaign early (StopSignals), 0 none
  std::string text() const;
  nlohmann::json json() const;  // `hla fuzz --json`, and DIR/summary.json
};

// The outcome of one case: nothing (pass) or a finding kind with a message
// and, for numeric kinds, the outputs that failed.
struct Verdict {
  std::string kind, message;
  engine::CandidateOutputs outputs;
  bool has_outputs = false;
  // Numeric kinds: which rules failed ("nonfinite", "overflow", "bound", "ratio", "exact",
  // and grad_ of each), and whether the other evaluation class would pass (the
  // failure is then explained by cancellation, not by the kernel's terms). The
  // shrinker keeps a reduction only when the second stays as it was and the
  // rules stay or grow by rules that could not apply before (`unapplied`).
  std::string rules;
  bool other_class_passes = false;
  bool inconclusive = false;  // kind empty: the check could not judge (not a pass, not a finding)
  std::string unapplied;      // rules that cannot fail on this case ("grad_ratio": rule 3 does not apply to its gradients)
  std::string tensor;         // numeric kinds: the failing tensor (out, den, dq, dk, dv)
  std::string cause;          // numeric kinds: cause_of the check
};
// reference_budget > 0: seconds the reference may take (InputError beyond;
// --replay of a user's fixture), 0: unbounded (generated cases are small).
// exact_max_n: heads up to this long (d, dv ≤ 16) get an exact rational
// reference, longer ones the certified double-double engine (engine::compute_reference).
Verdict judge(Adapter& a, const FuzzCase& c, double reference_budget = 0, Index exact_max_n = engine::kExactMaxN);

// Runs the campaign and writes DIR/summary.json (`hla fuzz-merge` reads it),
// findings or not.
Summary run_campaign(Adapter& a, const CampaignOptions& o);

// A campaign in J processes (`hla fuzz --jobs`, hla_oracle.fuzz(jobs=)): job j
// runs the cases i of o's shard s/S with i % (S·J) == s + S·j (o.max_cases
// split among them; max_seconds and stop_after hold per job), each a forked
// process group of its own writing into a folder of its own under
// o.findings_dir; their summaries are merged into o.findings_dir as `hla
// fuzz-merge` merges shards: the same cases, findings and groups as one
// process. A stop signal (StopSignals) is passed on to every job, which
// stops as a campaign does; the summary then covers what they ran.
// In the parent, o.on_progress gets the jobs' cases and findings added up
// (every 50 ms); in each job, on_finding and on_note (prefixed "job j: ").
struct Jobs {
  unsigned count = 2;
  // The candidate's adapter, made in each job after the fork.
  std::function<std::unique_ptr<Adapter>()> make_adapter;
  // fork(2) by default; a runtime that must prepare for it (Python) wraps it.
  std::function<int()> fork = {};
  std::function<void()> before_exit = {};  // in each job, before _exit (flush buffered output)
  // Called in the parent every 50 ms: an exception ends the jobs (SIGTERM),
  // their folders are removed, and it reaches the caller.
  std::function<void()> poll = {};
};
// InputError when a job reports one (its message, "job j: …"); runtime_error
// when a job fails otherwise.
Summary run_jobs(const Jobs& jobs, const CampaignOptions& o);

}  // namespace hla::fuzz
