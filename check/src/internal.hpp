// What the check layer's units share: the worst elements, the baseline memo,
// and the engine's names they use unqualified.
#pragma once

#include "hla/check/check.hpp"
#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/engine/detail.hpp"
#include "hla/engine/orders.hpp"
#include "hla/parallel.hpp"
#include "hla/scalar.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <map>
#include <tuple>
#include <vector>

namespace hla::check {

using engine::certifies;
using engine::longest_sequence;
using engine::num;

// A verdict needs evidence: with no element scored, or with more than this
// fraction of the elements that do not depend on NaN/Inf inputs left unscored
// (at a pole, beyond the output range, in the underflow regime), the report is
// INCONCLUSIVE (not a pass; `hla check` exits 4).
inline constexpr double kMaxUnscoredFraction = 0.5;

// An all-zero candidate's score of an element whose reference is ref, magnitude M:
// |ref| / (u·M) (a normalized output's residual at o = 0: num and M_num).
inline double zero_score(double ref, double M, double u) { return ref == 0 ? 0.0 : M > 0 ? std::fabs(ref) / (u * M) : HUGE_VAL; }

// Rule 3's yardstick of one element of a gradient or state row (`unit`: one
// rounding of its value in score units): the worst of our orders, or its floor
// — kFloorRoundings roundings of its own value, and where every order of ours
// was exact on the whole tensor at least one rounding of its magnitude (a
// kernel may round one partial sum where ours happened to round none), so
// that a zero baseline never makes a tiny error infinitely many times ours.
inline double row_yardstick(const GradientRow& row, double unit) {
  return row.baseline_max_score > 0 ? rule3_yardstick(row.baseline_max_score, unit) : std::max(kFloorRoundings * unit, 1.0);
}

// How `c` is declared through `i`: `--form-class flat:64`, `form_class="flat:64"`,
// `hla_impl_info.form_class = HLA_CLASS_FLAT_CHUNKS(64)`, `.form_class = FormClass::flat(64)`.
std::string declare_class(FormClass c, Interface i);

// Proves that stored gradients belong to the inputs and the upstream (forward:
// the fixture's proven forward reference, whose den the normalized magnitudes
// divide by): the fast engine's backward in double, heads in parallel, each
// stored value within the engine's running bound plus its own rounding and
// each magnitude within 2^-40 of the engine's; where the engine declines (a
// pole within its bound) and for exact references, a float64 streaming
// backward (binary128 where float64 overflows) within
// 2^-53·(K_b + 2 + K_q·κ_x)·M_g. Ill-conditioned elements are skipped.
// add(tensor, message) per mismatch.
void verify_gradients(const BatchProblem& p, const Reference& forward, const GradientReference& g,
                      const std::function<void(const std::string&, const std::string&)>& add);

// Proves a fixture's stored final state (state.<part>, its magnitudes) from
// its inputs (state_check.cpp): within the bound of our float64 evaluation
// (engine::double_final_state); add(tensor, message) per mismatch.
void verify_final_state(const io::Fixture& f, const std::function<void(const std::string&, const std::string&)>& add);
// Scores the candidate's final state into r.states; called by check().
void check_final_state(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r);

// The k elements of largest score, largest first; ties in (b, h, t, c) order,
// so the list does not depend on how the elements were gathered.
inline std::vector<Element> worst_of(std::vector<Element> all, size_t k) {
  k = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(), [](const Element& a, const Element& b) {
    if (a.score != b.score) return a.score > b.score;
    return std::tie(a.b, a.h, a.t, a.c) < std::tie(b.b, b.h, b.t, b.c);
  });
  all.resize(k);
  return all;
}

// Offers e to the k worst of a stream without holding the stream: `kept` is a
// superset of the k worst so far, pruned to k whenever it reaches 2k + 16;
// `cut` is the k-th score kept at the last pruning (a lower one cannot enter).
inline void keep_worst(std::vector<Element>& kept, double& cut, const Element& e, size_t k) {
  if (k == 0 || e.score < cut) return;
  kept.push_back(e);
  if (kept.size() >= 2 * k + 16) {
    kept = worst_of(std::move(kept), k);
    cut = kept.back().score;
  }
}

// The k worst of a stream (keep_worst); take() gives them, largest first.
struct Worst {
  size_t k = 0;
  std::vector<Element> kept;
  double cut = -HUGE_VAL;
  void keep(const Element& e) { keep_worst(kept, cut, e, k); }
  std::vector<Element> take() && { return worst_of(std::move(kept), k); }
};

// What one check's baseline orders computed, kept for the class hint's second
// judgement (check.cpp) so that no order is evaluated twice in one check:
// `record` also scores each forward order under the state-difference
// magnitudes and keeps the gradient orders; `replay` takes them from here and
// evaluates only the orders the second class adds.
struct BaselineMemo {
  enum class Mode { record, replay } mode = Mode::record;
  std::map<std::string, double> sd_worst;  // forward order name -> its worst score under the sd magnitudes
  std::vector<std::pair<std::string, CandidateOutputs>> gradient_bases;  // the masked class's gradient orders
  size_t evaluated = 0;                    // forward and gradient orders evaluated (tests count them)
};
// Whether an exact-tier case's gradients must be bit-exact (gradient_verify.cpp).
bool gradient_exact_tier(const BatchProblem& p, const GradientReference& g);
Report check(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, BaselineMemo* memo);
// Scores the candidate's gradients into r (rows, reasons, note); called by check().
void check_gradients(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r);
void check_gradients(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r,
                     BaselineMemo* memo);

}  // namespace hla::check
