// The backward forms (hla/backward/<variant>.hpp) in rational, instantiated once here.
#include "hla/backward_impl.hpp"

HLA_BACKWARD_INSTANTIATIONS(, hla::Rational)

#include "hla/state_impl.hpp"

HLA_STATE_INSTANTIATIONS(, hla::Rational)
