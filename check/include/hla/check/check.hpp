// The one way any candidate is judged: a fixture's outputs, a user's library
// through the C ABI, our own forms, the CUDA kernel. See docs/pass-rule.md.
#pragma once

#include "hla/engine/orders.hpp"
#include "hla/engine/precision.hpp"
#include "hla/engine/reference.hpp"
#include "hla/evaluate.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hla::check {

// The engine's types that every caller of the checker handles (hla/engine/):
// named here too, so that a check is written in one namespace.
using engine::CandidateOutputs;
using engine::FormClass;
using engine::GradientReference;
using engine::Precision;
using engine::Reference;

// The interface a check was asked through: hints name options in its syntax.
enum class Interface { cpp, cli, python, cabi };

struct CheckOptions {
  std::optional<Precision> precision{};  // default: the candidate's output dtype
  FormClass form_class = FormClass::masked;  // SPEC §7: which magnitude and baseline judge it
  Interface interface = Interface::cpp;      // the syntax of hints
  bool exact_tier = false;             // demand bit equality (fixture says so)
  // Fail when the reference has gradients and the candidate lacks dq, dk or dv
  // (else they are reported as not checked).
  bool require_gradients = false;
  size_t worst = 10;                   // worst elements listed
  // When set and the check fails: writes <stem>.safetensors (the case as a
  // fixture) and <stem>.candidate.safetensors, for `hla check` to reproduce.
  std::string dump_on_failure{};
  // On a FAIL, name the known mistakes the candidate matches (Report::diagnosis).
  bool diagnose = true;
  // Above this much work (Σ n·d·(d + dv) over the heads; 2^27: one head of [4096, 128]) the diagnosis's
  // output rows run on the first heads of batch entry 0 (whole K/V groups), except rows reading across heads.
  double diagnosis_work = 0x1p27;
  // A state-continuation check (the fuzzer): the candidate ran each sequence i
  // in two calls, the second from token continuation_splits[i] with the state
  // (and the state's gradient back) handed over; the diagnosis's continuation rows.
  std::vector<Index> continuation_splits{};
  // Called with the stage ("verifying", "baseline") and its progress, for progress bars.
  std::function<void(const char* stage, double done, double total)> progress = {};
  // false (the fuzzer): our orders stop once rule 3 holds, when no other rule
  // of the outputs fails (the verdict is the same; a passing report's baseline
  // fields then cover the orders evaluated). A failing output is always complete.
  bool complete_baseline = true;
};

// Rule 3 (docs/pass-rule.md, measured there): the worst score may be at
// most ratio_limit(N) × the worst of our honest orders, or × the floor when
// that is larger. The worst of N elements is a steadier statistic for large N:
// measured on independent correct kernels, their worst exceeded ours by up to
// 3.4× at N ≥ 64 scored elements in unshrunk cases, 6.4× below, and, once
// the shrinker searched for the worst, 7.8× at N = 177 and 5.0× at N = 2190
// (ahla on repeated tokens, where rounding errors add up coherently); so the
// limit is 4 from N = 7141 on and grows as N^(-1/4) below (13 at N = 64).
// The floor is per element, kFloorRoundings roundings of the element's own
// value (|result| / magnitude in score units): a kernel may differ from every
// order of ours by a few roundings of the result (one dot product summed in
// another order, a final scaling); it vanishes where sums grow long and cancel.
inline constexpr double kRatioLimit = 4.0;
inline constexpr double kFloorRoundings = 2.0;
// Rule 3's yardstick is never below this, so that its bar (ratio_limit ≥
// kRatioLimit times the yardstick) is at least one rounding of the magnitude:
// a score ≤ 1 never fails rule 3, even where every order of ours is exact.
inline constexpr double kMinYardstick = 1.0 / kRatioLimit;
double ratio_limit(size_t scored);
// Rule 3's yardstick of one element: the worst score of our orders `ours`, its floor (kFloorRoundings ×
// `unit`, one rounding of its value in score units; non-finite counts 0) or kMinYardstick, whichever is largest.
inline double rule3_yardstick(double ours, double unit) {
  return std::max({ours, kFloorRoundings * (std::isfinite(unit) ? unit : 0.0), kMinYardstick});
}

// Why an element is not scored (reported and counted, never failed).
enum class Skip {
  none,
  at_pole,              // normalized output, non-finite candidate where den ⊕ ε = 0 lies within the error bound
  reference_nonfinite,  // depends on a NaN/Inf input: any value is accepted
  out_of_range,         // the reference exceeds the output dtype's largest finite value
  underflow,            // u·magnitude below the compute precision's smallest normal: underflow dominates
};

