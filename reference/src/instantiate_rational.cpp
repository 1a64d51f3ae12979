// evaluate() and friends for scalar type Rational (one unit per type: parallel builds).
#include "hla/evaluate_impl.hpp"

HLA_INSTANTIATE_EVALUATE(hla::Rational)
