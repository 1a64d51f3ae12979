// The double instantiation of the evaluation from a state (rationals and
// binary128: backward_*.cpp; the layouts: state_layout.cpp).
#include "hla/state_impl.hpp"

HLA_STATE_INSTANTIATIONS(, double)