struct Element {
  Index b = 0, h = 0, t = 0, c = -1;  // c = -1: the denominator
  double candidate = 0, reference = 0, magnitude = 0, score = 0;
  double unit = 0;  // one rounding of the result itself, in score units: |result| / magnitude
  Skip skip = Skip::none;
};

// What one part's elements came to under the pass rule: the outputs (Report)
// and each gradient tensor or state part (GradientRow) alike.
struct Tally {
  size_t elements = 0, scored = 0, nonfinite = 0, over_bound = 0;
  size_t out_of_range = 0, underflow = 0;  // not scored: see Skip
  double max_score = 0;                    // over scored elements
  std::vector<Element> worst;
  // Rule 3: our own honest orders in the candidate's precision and class,
  // scored alike; every element's score at most ratio_limit times their worst,
  // or its floor if larger.
  double baseline_max_score = 0;    // the worst of them
  std::string baseline_worst_form;  // which of them
  double baseline_ratio = 0;        // max over elements of score / max(baseline_max_score, floor); must be ≤ ratio_limit
  double ratio_limit = 0;           // ratio_limit(scored)
  Element ratio_element;            // the element with the largest rule-3 ratio
  // Exact tier: bit equality with the exact reference.
  bool exact_tier = false;
  size_t exact_mismatches = 0;
};

// One gradient tensor's verdict (SPEC §9): every element scored as
// |candidate − reference| / (u·M*), M* the gradient's magnitude times the
// conditioning of den ⊕ ε it passes through (check/gradient.hpp), bound K_g + 1.
// h: the query head (dq, dstate) or the K/V head (dk, dv); c: the column.
// dstate: b is the sequence, t the row, c = -1 in a denominator part (m, f, z, e).
// Rule 3 (SPEC §9): the floor is at least one rounding of its magnitude where
// our backward forms were all exact. Exact tier (SPEC §9): dq, dk, dv of an
// exact-tier case in f32/f64.
struct GradientRow : Tally {
  std::string name;      // dq, dk, dv, dstate.<part> (from an initial state), or state.<part> (a final state)
  bool checked = false;  // the candidate has it
  DType dtype = DType::f64;    // the dtype the candidate stored it in
  size_t ill_conditioned = 0;  // not scored: depends on a den ⊕ ε within its error bound of 0 (or of a clamp jump)
  bool baseline_applied = false;  // rule 3 applies: we have backward forms of this variant
  bool over_ratio = false;
  bool vacuous = false;  // an all-zero candidate would pass it, its reference not all zero: it tells nothing
  bool fails() const { return nonfinite > 0 || over_bound > 0 || over_ratio || exact_mismatches > 0; }
};

// Where one part's scores lie (the HTML report's plots; the diagnosis hints):
// the worst score per (row, block of positions) and per position, of the
// candidate and of our worst honest order (rule 3's baseline), with both
// score histograms. Gathered while scoring. A row is a (batch entry, head),
// b·heads + h (dk, dv: a K/V head; a state part: (sequence, head)); a position
// a token (a state part: the state's row). A value -1: nothing scored there;
// +inf: a non-finite candidate value (or a score of an error on magnitude 0).
struct ScoreMap {
  std::string name;               // out, den, dq, dk, dv, dstate.<part>
  bool tokens = true;             // positions are tokens (not a state's rows)
  Index rows = 0, heads = 1;      // heads: per batch entry or sequence (row = b·heads + h)
  Index group = 1;                // query heads per K/V head (GQA; 1: none or a K/V-head part)
  Index positions = 0;            // tokens (a state part: rows)
  Index block = 1;                // positions per heatmap block (blocks() of them per row, at most kMaxBlocks)
  Index step = 1;                 // positions per entry of the per-position arrays
  std::vector<float> cand_blocks, ours_blocks;        // [rows][blocks()]
  std::vector<float> cand_positions, ours_positions;  // [ceil(positions / step)], the worst over rows
  // By phase: (token − its sequence's first token) mod kPhases, the worst over rows
  // and tokens: periodicity of any length of sequence (a state part: its row).
  std::vector<float> cand_phase, ours_phase;
  std::vector<size_t> cand_bins, ours_bins;  // Report::histogram's first 23 bins (finite scores)
  std::string ours_form;          // the order the ours_* arrays are of ("" when none was run)
  double limit = 0;               // rule 3's line on the score scale: ratio_limit × max(ours worst, 1)
  double bound = 0;               // rule 2's a priori bound
  bool fails = false;             // the part fails the pass rule
  static constexpr Index kMaxBlocks = 128, kPhases = 256;
  Index blocks() const { return positions == 0 ? 0 : (positions + block - 1) / block; }
};

