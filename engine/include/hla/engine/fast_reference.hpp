// The certified reference at scale: one head evaluated by the fast engine
// (hla/fast/engine.hpp) in double-double through the chunked matmul form,
// every element certified from the engine's running error bound.
#pragma once

#include "hla/engine/reference.hpp"

namespace hla::engine {

struct FastHeadOutcome {
  bool ok = false;  // false: the engine could not evaluate the head (no chunked form, NaN/Inf, overflow): use binary128
  Index redo = 0;   // 1 + the last token (relative to t0) with an element not certified (0: every element certified)
};

// Fills ref's out, num, den, mag_num, mag_den, flags and den_flags of head h
// of batch entry b, tokens [t0, t1), from the double-double engine: values and
// magnitudes rounded to nearest from it; an element is certified (its flag
// clear) when every value within the engine's bound of the computed one rounds
// to the same double — then it is the correctly rounded exact value. Inputs
// must be finite. Does not touch the state-difference magnitudes. Heads with
// tokens·d·(d + dv) above double_magnitudes_above take their magnitudes from
// the double engine on absolute values (stored as computed, certified through
// its upward bound) instead of double-double (stored rounded to nearest).
FastHeadOutcome fast_head(const BatchProblem& p, Reference& ref, Index b, Index h, Index t0, Index t1, Index chunk = 64,
                          double double_magnitudes_above = 0x1p22);

}  // namespace hla::engine
