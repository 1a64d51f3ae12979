// The catalog of known mistakes (differential diagnosis, catalog.cpp): one
// row per mistake, each evaluating the wrong form on a failing report's
// inputs in double; catalog_match.cpp says which of them the candidate matches.
#pragma once

#include "internal.hpp"

#include <optional>
#include <string>
#include <vector>

namespace hla::check {

// One evaluation of a wrong form: outputs (out, den) or gradients (dq, dk,
// dv) in double; `suffix` names a searched parameter ("/16": chunk width 16).
// `magnitude`: where the form is ours on changed inputs, its SPEC §7
// magnitudes (num in out, den in den: the same change on |q|, |k|, |v|),
// which its rounding scales with; else empty.
// `judged_at`: the candidate judged at this precision instead of its
// declared f32 (values: the reference; a precision row, matched only where
// f32 is declared).
struct WrongForm {
  std::string suffix;
  CandidateOutputs values;
  CandidateOutputs magnitude{};
  std::optional<Precision> judged_at{};
};

struct Mistake {
  const char* id;
  bool gradients;  // compared on dq, dk, dv (else on out and den)
  const char* what;
  const char* fix;
  // Whether the mistake changes anything on p (an option it needs, a GQA
  // problem, decay, ...); then its forms on p.
  bool (*applies)(const BatchProblem& p, const Reference& ref);
  std::vector<WrongForm> (*evaluate)(const BatchProblem& p, const Reference& ref);
  bool final_state = false;  // compared on the final state (state.<part>; values.final_state) instead
  // A continuation row: evaluated (instead of `evaluate`) only on a state-continuation check, with its splits.
  std::vector<WrongForm> (*continued)(const BatchProblem& p, const Reference& ref, const std::vector<Index>& splits) = nullptr;
  // Reads across heads or batch entries (a layout, the GQA mapping): at scale, evaluated on
  // the whole problem, where the other output rows take the first heads (catalog_match.cpp).
  bool across_heads = false;
};

const std::vector<Mistake>& mistake_catalog();

// The catalog's mistakes that cand matches (catalog_match.cpp), best first.
// splits: a state-continuation check's (CheckOptions::continuation_splits);
// work: CheckOptions::diagnosis_work.
std::vector<Diagnosis> differential_diagnosis(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const Report& r,
                                              const std::vector<Index>& splits = {}, double work = 0x1p27);

}  // namespace hla::check
