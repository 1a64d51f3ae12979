// safetensors files: an 8-byte little-endian header length N, N bytes of
// UTF-8 JSON (tensor name -> {"dtype", "shape", "data_offsets"}, plus an
// optional "__metadata__" object of strings), then the data buffer.
//
// The reader trusts nothing in the file: every rule below is checked and a
// violation throws hla::InputError naming the file, the tensor and the rule.
// The writer is deterministic: identical content gives identical bytes.
#pragma once

#include "hla/batch.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hla::io {

// The element types of the format (those of the reference implementation
// with a whole number of bytes); any other dtype string is rejected.
enum class StDType { BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F8_E4M3, F8_E5M2, F16, BF16, F32, F64 };
std::string to_string(StDType t);
std::optional<StDType> parse_st_dtype(std::string_view s);
std::size_t st_dtype_size(StDType t);
StDType st_dtype(DType t);                     // f64 -> F64, ...
std::optional<DType> float_dtype(StDType t);   // F64, F32, BF16, F16 -> DType; others: nothing

// Elements of a shape (1 for a scalar), or nothing when a dimension is
// negative or the product overflows 64 bits.
std::optional<std::uint64_t> shape_elements(const std::vector<std::int64_t>& shape);

struct Tensor {
  StDType dtype = StDType::F64;
  std::vector<std::int64_t> shape;  // row-major; [] is a scalar
  std::string bytes;                // little-endian, st_dtype_size(dtype) × elements()
  std::uint64_t elements() const;   // product of shape (1 for a scalar)
};

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"; empty: omitted on write
};

// Limits of the reader, so that its work is tied to what a fixture needs: a
// header of at most 16 MiB (a fixture's is a few KB; the reference
// implementation allows 100 MB, which a nested-bracket bomb turns into
// gigabytes of parse tree), JSON nested at most 8 deep (a header needs 3),
// tensors of rank ≤ 8, and a data buffer of at most 64 GiB.
inline constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{16} << 20;
inline constexpr int kMaxHeaderDepth = 8;
inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::uint64_t kMaxDataBytes = std::uint64_t{64} << 30;

// Parses and validates a whole file held in memory. `source` names it in
// messages. Rules: at least 8 bytes; header length ≤ kMaxHeaderBytes and
// within the file; header a JSON object (valid UTF-8, no duplicate keys at any
// level); each tensor an object with exactly "dtype" (a known dtype string),
// "shape" (array of non-negative integers) and "data_offsets" ([begin, end]
// integers, begin ≤ end ≤ buffer size); size of dtype × product(shape) ==
// end − begin (overflow checked); tensors sorted by offset tile the data
// buffer exactly (first at 0, no gap, no overlap, last ends at the end of
// the file); "__metadata__" an object whose values are all strings; tensor
// names non-empty without control bytes; the limits above.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source);
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// The file's bytes. Tensors are laid out by element size (largest first, so
// every tensor is aligned to its element size, as in the reference
// implementation), then by name; the header is compact JSON with sorted keys,
// padded with spaces to a multiple of 8 bytes. Throws InputError when a
// tensor's bytes do not match its shape and dtype, or a name or metadata
// string is not valid UTF-8.
std::string serialize_safetensors(const SafetensorsFile& file);
// serialize_safetensors written atomically (atomic_file.hpp).
void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file);

// Tensors from values. Floats: throws InputError naming `what` and the first
// element that type t cannot hold exactly (hla::representable); NaN and ±Inf
// are stored as such.
Tensor float_tensor(DType t, std::vector<std::int64_t> shape, const std::vector<double>& values,
                    const std::string& what);
Tensor i64_tensor(std::vector<std::int64_t> shape, const std::vector<std::int64_t>& values);
Tensor u8_tensor(std::vector<std::int64_t> shape, const std::vector<std::uint8_t>& values);

// Values from tensors, exact. Throw InputError naming `what` when the dtype
// is not one they read (float_values: F64, F32, BF16, F16).
std::vector<double> float_values(const Tensor& t, const std::string& what);
std::vector<std::int64_t> i64_values(const Tensor& t, const std::string& what);
std::vector<std::uint8_t> u8_values(const Tensor& t, const std::string& what);

// "[2, 3, 4]", for messages.
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace hla::io
