#include "hla/io/float_bits.hpp"

namespace hla::io {

double decode_float(DType t, std::uint64_t bits) { return info(t).decode(bits); }

std::optional<std::uint64_t> encode_float(DType t, double x) { return info(t).encode(x); }

}  // namespace hla::io
