// Emulated precisions live in matrix.hpp (Emu<K>); this header names the
// conversion of inputs and options to them.
#pragma once

#include "hla/fast/matrix.hpp"

namespace hla::fast {

// The nearest value of kind K (0 f32, 1 bf16, 2 f16) to x, ties to even.
float round_emu(int kind, double x);

}  // namespace hla::fast
