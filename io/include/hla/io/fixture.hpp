// Fixture files: one safetensors file holding a BatchProblem, the
// reference result and what a checker needs to score a candidate against it.
//
// Tensors: q [B,H,n,d], k [B,Hkv,n,d], v [B,Hkv,n,dv] in the problem's dtype;
// offsets [m+1] I64 when the batch is packed; ref_out, mag_num [B,H,n,dv] and
// ref_den, mag_den [B,H,n] F64; flags [B,H,n,dv] and den_flags [B,H,n] U8 when
// present. Format version 2 adds, when they differ from
// what version 1 implies: ref_num [B,H,n,dv] F64 (num of a normalized
// problem, for residual scoring) and mag_num_unmasked [B,H,n,dv],
// mag_den_unmasked [B,H,n] F64 (the magnitudes a state-difference algorithm is
// judged against, for masked hla2 and hla3). Version 3 adds the metadata key
// digest = "sha256:<hex>" over everything else (fixture_digest), checked on
// every read. Versions 1 and 2 still read, with a warning.
// Gradients (SPEC §9; optional in version 3, all or none): the upstream `do`
// [B,H,n,dv] and optionally `dden` [B,H,n] in the problem's dtype, the
// reference gradients ref_dq [B,H,n,d], ref_dk [B,Hkv,n,d], ref_dv
// [B,Hkv,n,dv] and their magnitudes mag_dq, mag_dk, mag_dv (F64), and
// dq_flags, dk_flags, dv_flags (U8) when something is flagged. A fixture
// without them reads as before; a reader that predates them refuses a file
// with them ("unknown tensor 'do'"), so no version bump was needed.
// A version 3 file may also hold the problem's initial state,
// initial_state.<part> tensors (io/state.hpp), in the problem's state dtype;
// a reader that predates them likewise refuses such a file. Gradients from an
// initial state add the state's gradient ref_dstate.<part>, its magnitude
// mag_dstate.<part> (F64) and dstate_flags.<part> (U8) when something is
// flagged, shaped as the initial_state.<part> tensors. A variant with a state
// may carry its final state (SPEC §8; all or none): state.<part>,
// mag_state.<part> (F64), state_flags.<part> (U8) when something is flagged,
// shaped as the initial state's parts (engine/reference.hpp StateReference;
// its state-difference magnitude is derived from mag_state when read).
// __metadata__ (all strings, no control bytes): format = "hla-oracle-fixture",
// format_version, variant, masked, normalize, eps_mode, gamma, eps,
// lambda, scale (exact rationals), batch, heads, kv_heads, n, d, dv, dtype,
// seed, generator_version, reference_bits, exact_tier, suite, case.
// The reader accepts exactly these names: anything else (a missing or unknown
// key or tensor) is an error, so that a changed format needs a new version.
#pragma once

#include "hla/batch.hpp"
#include "hla/io/safetensors.hpp"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hla::io {

inline constexpr const char* kFixtureFormat = "hla-oracle-fixture";
inline constexpr const char* kFixtureFormatVersion = "3";

// Bits of Fixture::flags.
inline constexpr std::uint8_t kFlagNotCertified = 1;     // reference not certified to f64 (cancellation)
inline constexpr std::uint8_t kFlagIllConditioned = 2;   // normalized element ill-conditioned (SPEC §7)

