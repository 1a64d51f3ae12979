// evaluate() and friends for scalar type f113 (one unit per type: parallel builds).
#include "hla/evaluate_impl.hpp"

HLA_INSTANTIATE_EVALUATE(hla::f113)
