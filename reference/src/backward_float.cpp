// The backward forms (hla/backward/<variant>.hpp) in float, instantiated once here:
// rule 3 of the gradient check (check/gradient.hpp) runs our own backward in a
// kernel's f32 compute precision, as the forward's baselines run our forms.
#include "hla/backward_impl.hpp"

HLA_BACKWARD_INSTANTIATIONS(, float)

#include "hla/state_impl.hpp"

HLA_STATE_INSTANTIATIONS(, float)  // the same code path from a state (rule 3 itself does not run there)
