// Candidate files: what a user's kernel writes for a fixture. A safetensors
// file with `out` [B,H,n,dv] in any float dtype, optionally `den` [B,H,n], the
// final state `state.<part>` (io/state.hpp; every required part, one dtype;
// only where the fixture has one), and the
// gradients `dq` [B,H,n,d], `dk` [B,Hkv,n,d], `dv` [B,Hkv,n,dv] (any subset;
// only for a fixture that carries gradients, SPEC §9), and from an initial
// state the state's gradient `dstate.<part>`, shaped as the fixture's
// initial_state.<part> (io/state.hpp; any subset of the parts). Values
// are read exactly into doubles; NaN and ±Inf are kept (scoring them is the
// checker's job). Metadata, if any, is ignored.
#pragma once

#include "hla/io/fixture.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hla::io {

struct Candidate {
  std::vector<double> out;                 // [B,H,n,dv]
  DType out_dtype = DType::f32;            // dtype the kernel stored `out` in
  std::optional<std::vector<double>> den;  // [B,H,n], when the kernel wrote it
  DType den_dtype = DType::f32;
  // The final state laid out as the fixture's (zero where no part was given),
  // the parts given (empty: none) and their dtype.
  std::vector<double> final_state;
  std::vector<std::string> final_state_parts;
  DType final_state_dtype = DType::f32;
  // Gradients of the fixture's loss, when the kernel wrote them.
  std::optional<std::vector<double>> dq, dk, dv;
  DType dq_dtype = DType::f32, dk_dtype = DType::f32, dv_dtype = DType::f32;
  // ∂L/∂(initial state) laid out as the problem's state (zero where no part
  // was given), the parts given (empty: none) and their dtype (one for all).
  std::vector<double> dstate;
  std::vector<std::string> dstate_parts;
  DType dstate_dtype = DType::f32;
};

// Checks names, dtypes (float only) and shapes against the fixture: a missing
// `out`, a wrong shape (expected vs got) or a tensor the fixture does not
// know is an InputError naming `source`.
Candidate candidate_from_safetensors(const SafetensorsFile& file, const Fixture& fixture, const std::string& source);
Candidate read_candidate(const std::filesystem::path& path, const Fixture& fixture);

// Stores out/den/gradients/final state in their dtypes (values must be representable). Throws
// InputError on sizes that do not match the fixture.
SafetensorsFile candidate_to_safetensors(const Candidate& c, const Fixture& fixture);
void write_candidate(const std::filesystem::path& path, const Candidate& c, const Fixture& fixture);  // atomic

}  // namespace hla::io
