// Gradients from and of a state (ABI 1.4, HLA_FEAT_BACKWARD_STATE): what the
// state-gradient continuation probe asks of a candidate. Apart from adapter.hpp
// so that an adapter offers it by inheriting this interface too.
#pragma once

#include "hla/fuzz/adapter.hpp"

namespace hla::fuzz {

class StateBackward {
 public:
  virtual ~StateBackward() = default;
  // hla_impl_run_backward_state: the gradients of p continued from state_in
  // (null: zero) for the upstream dout, dden and dstate_out (the gradient of the
  // final state, in the candidate's opaque layout; null: zero) into out.dq, dk,
  // dv, and ∂L/∂state_in into state_out (when want_dstate_in).
  virtual RunResult run_backward_state(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                                       const std::vector<double>* state_in, const std::vector<double>* dstate_out,
                                       bool want_dstate_in) = 0;
};

}  // namespace hla::fuzz
