// The catalog's forms that no change of inputs or options gives
// (catalog.cpp), in double: hla2 with one state's decay wrong; hla2's chunk
// carries combined by the paper's E2 operator; a causal mask strict inside
// chunks (catalog_forms.cpp); a flawed la1/hla2 backward (catalog_backward.cpp).
#pragma once

#include "hla/engine/orders.hpp"
#include "hla/engine/reference.hpp"

#include <vector>

namespace hla::check {

enum class Hla2Decay {
  F_by_gamma,  // corrected state: F_t = γF_{t−1} + (S_tq_t)v_tᵀ (f alike)
  G_by_gamma,  // paper state: G_t = γG_{t−1} + γk_t(k_tᵀC_{t−1}) (h alike)
};
// Masked hla2 without an initial state (ridge, scale, normalize, GQA, varlen).
engine::CandidateOutputs hla2_wrong_decay(const BatchProblem& p, Hla2Decay which);

// Masked hla2 by chunks of w tokens: each chunk's own prefix and its summary
// right (SPEC §4), the carry into the next chunk by the paper's E2 operator
// (ρ_B on G_A where ρ_B² belongs), combined left to right.
engine::CandidateOutputs hla2_e2_chunk_carry(const BatchProblem& p, Index w);

// la1, hla2 (masked) or ahla with the causal mask strict (<, not ≤) between
// two tokens of one chunk of w tokens, the carried chunk summaries complete:
// the reference's num and den less the terms that drops (la1: j = t; hla2:
// j = t, and i = j inside t's chunk, and the ridge's j = t; ahla: i = t, and
// j = i inside t's chunk), normalized as p says; one form per width w of
// `widths` (la1's does not depend on w).
std::vector<engine::CandidateOutputs> strict_mask_in_chunks(const BatchProblem& p, const engine::Reference& ref,
                                                            const std::vector<Index>& widths);

// A la1 / masked hla2 backward (SPEC §9 reverse recurrences), with a flaw.
enum class BackwardFlaw {
  none,
  dk_no_cross,            // hla2: dk_i = M_ik_i, the k_i(…)ᵀ half of d(k_ik_iᵀ) dropped
  adjoint_decay_gamma,    // hla2: R_j = γR_{j+1} + q_jȲ_jᵀ, not γ²
  dq_carry_chunk_before,  // dq_t's carry F_{c0−1}Ȳ_t at a chunk start t = c0 read from the carry into the chunk before
  adjoints_not_reset,     // packed sequences: R, M not reset at a sequence's end (the forward resets its state)
};
// The upstream (non-finite entries as 0), the forward's num and den (for the
// normalized upstream), laid out as p's, and the final state's upstream (as
// BatchProblem::state; null: none). From p.state where p has one.
struct BackwardInputs {
  const std::vector<double>&dout, &dden, &num, &den;
  const std::vector<double>* dstate_end = nullptr;
};
// dq, dk, dv; w: the chunk width of dq_carry_chunk_before.
engine::CandidateOutputs la1_hla2_backward(const BatchProblem& p, const BackwardInputs& in, BackwardFlaw flaw, Index w = 16);
// The same from the reference's upstream, num and den (no state).
engine::CandidateOutputs flawed_backward(const BatchProblem& p, const engine::Reference& ref, BackwardFlaw flaw, Index w = 16);

}  // namespace hla::check
