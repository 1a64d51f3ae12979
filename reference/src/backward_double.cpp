// The backward forms (hla/backward/<variant>.hpp) in double, instantiated once here:
// the float64 evaluation that proves a fixture's gradients belong to its inputs
// (check::verify_fixture), as the forward's double forms prove its outputs.
#include "hla/state_impl.hpp"

HLA_BACKWARD_INSTANTIATIONS(, double)

// The evaluation from a state shares the recurrences and reverse forms with the
// backward: in one unit they are instantiated once.
HLA_STATE_INSTANTIATIONS(, double)