struct Fixture {
  // Options, dims, dtype and the inputs, exactly as the candidate kernel sees them.
  // Non-finite inputs are allowed (the causality fixtures of SPEC §7 carry NaN/Inf).
  BatchProblem problem;
  // Reference output per query head and token: num, or the normalized output
  // when problem.opt.normalize; float64 rounded from the reference evaluation.
  std::vector<double> ref_out;  // [B,H,n,dv]
  std::vector<double> ref_den;  // [B,H,n] the denominator (SPEC §1)
  // SPEC §7 magnitudes (sums of absolute values) of num and den: the scale
  // against which errors of a candidate are judged, per element.
  std::vector<double> mag_num;  // [B,H,n,dv]
  std::vector<double> mag_den;  // [B,H,n]
  // Version 2 (empty in version 1 files, and where they add nothing): num of a
  // normalized problem; the unmasked-order magnitudes of a masked hla2/hla3.
  std::vector<double> ref_num;           // [B,H,n,dv] or empty
  std::vector<double> mag_num_unmasked;  // [B,H,n,dv] or empty
  std::vector<double> mag_den_unmasked;  // [B,H,n] or empty
  std::string format_version = kFixtureFormatVersion;  // of the file it was read from
  std::vector<std::string> warnings;  // from the reader (e.g. an old format without a digest), for the user
  // Per element kFlag* bits; empty when the generator flagged nothing.
  std::vector<std::uint8_t> flags;      // [B,H,n,dv] or empty
  std::vector<std::uint8_t> den_flags;  // [B,H,n] or empty: the same bits for ref_den
  // The final state (SPEC §8), or empty: laid out as problem.state (for every
  // sequence and query head), its magnitude and flags (or empty).
  std::vector<double> final_state, mag_final_state;
  std::vector<std::uint8_t> final_state_flags;
  // Gradients (SPEC §9), when `gradients`: L = Σ ⟨do, o⟩ + Σ dden·den, the
  // exact ∂L/∂q, ∂L/∂k, ∂L/∂v rounded to f64 (k and v are shared by the query
  // heads of a group: their gradients are summed over it; packed sequences are
  // independent problems), the magnitudes of their defining sums, flags.
  bool gradients = false;
  std::vector<double> dout;                   // [B,H,n,dv] upstream ∂L/∂o, in the problem's dtype (tensor `do`)
  std::vector<double> dden;                   // [B,H,n] upstream ∂L/∂den, or empty (zero: den is not an output)
  std::vector<double> ref_dq, mag_dq;         // [B,H,n,d]
  std::vector<double> ref_dk, mag_dk;         // [B,Hkv,n,d]
  std::vector<double> ref_dv, mag_dv;         // [B,Hkv,n,dv]
  std::vector<std::uint8_t> dq_flags, dk_flags, dv_flags;  // kFlag* bits, or empty when nothing is flagged
  // From an initial state (gradients and problem.has_state(); else empty): ∂L/∂X0
  // laid out as problem.state, its magnitude, and flags (or empty).
  std::vector<double> ref_dstate, mag_dstate;
  std::vector<std::uint8_t> dstate_flags;
  std::string suite;      // which set the case belongs to
  std::string case_name;  // metadata key "case"
  std::uint64_t seed = 0; // generator seed that reproduces the inputs
  std::string generator_version;
  // Significand bits of the evaluation the reference was rounded from; 0 = exact rational.
  int reference_bits = 113;
  // Inputs chosen so that float32 sums are exact (TOOLCHAIN "exact tier"): a
  // candidate must then match bit for bit.
  bool exact_tier = false;
};

// Shapes of the fixture's tensors, from the problem's dims.
std::vector<std::int64_t> out_shape(const BatchProblem& p);  // [B,H,n,dv]
std::vector<std::int64_t> den_shape(const BatchProblem& p);  // [B,H,n]
std::vector<std::int64_t> q_shape(const BatchProblem& p);    // [B,H,n,d]
std::vector<std::int64_t> k_shape(const BatchProblem& p);    // [B,Hkv,n,d]
std::vector<std::int64_t> v_shape(const BatchProblem& p);    // [B,Hkv,n,dv]

// Throws InputError naming the problem: problem.validate(allow non-finite),
// array sizes against the dims, unknown flag bits, state without a shape or
// a final state of the wrong size.
void validate_fixture(const Fixture& f);

// The digest a format-3 fixture carries in its metadata: "sha256:" + hex of
// SHA-256 over "hla-oracle-fixture-digest-1\n", then per metadata key in
// byte order except "digest": "m <len>:<key> <len>:<value>\n", then per
// tensor in name order: "t <len>:<name> <DTYPE> [<d0>,<d1>,…] <len>:<bytes>\n"
// (lengths in bytes, decimal). It detects a changed file, not a forged one:
// check::verify_fixture proves the reference belongs to the inputs.
std::string fixture_digest(const SafetensorsFile& file);

SafetensorsFile fixture_to_safetensors(const Fixture& f);  // validates first; adds the digest
// Checks metadata (every key present, well formed, no unknown key), tensor
// names, dtypes and shapes against the metadata, then validate_fixture.
// `source` names the file in messages.
Fixture fixture_from_safetensors(const SafetensorsFile& file, const std::string& source);

Fixture read_fixture(const std::filesystem::path& path);
void write_fixture(const std::filesystem::path& path, const Fixture& f);  // atomic

}  // namespace hla::io
