// evaluate() and friends for bf16 with rounding after every operation (Eigen's
// bf16 type): the checker's baseline in the candidate's precision.
#include "hla/evaluate_impl.hpp"

HLA_INSTANTIATE_EVALUATE(hla::bf16)
