// Every documented limit at its edge (docs/pass-rule.md "What a PASS guarantees",
// bounded work): the limit itself is accepted, one past it refused with the
// message that names that limit (not some later check's).
#include "hla/io/fixture.hpp"
#include "hla/io/safetensors.hpp"
#include "io_util.hpp"

using namespace hla;
using namespace hla::io;
using hla::test::raw_safetensors;
using hla::test::require_input_error;
using hla::test::tiny_fixture;

namespace {

SafetensorsFile parse(const std::string& bytes) { return parse_safetensors(bytes, "limits.safetensors"); }

// One F32 tensor "a" of the given shape (all dims 1) in a header.
std::string tensor_of_rank(size_t rank) {
  std::string shape;
  for (size_t i = 0; i < rank; ++i) shape += (i ? ",1" : "1");
  return R"({"a":{"dtype":"F32","shape":[)" + shape + R"(],"data_offsets":[0,4]}})";
}

}  // namespace

TEST_CASE("limits: the header length cap is 16 MiB exactly", "[io][limits]") {
  // A header of exactly 16 MiB (an empty object padded with spaces) is read;
  // a length of 16 MiB + 1 is refused by the cap, before any truncation check.
  const std::uint64_t cap = std::uint64_t{16} << 20;
  std::string header = "{}";
  header.resize(cap, ' ');
  CHECK(parse(raw_safetensors(header, "")).tensors.empty());
  require_input_error([&] { (void)parse(raw_safetensors("{}", "", cap + 1)); },
                      {"header length 16777217 exceeds the limit of 16777216 bytes"});
}

TEST_CASE("limits: tensors of rank 8 are read, rank 9 refused", "[io][limits]") {
  const SafetensorsFile f = parse(raw_safetensors(tensor_of_rank(8), std::string(4, '\0')));
  CHECK(f.tensors.at("a").shape.size() == 8);
  require_input_error([&] { (void)parse(raw_safetensors(tensor_of_rank(9), std::string(4, '\0'))); },
                      {"shape has 9 dimensions, more than 8"});
}

TEST_CASE("limits: JSON nested 8 deep passes the depth check, 9 deep is refused by it", "[io][limits]") {
  // {"a":[[…[1]…]]}: the object is level 1, each bracket one more.
  auto nested = [](int levels) { return "{\"a\":" + std::string(levels - 1, '[') + "1" + std::string(levels - 1, ']') + "}"; };
  try {
    (void)parse(raw_safetensors(nested(8), ""));
    FAIL("a tensor entry that is an array must be refused");
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("deeper than") == std::string::npos);  // refused later, as not a tensor
  }
  require_input_error([&] { (void)parse(raw_safetensors(nested(9), "")); }, {"header nests JSON deeper than 8 levels"});
}

TEST_CASE("limits: fixture dimensions up to 2^40 parse, 2^40 + 1 is refused by the metadata reader", "[io][limits]") {
  auto with_n = [](const std::string& n) {
    SafetensorsFile st = fixture_to_safetensors(tiny_fixture());
    st.metadata["n"] = n;
    st.metadata["digest"] = fixture_digest(st);  // a forged file: the checks behind the digest decide
    return st;
  };
  // 2^40 itself passes the metadata reader (and is refused later: the tensors do not fit it).
  try {
    (void)fixture_from_safetensors(with_n("1099511627776"), "x");
    FAIL("n = 2^40 with 3-token tensors must be refused");
  } catch (const InputError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find("dimension below 2^40") == std::string::npos);
  }
  require_input_error([&] { (void)fixture_from_safetensors(with_n("1099511627777"), "x"); },
                      {"metadata n = '1099511627777' is not a dimension below 2^40"});
}

TEST_CASE("limits: numbers of 400 characters parse, 401 are refused", "[io][limits]") {
  CHECK(parse_rational(std::string(399, '0') + "1") == 1);
  require_input_error([&] { (void)parse_rational(std::string(400, '0') + "1"); }, {"longer than 400 characters"});
}

TEST_CASE("limits: shapes a problem may not have", "[io][limits]") {
  auto valid = [] {
    BatchProblem p;
    p.batch = 1, p.heads = 4, p.kv_heads = 2, p.n = 3, p.d = 1, p.dv = 1;
    p.resize_buffers();
    return p;
  };
  CHECK_NOTHROW(valid().validate());
  BatchProblem p = valid();
  p.kv_heads = 3;  // 4 query heads cannot share 3 kv heads evenly
  p.resize_buffers();
  require_input_error([&] { p.validate(); }, {"heads = 4 is not a multiple of kv_heads = 3"});
  p = valid();
  p.n = (Index{1} << 31) + 1;  // the cap is checked before any buffer size
  require_input_error([&] { p.validate(); }, {"n = 2147483649 exceeds the limit of 2147483648"});
  p = valid();
  p.n = Index{1} << 31;  // the cap itself: refused later, by the buffer sizes only
  require_input_error([&] { p.validate(); }, {"q holds"});
  p = valid();
  p.offsets = {0, 1, 1, 3};  // an empty packed sequence
  require_input_error([&] { p.validate(); }, {"offsets must be strictly increasing (offsets[2] = 1)"});
  p.offsets = {0, 1, 3};
  CHECK_NOTHROW(p.validate());
}
