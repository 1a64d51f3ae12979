// safetensors reader/writer: round trips, deterministic bytes, and one
// hand-corrupted file per rule of the hardened reader.
#include "hla/io/atomic_file.hpp"
#include "hla/io/safetensors.hpp"
#include "io_util.hpp"

#include <cmath>

using namespace hla;
using namespace hla::io;
using hla::test::raw_safetensors;
using hla::test::require_input_error;
using hla::test::ScratchDir;

namespace {

SafetensorsFile sample() {
  SafetensorsFile f;
  f.tensors["w16"] = float_tensor(DType::f16, {2, 2}, {1.0, -0.0, 65504.0, std::ldexp(1.0, -24)}, "w16");
  f.tensors["b"] = float_tensor(DType::bf16, {3}, {1.0, -2.0, INFINITY}, "b");
  f.tensors["a64"] = float_tensor(DType::f64, {1, 2}, {0.1, NAN}, "a64");
  f.tensors["f32"] = float_tensor(DType::f32, {}, {0.5}, "f32");  // scalar
  f.tensors["empty"] = float_tensor(DType::f32, {0, 3}, {}, "empty");
  f.tensors["idx"] = i64_tensor({3}, {0, -1, 1LL << 40});
  f.tensors["mask"] = u8_tensor({2}, {0, 255});
  f.metadata["note"] = "ünïcode ok";
  f.metadata["z"] = "";
  return f;
}

// Writes bytes as a file and expects read_safetensors to refuse it, naming the file.
void refuse(const std::string& bytes, std::initializer_list<std::string> needles) {
  ScratchDir dir;
  const auto path = dir / "bad.safetensors";
  write_file_atomically(path, bytes);
  require_input_error([&] { (void)read_safetensors(path); }, {path.string()});
  require_input_error([&] { (void)read_safetensors(path); }, needles);
}

const std::string kA4 = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";

}  // namespace

TEST_CASE("safetensors: write then read returns the same tensors and metadata", "[io][safetensors]") {
  ScratchDir dir;
  const SafetensorsFile f = sample();
  write_safetensors(dir / "s.safetensors", f);
  const SafetensorsFile g = read_safetensors(dir / "s.safetensors");
  CHECK(g.metadata == f.metadata);
  REQUIRE(g.tensors.size() == f.tensors.size());
  for (const auto& [name, t] : f.tensors) {
    INFO(name);
    const Tensor& u = g.tensors.at(name);
    CHECK(u.dtype == t.dtype);
    CHECK(u.shape == t.shape);
    CHECK(u.bytes == t.bytes);
  }
  const auto w = float_values(g.tensors.at("w16"), "w16");
  CHECK(w[2] == 65504.0);
  CHECK(std::signbit(w[1]));
  CHECK(i64_values(g.tensors.at("idx"), "idx") == std::vector<std::int64_t>{0, -1, 1LL << 40});
  CHECK(u8_values(g.tensors.at("mask"), "mask") == std::vector<std::uint8_t>{0, 255});
  require_input_error([&] { (void)float_values(g.tensors.at("idx"), "tensor 'idx'"); }, {"tensor 'idx'", "I64", "float"});
}

TEST_CASE("safetensors: identical content gives identical bytes, laid out as specified", "[io][safetensors]") {
  ScratchDir dir;
  write_safetensors(dir / "1.safetensors", sample());
  write_safetensors(dir / "2.safetensors", sample());
  const std::string a = read_file_bytes(dir / "1.safetensors");
  CHECK(a == read_file_bytes(dir / "2.safetensors"));
  CHECK(a == serialize_safetensors(sample()));

  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(a[i])} << (8 * i);
  CHECK(n % 8 == 0);
  const std::string header = a.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.find('\n') == std::string::npos);
  const std::string trimmed = header.substr(0, header.find_last_not_of(' ') + 1);
  CHECK(trimmed.back() == '}');
  CHECK(header.size() - trimmed.size() < 8);
  // Sorted keys, compact JSON; largest element size first, then by name.
  CHECK(trimmed.rfind(R"({"__metadata__":{"note":"ünïcode ok","z":""},"a64":{"data_offsets":[0,16],"dtype":"F64","shape":[1,2]},)", 0) ==
        0);
  CHECK(trimmed.find(R"("idx":{"data_offsets":[16,40],"dtype":"I64","shape":[3]})") != std::string::npos);
  CHECK(trimmed.find(R"("f32":{"data_offsets":[40,44],"dtype":"F32","shape":[]})") != std::string::npos);
  CHECK(trimmed.find(R"("empty":{"data_offsets":[40,40],"dtype":"F32","shape":[0,3]})") != std::string::npos);
}

TEST_CASE("safetensors: an empty file (no tensors) is valid", "[io][safetensors]") {
  const SafetensorsFile g = parse_safetensors(raw_safetensors("{}", ""), "mem");
  CHECK(g.tensors.empty());
  CHECK(parse_safetensors(serialize_safetensors({}), "mem").tensors.empty());
}

TEST_CASE("safetensors: the writer refuses inconsistent tensors", "[io][safetensors]") {
  SafetensorsFile f;
  f.tensors["x"] = Tensor{StDType::F32, {3}, std::string(8, '\0')};
  require_input_error([&] { (void)serialize_safetensors(f); }, {"tensor 'x'", "8 bytes do not fit shape [3] of F32"});
  require_input_error([] { (void)float_tensor(DType::f32, {2, 2}, {1, 2, 3}, "q"); }, {"q", "3 values do not fill shape [2, 2]"});
}

