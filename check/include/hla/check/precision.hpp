// The compute precision a candidate declares; it sets the unit roundoff u in
// which its errors are scored.
#pragma once

#include <string>
#include <string_view>

namespace hla::check {

enum class Precision { f64, f32, tf32, bf16, f16 };

std::string to_string(Precision p);
Precision parse_precision(std::string_view s);  // throws InputError
// u = 2^-p for a p-bit significand: f64 2^-53, f32 2^-24, tf32 2^-11, bf16 2^-8, f16 2^-11.
double unit_roundoff(Precision p);

}  // namespace hla::check
