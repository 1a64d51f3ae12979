// Helpers shared by the io_* test files: scratch directories, hand-made
// safetensors bytes for corruption tests, and a small valid fixture.
#pragma once

#include "hla/io/fixture.hpp"

#include <catch2/catch.hpp>

#include <bit>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

namespace hla::test {

// A fresh directory under the system temp dir, removed with its contents.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "hla_io_test_XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
  // Names of everything in the directory (hidden files included), sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

// 8-byte little-endian length + header + data, as a corrupt file would be written.
inline std::string raw_safetensors(const std::string& header, const std::string& data, std::uint64_t length) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xff));
  return out + header + data;
}
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  return raw_safetensors(header, data, header.size());
}

// Runs f, which must throw InputError whose message contains every needle.
inline void require_input_error(const std::function<void()>& f, std::initializer_list<std::string> needles) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    for (const auto& n : needles) {
      INFO("expected the message to contain: " << n);
      CHECK(msg.find(n) != std::string::npos);
    }
    return;
  }
  FAIL("expected an InputError");
}

inline std::uint64_t bits(double x) { return std::bit_cast<std::uint64_t>(x); }

// A small valid hla2 fixture (values need not be a true reference for I/O tests).
inline io::Fixture tiny_fixture(DType dtype = DType::f32) {
  io::Fixture f;
  BatchProblem& p = f.problem;
  p.dtype = dtype;
  p.opt.gamma = Rational(3, 4);
  p.opt.lambda = Rational(1, 3);
  p.opt.scale = Rational(-5, 7);
  p.opt.normalize = true;
  p.opt.eps_mode = EpsMode::clamp;
  p.batch = 1;
  p.heads = 2;
  p.kv_heads = 1;
  p.n = 3;
  p.d = 2;
  p.dv = 2;
  p.offsets = {0, 1, 3};
  for (int i = 0; i < 12; ++i) p.q.push_back(0.25 * (i - 6));
  for (int i = 0; i < 6; ++i) p.k.push_back(0.5 * (i - 3));
  for (int i = 0; i < 6; ++i) p.v.push_back(i == 2 ? -0.0 : 1.0 + i);
  f.ref_out = {0.1, -0.2, 1e-300, 4.9e-324, -0.0, 1e300, 2.0, 3.0, 5.0, 7.0, 11.0, 13.0};
  f.ref_den = {1.0 / 3, 2.0, 3.0, 4.0, 5.0, 6.0};
  f.mag_num.assign(12, 2.5);
  f.mag_den.assign(6, 7.0 / 3);
  f.flags = {0, 1, 2, 3, 0, 0, 0, 0, 1, 1, 0, 2};
  // A final state: hla2 masked with a ridge, S 2x2, C and F 2x3 (with m, f) for 2 sequences x 2 heads.
  for (int i = 0; i < 64; ++i) f.final_state.push_back(0.5 * (i - 30)), f.mag_final_state.push_back(16.0 + i);
  f.suite = "unit";
  f.case_name = "tiny";
  f.seed = 18446744073709551615ULL;
  f.generator_version = "test 0";
  f.reference_bits = 113;
  f.exact_tier = true;
  return f;
}

}  // namespace hla::test