TEST_CASE("reader: missing file", "[io][safetensors][hardening]") {
  require_input_error([] { (void)read_safetensors("/nonexistent/x.safetensors"); }, {"cannot open '/nonexistent/x.safetensors'"});
}

TEST_CASE("reader: file shorter than the 8-byte header length", "[io][safetensors][hardening]") {
  refuse(std::string(5, '\0'), {"truncated", "5 bytes"});
}

TEST_CASE("reader: header length beyond the end of the file", "[io][safetensors][hardening]") {
  refuse(raw_safetensors("{}", "", 1000), {"truncated: header length 1000 exceeds the 2 bytes"});
}

TEST_CASE("reader: header length above the 16 MiB cap", "[io][safetensors][hardening]") {
  refuse(raw_safetensors("{}", "", 200'000'000), {"header length 200000000 exceeds the limit of 16777216"});
  refuse(raw_safetensors("{}", "", ~std::uint64_t{0}), {"exceeds the limit"});
}

TEST_CASE("reader: file truncated inside the data buffer", "[io][safetensors][hardening]") {
  std::string bytes = serialize_safetensors(sample());
  bytes.pop_back();
  refuse(bytes, {"tensor '", "lie outside the data buffer"});
}

TEST_CASE("reader: header that is not JSON, not an object, or not UTF-8", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a": {"dtype": )", ""), {"header is not valid JSON"});
  refuse(raw_safetensors("", ""), {"header is not valid JSON"});
  refuse(raw_safetensors("[1, 2]  ", ""), {"header must be a JSON object, got array"});
  refuse(raw_safetensors("{\"__metadata__\":{\"x\":\"\xff\"}}", ""), {"header is not valid JSON"});
}

TEST_CASE("reader: unknown dtype", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", "abcd"), {"tensor 'a'", "unknown dtype 'F99'"});
  refuse(raw_safetensors(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "abcd"), {"tensor 'a'", "dtype must be a string"});
}

TEST_CASE("reader: shapes that are not arrays of non-negative integers", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
         {"tensor 'a'", "shape [-1] must hold non-negative integers"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", "abcd"),
         {"tensor 'a'", "must hold non-negative integers"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", "abcd"), {"tensor 'a'", "shape must be an array"});
}

TEST_CASE("reader: shape × dtype size differs from the byte length", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x')),
         {"tensor 'a'", "shape [3] of F32 needs 12 bytes but data_offsets [0,8] give 8"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", ""),
         {"tensor 'a'", "overflows 64 bits"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})", ""),
         {"tensor 'a'", "overflows 64 bits"});
}

TEST_CASE("reader: malformed data_offsets", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd"),
         {"tensor 'a'", "data_offsets must be [begin, end]"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"),
         {"tensor 'a'", "data_offsets must be [begin, end]"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", "abcd"), {"tensor 'a'", "end before they begin"});
}

TEST_CASE("reader: offsets outside the data buffer", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, 'x')),
         {"tensor 'a'", "data_offsets [0,16] lie outside the data buffer of 8 bytes"});
}

TEST_CASE("reader: overlapping tensors", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         std::string(12, 'x')),
         {"tensor 'b'", "overlaps tensor 'a'"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                         std::string(4, 'x')),
         {"tensor 'b'", "overlaps tensor 'a'"});
}

TEST_CASE("reader: gaps between tensors or before the first", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                         std::string(12, 'x')),
         {"gap in the data buffer: bytes 4..8 before tensor 'b'"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
         {"gap in the data buffer: bytes 0..4 before tensor 'a'"});
}

TEST_CASE("reader: trailing bytes after the last tensor", "[io][safetensors][hardening]") {
  refuse(raw_safetensors("{" + kA4 + "}", std::string(5, 'x')), {"trailing bytes: the data buffer holds 5 bytes but the tensors cover 4"});
  refuse(serialize_safetensors(sample()) + "junk", {"trailing bytes"});
}

TEST_CASE("reader: duplicate names", "[io][safetensors][hardening]") {
  refuse(raw_safetensors("{" + kA4 + "," + kA4 + "}", std::string(4, 'x')), {"the key 'a' twice"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "abcd"), {"the key 'dtype' twice"});
  refuse(raw_safetensors(R"({"__metadata__":{"k":"1","k":"2"}})", ""), {"the key 'k' twice"});
}

TEST_CASE("reader: metadata that is not an object of strings", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"__metadata__":{"ok":"x","n":1}})", ""), {"__metadata__ value of 'n' must be a string, got number 1"});
  refuse(raw_safetensors(R"({"__metadata__":{"x":null}})", ""), {"__metadata__ value of 'x' must be a string"});
  refuse(raw_safetensors(R"({"__metadata__":["a"]})", ""), {"__metadata__ must be an object of strings"});
}

TEST_CASE("reader: tensor entries with missing, unknown or mistyped keys", "[io][safetensors][hardening]") {
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", "abcd"), {"tensor 'a'", "missing key 'shape'"});
  refuse(raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "abcd"), {"tensor 'a'", "unknown key 'x'"});
  refuse(raw_safetensors(R"({"a":[1]})", ""), {"tensor 'a'", "entry must be an object"});
}
