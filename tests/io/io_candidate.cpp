// Candidate files: exact bits for every dtype (all 16-bit patterns), and
// clear errors for what a kernel may get wrong.
#include "hla/io/atomic_file.hpp"
#include "hla/io/candidate.hpp"
#include "io_util.hpp"

#include <cmath>
#include <random>

using namespace hla;
using namespace hla::io;
using hla::test::bits;
using hla::test::require_input_error;
using hla::test::ScratchDir;
using hla::test::tiny_fixture;

namespace {

// A fixture whose out has 65536 elements ([1, 1, 256, 256]); values are irrelevant.
Fixture wide_fixture() {
  Fixture f;
  BatchProblem& p = f.problem;
  p.n = 256;
  p.d = 1;
  p.dv = 256;
  p.q.assign(256, 0.0);
  p.k.assign(256, 0.0);
  p.v.assign(256 * 256, 0.0);
  f.ref_out.assign(65536, 0.0);
  f.mag_num.assign(65536, 0.0);
  f.ref_den.assign(256, 0.0);
  f.mag_den.assign(256, 0.0);
  return f;
}

std::string le_bytes(const std::vector<std::uint64_t>& patterns, std::size_t size) {
  std::string s;
  for (auto b : patterns)
    for (std::size_t i = 0; i < size; ++i) s.push_back(static_cast<char>((b >> (8 * i)) & 0xff));
  return s;
}

}  // namespace

TEST_CASE("candidate: every dtype round-trips bit for bit (subnormals, ±0, Inf, NaN)", "[io][candidate]") {
  ScratchDir dir;
  const Fixture fx = wide_fixture();
  std::mt19937_64 rng(11);
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    INFO(to_string(t));
    const std::size_t size = dtype_size(t);
    std::vector<std::uint64_t> out(65536), den(256);
    for (std::size_t i = 0; i < out.size(); ++i) {
      // 16-bit types: every pattern once; wider ones: special patterns, then random.
      out[i] = size == 2 ? i : rng() >> (64 - 8 * size);
    }
    if (t == DType::f32) {
      const std::uint64_t specials[] = {0x0, 0x80000000, 0x1, 0x807fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff};
      std::copy(std::begin(specials), std::end(specials), out.begin());
    } else if (t == DType::f64) {
      const std::uint64_t specials[] = {
          0x0, 0x8000000000000000, 0x1, 0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001, 0xffffffffffffffff};
      std::copy(std::begin(specials), std::end(specials), out.begin());
    }
    for (auto& b : den) b = rng() >> (64 - 8 * size);
    SafetensorsFile st;
    st.tensors["out"] = Tensor{st_dtype(t), {1, 1, 256, 256}, le_bytes(out, size)};
    st.tensors["den"] = Tensor{st_dtype(t), {1, 1, 256}, le_bytes(den, size)};
    const std::string original = serialize_safetensors(st);
    write_file_atomically(dir / "in.safetensors", original);

    const Candidate c = read_candidate(dir / "in.safetensors", fx);
    CHECK(c.out_dtype == t);
    REQUIRE(c.den.has_value());
    CHECK(c.den_dtype == t);
    write_candidate(dir / "out.safetensors", c, fx);
    CHECK(read_file_bytes(dir / "out.safetensors") == original);
    if (size == 2) {
      CHECK(std::isinf(c.out[t == DType::f16 ? 0x7c00 : 0x7f80]));
      CHECK(std::isnan(c.out[t == DType::f16 ? 0x7e00 : 0x7fc0]));
      CHECK(bits(c.out[0x8000]) == bits(-0.0));
      CHECK(c.out[1] > 0);
      CHECK(c.out[1] < (t == DType::f16 ? std::ldexp(1.0, -14) : std::ldexp(1.0, -126)));  // subnormal
    }
  }
}

TEST_CASE("candidate: state tensors and an absent den", "[io][candidate]") {
  ScratchDir dir;
  const Fixture fx = tiny_fixture();
  Candidate c;
  c.out_dtype = DType::bf16;
  c.out = {1, -2, NAN, INFINITY, -INFINITY, -0.0, 0.5, 0.25, 3, 4, 5, 6};
  for (int i = 0; i < 64; ++i) c.final_state.push_back(i % 16 < 4 ? i : 0);  // S given: the other parts stay zero
  c.final_state_parts = {"S", "C", "m", "F", "f"};
  c.final_state_dtype = DType::f16;
  write_candidate(dir / "c.safetensors", c, fx);
  const Candidate d = read_candidate(dir / "c.safetensors", fx);
  CHECK_FALSE(d.den.has_value());
  CHECK(d.out_dtype == DType::bf16);
  CHECK(d.final_state == c.final_state);
  CHECK(d.final_state_parts == c.final_state_parts);
  CHECK(d.final_state_dtype == DType::f16);
  for (std::size_t i = 0; i < c.out.size(); ++i) CHECK(bits(d.out[i]) == bits(c.out[i]));
}

