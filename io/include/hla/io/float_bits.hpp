// Exact bit-level conversions between the float storage types and double.
// Every f32, bf16 and f16 value (NaN payloads included) is a double, so these
// never round: decode is exact, and encode succeeds only for values the
// target type holds exactly. Done by bit manipulation so that subnormals,
// signed zeros, infinities and NaN payloads survive a round trip unchanged.
// The formats are the rows of hla/dtype.hpp.
#pragma once

#include "hla/dtype.hpp"

#include <cstdint>
#include <optional>

namespace hla::io {

// The value of the `dtype_size(t)`-byte pattern `bits` (low bits of the word).
double decode_float(DType t, std::uint64_t bits);

// The bit pattern of x in type t, or nothing when x is not exactly a value of
// t (too many significant bits, out of range). NaN: the sign and the top
// payload bits that fit are kept (a payload that would vanish becomes the quiet
// bit), so a NaN decoded from t re-encodes to its own bits.
std::optional<std::uint64_t> encode_float(DType t, double x);

}  // namespace hla::io
