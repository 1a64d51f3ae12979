// Fuzz cases: a problem drawn inside what the candidate supports, plus the
// probe it is run under, and the reductions the shrinker tries.
#pragma once

#include "hla/fuzz/adapter.hpp"
#include "hla/gen/distributions.hpp"

#include <string>
#include <vector>

namespace hla::fuzz {

enum class Probe {
  plain,               // run once, check against the reference
  nan_causality,       // a NaN/Inf at token j must not reach outputs before j
  state_continuation,  // tokens [0, m) then [m, n) with the state passed == one run
  grad_nan_causality,  // a NaN/Inf in the upstream dout at token j must not reach gradients of tokens after j
};
std::string to_string(Probe p);

struct FuzzCase {
  BatchProblem p;
  Probe probe = Probe::plain;
  gen::Dist dist = gen::Dist::gaussian;
  bool exact_tier = false;
  // state_continuation: per sequence (p.sequences(), packed or not), the first
  // token of its second call: tokens [t0, m) of every sequence go in one call,
  // [m, t1) in the next, each sequence from the state its first part left.
  std::vector<Index> splits;
  // Upstream gradients (SPEC §9), drawn when the candidate declares
  // HLA_FEAT_BACKWARD: the case also runs the backward and judges dq, dk, dv.
  // dout [B,H,n,dv] (values of the problem's dtype), dden [B,H,n] or empty.
  bool grad = false;
  std::vector<double> dout, dden;
  std::string describe() const;  // one line: options, shapes, dist, probe
};

// Case number i of the campaign stream `seed` (deterministic; shards take
// disjoint i). Only variants, dtypes, features and sizes in s.
FuzzCase make_case(const Supports& s, uint64_t seed);

// Smaller or simpler versions of c, most aggressive first (shrinking).
std::vector<FuzzCase> reductions(const FuzzCase& c, const Supports& s);

// c with its non-finite inputs and upstream entries as 0: a plain case (what
// a NaN probe's candidate does without the NaN).
FuzzCase without_planted_nan(const FuzzCase& c);

// Token ranges [t0, t1) of one batch row.
using Ranges = std::vector<std::pair<Index, Index>>;

// The tokens of `ranges` of every head, each range one packed sequence (one
// range: no offsets).
BatchProblem pieces(const BatchProblem& p, const Ranges& ranges);

// Tokens [t0, t1) of every head (no packed offsets).
BatchProblem slice_tokens(const BatchProblem& p, Index t0, Index t1);

// A state case's two calls: [t0, m) of each sequence, then [m, t1) (c.splits).
std::pair<Ranges, Ranges> state_parts(const FuzzCase& c);

}  // namespace hla::fuzz
