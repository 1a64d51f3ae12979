// evaluate() and friends for f16 with rounding after every operation (Eigen's
// f16 type): the checker's baseline in the candidate's precision.
#include "hla/evaluate_impl.hpp"

HLA_INSTANTIATE_EVALUATE(hla::f16)
