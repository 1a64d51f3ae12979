// The catalog's forms that no change of inputs or options gives
// (catalog.cpp): hla2 with one state's decay wrong, in double.
#pragma once

#include "hla/engine/orders.hpp"

namespace hla::check {

enum class Hla2Decay {
  F_by_gamma,  // corrected state: F_t = γF_{t−1} + (S_tq_t)v_tᵀ (f alike)
  G_by_gamma,  // paper state: G_t = γG_{t−1} + γk_t(k_tᵀC_{t−1}) (h alike)
};
// Masked hla2 without an initial state (ridge, scale, normalize, GQA, varlen).
engine::CandidateOutputs hla2_wrong_decay(const BatchProblem& p, Hla2Decay which);

}  // namespace hla::check
