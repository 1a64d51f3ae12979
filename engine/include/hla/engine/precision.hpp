// The compute precision a candidate declares; it sets the unit roundoff u in
// which its errors are scored.
#pragma once

#include "hla/dtype.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace hla::engine {

enum class Precision { f64, f32, tf32, bf16, f16, bf16_f32, f16_f32 };

// A compute precision is a binary format like a dtype (hla/dtype.hpp); tf32
// is f32's exponent with f16's significand. Each dtype computes by default in
// the precision of its own name. tf32, "bf16+f32" and "f16+f32" are tensor-core
// precisions: the operands of products (inputs, states, attention blocks) are
// rounded to the format, products are accumulated in f32 (Triton's tl.dot on
// bf16 with an f32 accumulator; FLA's chunk kernels with their states stored in
// bf16). Every rounding is then within u of the format, so the bound of rule 2
// holds as for the format; our orders for rule 3 run in f32.
struct PrecisionInfo {
  Precision id;
  std::string_view name;
  int exponent_bits;
  int mantissa_bits;
  // A tensor-core precision (above): the format its products' operands are rounded to,
  // hla::fast::OperandRounding's 1 bf16, 2 f16, 3 tf32; 0 for the others.
  int operand_format = 0;
  // u = 2^-p for a p-bit significand: f64 2^-53, f32 2^-24, tf32 2^-11, bf16 2^-8, f16 2^-11.
  constexpr double unit_roundoff() const { return hla::detail::pow2(-(mantissa_bits + 1)); }
  constexpr double smallest_normal() const { return hla::detail::pow2(2 - (1 << (exponent_bits - 1))); }
};
inline constexpr std::array kPrecisions{
    PrecisionInfo{Precision::f64, "f64", 11, 52},          PrecisionInfo{Precision::f32, "f32", 8, 23},
    PrecisionInfo{Precision::tf32, "tf32", 8, 10, 3},      PrecisionInfo{Precision::bf16, "bf16", 8, 7},
    PrecisionInfo{Precision::f16, "f16", 5, 10},           PrecisionInfo{Precision::bf16_f32, "bf16+f32", 8, 7, 1},
    PrecisionInfo{Precision::f16_f32, "f16+f32", 5, 10, 2}};
constexpr const PrecisionInfo& info(Precision p) { return kPrecisions[static_cast<std::size_t>(p)]; }
static_assert(info(Precision::f16).smallest_normal() == 0x1p-14 && info(Precision::f32).smallest_normal() == 0x1p-126);
static_assert(info(Precision::bf16_f32).id == Precision::bf16_f32 && info(Precision::f16_f32).id == Precision::f16_f32);

std::string to_string(Precision p);
Precision parse_precision(std::string_view s);  // throws InputError
inline double unit_roundoff(Precision p) { return info(p).unit_roundoff(); }
// The precision our orders compute in for a declared one: f32 for the tensor-core precisions,
// whose fast-engine orders round the operands of their products to the format.
constexpr int operand_format(Precision p) { return info(p).operand_format; }
constexpr bool tensor_core(Precision p) { return operand_format(p) != 0; }
constexpr Precision orders_precision(Precision p) { return tensor_core(p) ? Precision::f32 : p; }
// The precision a dtype computes in unless declared otherwise.
Precision precision_of(DType t);

// The compute precision a candidate declares per input dtype: "f32" (one for
// every dtype) or "bf16=f32,f16=f32,f32=f32,f64=f64" (dtypes not named fall
// back to the output dtype's precision). Kernels commonly compute in f32 on
// bf16/f16 inputs, so one precision for every dtype judges them wrongly.
struct PrecisionMap {
  std::optional<Precision> all;
  std::map<DType, Precision> by_dtype;
  bool empty() const { return !all && by_dtype.empty(); }
  // The declared precision for inputs of dtype t, if any.
  std::optional<Precision> of(DType t) const;
  std::string str() const;  // parse(str()) == *this
  bool operator==(const PrecisionMap&) const = default;
};
PrecisionMap parse_precision_map(std::string_view s);  // throws InputError; "" is the empty map

// How a candidate accumulates its terms: its evaluation class (SPEC §7). Each
// class has its own a priori bound (depth_bound: the longest rounding path its
// kernels can have) and its own orders of ours in rule 3:
//   masked            nested sums of masked terms: the streaming F form, scans,
//                     chunked matmul forms, tree sums (the default);
//   state_difference  subtracts unmasked partial sums (S_tC_t − G_t, the paper's
//                     Algorithms 1–3): judged against the unmasked-order magnitude;
//   flat              every literal term of the §2 definition added into one
//                     accumulator per output, in any order or association;
//   flat:W            a chunked kernel (chunks of width W) whose intra-chunk terms
//                     are added one by one (pair by pair) into the output.
// Declared as one word (`--form-class flat:64`, `form_class="flat:64"`) or, in
// the C ABI, one value (HLA_CLASS_FLAT_CHUNKS(64)).
struct FormClass {
  enum class Kind : std::int8_t { masked, state_difference, flat };
  Kind kind = Kind::masked;
  std::int64_t width = 0;  // flat: the chunk width W (0: the whole sequence)
  static const FormClass masked, state_difference;
  static constexpr FormClass flat(std::int64_t w = 0) { return {Kind::flat, w}; }
  bool operator==(const FormClass&) const = default;
  bool is_flat() const { return kind == Kind::flat; }
};
inline constexpr FormClass FormClass::masked{FormClass::Kind::masked, 0};
inline constexpr FormClass FormClass::state_difference{FormClass::Kind::state_difference, 0};
inline constexpr std::int64_t kMaxFlatWidth = 1 << 16;
std::string to_string(FormClass c);  // "masked", "state_difference", "flat", "flat:64"
// "masked" | "state_difference" | "flat" | "flat:W" (1 ≤ W ≤ kMaxFlatWidth);
// anything else: InputError listing the valid values.
FormClass parse_form_class(std::string_view s);
// The C ABI's int32 code (hla_impl.h: the kind in the low byte, a flat chunk
// width above it); InputError for an unknown one.
FormClass form_class_from_code(std::int32_t code);

}  // namespace hla::engine
