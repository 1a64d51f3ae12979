// Gradients (SPEC §9) as the check layer sees them: the magnitudes a
// candidate's gradients are scored against. The reference gradients
// and the bound they and the verdict share: hla/engine/gradient_reference.hpp.
#pragma once

#include "hla/backward.hpp"
#include "hla/check/check.hpp"
#include "hla/engine/gradient_reference.hpp"

#include <functional>
#include <string>
#include <vector>

namespace hla::check {

// Per element of dq [B,H,n,d], dk [B,Hkv,n,d], dv [B,Hkv,n,dv] and dstate
// (BatchProblem::state layout): the magnitude M* = (K_b·M + K_q·M_κ)/K_g a
// candidate of class `cls` computing in precision u is scored against
// (gradient_yardstick.cpp; without normalize M*, = M, the class's gradient
// magnitude), +inf where the element depends on a token whose den ⊕ ε is not
// bounded away from the pole (those tokens are listed in `ill`).
struct GradientYardstick {
  std::vector<double> q, k, v, state;
  struct Token {
    Index b, h, t;
  };
  std::vector<Token> ill;
};
GradientYardstick gradient_yardstick(const BatchProblem& p, const Reference& ref, const GradientReference& g, FormClass cls, double u);

}  // namespace hla::check