TEST_CASE("candidate: gradients only against a fixture with gradients", "[io][candidate][gradients]") {
  io::Fixture fx = hla::test::tiny_fixture();
  SafetensorsFile st;
  st.tensors["out"] = float_tensor(DType::f32, out_shape(fx.problem), std::vector<double>(12, 1.0), "out");
  st.tensors["dk"] = float_tensor(DType::bf16, k_shape(fx.problem), std::vector<double>(6, 0.5), "dk");
  hla::test::require_input_error([&] { (void)candidate_from_safetensors(st, fx, "c.safetensors"); },
                                 {"c.safetensors", "tensor 'dk' is a gradient, but the fixture carries no gradients"});
  fx.gradients = true;
  fx.dout.assign(12, 1), fx.ref_dq.assign(12, 0), fx.mag_dq.assign(12, 1), fx.ref_dk.assign(6, 0), fx.mag_dk.assign(6, 1);
  fx.ref_dv.assign(6, 0), fx.mag_dv.assign(6, 1);
  const Candidate c = candidate_from_safetensors(st, fx, "c.safetensors");
  REQUIRE(c.dk);
  CHECK(c.dk_dtype == DType::bf16);
  CHECK(*c.dk == std::vector<double>(6, 0.5));
  CHECK_FALSE(c.dq);
  CHECK_FALSE(c.dv);
  // Written back: the same tensors.
  CHECK(candidate_to_safetensors(c, fx).tensors.count("dk"));
  st.tensors["dq"] = float_tensor(DType::f32, k_shape(fx.problem), std::vector<double>(6, 0.5), "dq");
  hla::test::require_input_error([&] { (void)candidate_from_safetensors(st, fx, "c.safetensors"); },
                                 {"tensor 'dq' has shape [1, 1, 3, 2], expected [1, 2, 3, 2]"});
}

TEST_CASE("candidate: what a kernel may write wrong is named", "[io][candidate][hardening]") {
  ScratchDir dir;
  const auto path = dir / "c.safetensors";
  const Fixture fx = tiny_fixture();
  auto refuse = [&](const SafetensorsFile& st, std::initializer_list<std::string> needles) {
    write_safetensors(path, st);
    require_input_error([&] { (void)read_candidate(path, fx); }, {path.string()});
    require_input_error([&] { (void)read_candidate(path, fx); }, needles);
  };
  const Tensor good_out = float_tensor(DType::f32, {1, 2, 3, 2}, std::vector<double>(12, 1.0), "out");
  SafetensorsFile st;
  st.tensors["den"] = float_tensor(DType::f32, {1, 2, 3}, std::vector<double>(6, 1.0), "den");
  refuse(st, {"tensor 'out' is missing", "[1, 2, 3, 2]"});
  st.tensors["out"] = float_tensor(DType::f32, {2, 3, 2}, std::vector<double>(12, 1.0), "out");
  refuse(st, {"tensor 'out' has shape [2, 3, 2], expected [1, 2, 3, 2]"});
  st.tensors["out"] = i64_tensor({1, 2, 3, 2}, std::vector<std::int64_t>(12, 1));
  refuse(st, {"tensor 'out' has dtype I64; expected F64, F32, BF16 or F16"});
  st.tensors["out"] = good_out;
  st.tensors["den"] = float_tensor(DType::f32, {1, 2, 3, 1}, std::vector<double>(6, 1.0), "den");
  refuse(st, {"tensor 'den' has shape [1, 2, 3, 1], expected [1, 2, 3]"});
  st.tensors.erase("den");
  st.tensors["output"] = good_out;
  refuse(st, {"unknown tensor 'output' (expected out, den, state.<part>)"});
  st.tensors.erase("output");
  st.tensors["state.G"] = float_tensor(DType::f32, {1}, {1.0}, "g");
  refuse(st, {"holds 'state.G', which is not part of the hla2 masked", "its parts are state.S state.C state.m state.F state.f"});
  st.tensors.erase("state.G");
  st.tensors["state.S"] = float_tensor(DType::f32, {2, 2, 2}, std::vector<double>(8, 1.0), "s");
  refuse(st, {"state.S has shape [2, 2, 2]; expected [2, 2, 2, 2]"});
  st.tensors["state.S"] = float_tensor(DType::f32, {2, 2, 2, 2}, std::vector<double>(16, 1.0), "s");
  refuse(st, {"holds 'state.*' tensors without 'state.C'"});  // a final state missing a part
  st.tensors.erase("state.S");

  Candidate c;
  c.out = std::vector<double>(12, 0.1);
  c.out_dtype = DType::f16;
  require_input_error([&] { write_candidate(path, c, fx); }, {"candidate out", "element 0", "not exactly representable in F16"});
  c.out = std::vector<double>(11, 1.0);
  require_input_error([&] { write_candidate(path, c, fx); }, {"candidate out: 11 values do not fill shape [1, 2, 3, 2]"});
}
