// evaluate() and friends for scalar type double (one unit per type: parallel builds).
#include "hla/evaluate_impl.hpp"

HLA_INSTANTIATE_EVALUATE(double)
