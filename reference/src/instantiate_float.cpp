// evaluate() and friends for scalar type float (one unit per type: parallel builds).
#include "hla/evaluate_impl.hpp"

HLA_INSTANTIATE_EVALUATE(float)