// A known mistake a failing candidate matches (the catalog, check/src/catalog.cpp;
// docs/pass-rule.md#differential-diagnosis): its error against the mistake's
// values is within the pass rule's per-element bound on `fraction` of the
// scored elements of `part`, and on most elements its error against the
// reference exceeds.
struct Diagnosis {
  std::string id;       // the catalog row, e.g. "E1", "scale_missing", "chunk_state_dropped/16"
  std::string what;     // what the kernel computes
  std::string fix;      // the fix, in one line
  std::string part;     // the parts compared: "out", "out,den", "dq,dk,dv"
  double fraction = 0;  // of the scored elements of those parts that match
};

struct Report : Tally {
  Report() { ratio_limit = kRatioLimit; }
  bool pass = false;
  bool inconclusive = false;  // too little was scored to judge (then pass = false; see kMaxUnscoredFraction)
  std::vector<std::string> reasons;  // why it failed (empty on pass)
  Precision precision = Precision::f32;
  double u = 0;
  double bound = 0;            // K = depth_bound: every scored element must have score ≤ K
  double noise_floor = 0;      // rule 3's floor at ratio_element: kFloorRoundings × its unit
  FormClass form_class = FormClass::masked;
  // A masked candidate failing only the numeric rules, that another class's
  // rules pass: that class (its hint says so, and why), tried in the order
  // state_difference (where it differs), flat.
  std::optional<FormClass> passing_class;
  double passing_ratio = 0;
  // Rule 3's bar is our nested orders' worst times this (flat_path_ratio) where a
  // flat class has no flat order of ours at this size; 1 otherwise.
  double path_ratio = 1;                     // its rule-3 ratio in that class (≤ 1: no worse than our orders there, a rounding profile)
  bool state_difference_would_pass = false;  // passing_class is state_difference
  size_t at_pole = 0, reference_nonfinite = 0;  // not scored: see Skip
  std::vector<std::pair<std::string, size_t>> histogram;  // score bins
  std::string dumped;  // the fixture written by dump_on_failure, if any
  // Gradients: rows when the reference has gradients; a note why none were checked.
  std::vector<GradientRow> gradients;
  // The final state (SPEC §8), when the candidate returns one: a row per part
  // (state.<part>), scored as the outputs (magnitude of the class, bound K + 1,
  // rule 3 against our orders' final states).
  std::vector<GradientRow> states;
  double gradient_bound = 0;  // K_g + 1
  std::string gradients_note;
  // Normalized: the tokens whose den ⊕ ε lies within its error bound of the
  // pole, on which the gradients judged as ill-conditioned depend (empty: none).
  std::string gradients_ill_tokens;
  // Where the scores lie, per part (out, den when given, each checked gradient and state part).
  std::vector<ScoreMap> maps;
  // Diagnosis of a failing report from its score pattern (error growing with
  // the token, periodic at a chunk width, at sequence starts, in some heads, in
  // one part): hints only, the verdict does not depend on them; none on a pass.
  std::vector<std::string> hints;
  // Differential diagnosis of a failing report: the catalog's mistakes it
  // matches, best first (none on a pass, and none found is no evidence).
  std::vector<Diagnosis> diagnosis;

  std::string verdict() const { return pass ? "PASS" : inconclusive ? "INCONCLUSIVE" : "FAIL"; }
  std::string text() const;
  nlohmann::json json() const;
  // One self-contained HTML page (inline SVG, nothing fetched, no scripts):
  // the verdict, the pass-rule numbers, hints and per part a heatmap, the
  // worst score per position beside our worst order's, the histograms and the
  // worst elements. `title`: the case, as a heading. Same report, same bytes.
  std::string html(const std::string& title = "") const;
};

// Writes r.html(title) to `path` atomically (a temporary file renamed over it:
// never a half-written file); InputError naming the path when it cannot.
void write_html_report(const std::string& path, const Report& r, const std::string& title = "");

// Throws InputError when the candidate's shapes do not match the problem.
Report check(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt = {});

// Convenience for a user's own test: computes the reference, then checks.
Report check(const BatchProblem& p, const CandidateOutputs& cand, const CheckOptions& opt = {});

}  // namespace hla::check
