// The backward forms (hla/backward/<variant>.hpp) in f113, instantiated once here.
#include "hla/backward_impl.hpp"

HLA_BACKWARD_INSTANTIATIONS(, hla::f113)

#include "hla/state_impl.hpp"

HLA_STATE_INSTANTIATIONS(, hla::f113)
