// What the check layer's units share: the longest sequence, the worst elements, and whether a
// binary128 value with an error bound certifies its f64 rounding.
#pragma once

#include "hla/check/check.hpp"
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

// x with every digit a double needs to read back the same (for messages).
inline std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// The longest sequence of p (its a priori depth bounds use it).
inline Index longest_sequence(const BatchProblem& p) {
  Index m = 0;
  for (const auto& [t0, t1] : p.sequences()) m = std::max(m, t1 - t0);
  return m;
}

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

// Whether every value within e of x rounds to the same double as x does
// (then RN64(x) is the correctly rounded exact value).
inline bool certifies(const f113& x, const f113& e) {
  const double r = static_cast<double>(x);
  if (!std::isfinite(r) || !(e >= 0)) return false;
  const f113 lo = (f113(r) + f113(std::nextafter(r, -INFINITY))) / 2;
  const f113 hi = (f113(r) + f113(std::nextafter(r, INFINITY))) / 2;
  return x - e > lo && x + e < hi;
}

// p with q and k's feature columns reversed (and its state permuted alike):
// the same sums with every dot product accumulated in the opposite order
// (check.cpp; a baseline order). reverse_state_features applies the state's
// permutation (its own inverse) to a vector in BatchProblem::state layout.
BatchProblem with_reversed_features(BatchProblem p);
void reverse_state_features(const BatchProblem& p, std::vector<double>& state);

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
Report check(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, BaselineMemo* memo);
void check_gradients(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r,
                     BaselineMemo* memo);

}  // namespace hla::check
