// Named suites of fixture cases for `hla gen`. A case is a problem plus how
// it was made; the reference is computed when it is written.
#pragma once

#include "hla/gen/distributions.hpp"

#include <string>
#include <vector>

namespace hla::gen {

struct Case {
  std::string name;  // unique in the suite; the fixture's file stem
  BatchProblem problem;
  Dist dist = Dist::gaussian;
  uint64_t seed = 0;        // of this case's values
  bool exact_tier = false;  // float32 evaluation is exact: the check demands bit equality
  // Gradients (SPEC §9): when `grad`, the fixture carries the upstream
  // dout [B,H,n,dv] (and dden [B,H,n], or empty) and the reference gradients.
  bool grad = false;
  std::vector<double> dout, dden;
};

// Fills c.dout (and c.dden when with_dden) with N(0,1) values rounded to the
// problem's dtype, from a stream of their own (the inputs' draws are unchanged).
void fill_upstream(Case& c, bool with_dden);

// Gives p (not packed) an initial state as a kernel would carry it: per batch
// entry and query head the state after `earlier` tokens of distribution dist
// drawn from rng (streaming in double), in float32. InputError for a variant
// without a state or too many elements.
void fill_state(BatchProblem& p, Dist dist, Rng& rng, Index earlier);

// "golden" (small, committed under fixtures/), "default" (every variant ×
// option × dtype, n = 1 … 4096, ragged chunk boundaries, exact tier,
// adversarial inputs). Throws InputError for an unknown name.
std::vector<Case> make_suite(const std::string& name, uint64_t seed);
const std::vector<std::string>& suite_names();

// Exact tier rule: integer inputs, γ = 1, unnormalized, scale 1, ridge λ an
// integer or 1/2^k, and every head's unmasked-order magnitude below 2^24/2^k —
// then every term and every partial sum a kernel can form is a multiple of
// 2^-k of smaller magnitude, exact in float32.
bool qualifies_exact_tier(const BatchProblem& p);

}  // namespace hla::gen
