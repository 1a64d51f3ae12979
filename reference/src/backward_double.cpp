// The backward forms (hla/backward/<variant>.hpp) in double, instantiated once here:
// the float64 evaluation that proves a fixture's gradients belong to its inputs
// (check::verify_fixture), as the forward's double forms prove its outputs.
#include "hla/backward_impl.hpp"

HLA_BACKWARD_INSTANTIATIONS(, double)
