// States in files (SPEC §8, hla/state.hpp): one tensor per state part named
// "<prefix><part>" — the value columns [N, H, rows, cols] (S, C, F, P, E, SQ)
// and the denominator's column [N, H, rows] (m, f, z, e) — for N sequences
// (batch entries, or packed sequences) and H query heads. The initial state
// (prefix "initial_state.") in any float dtype (one for all); a state's
// gradient (SPEC §9) likewise: ref_dstate., mag_dstate. (F64) and
// dstate_flags. (U8) in fixtures, dstate. in candidate files. The same in
// every layout: a state has no token axis.
#pragma once

#include "hla/batch.hpp"
#include "hla/io/safetensors.hpp"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hla::io {

inline constexpr std::string_view kInitialStatePrefix = "initial_state.";
// Fixture-defined state tensors that a candidate file echoes ("state.<name>").
inline constexpr std::string_view kStatePrefix = "state.";
inline bool is_initial_state_tensor(std::string_view name) { return name.substr(0, kInitialStatePrefix.size()) == kInitialStatePrefix; }
inline bool has_prefix(std::string_view name, std::string_view prefix) { return name.substr(0, prefix.size()) == prefix; }

// Values laid out as BatchProblem::state ([sequences][heads][state_size]), as
// read from the tensors of some parts.
struct StateParts {
  std::vector<double> values;      // zero where no part gave them
  DType dtype = DType::f64;        // the tensors' dtype (float parts)
  std::vector<std::string> given;  // the parts given, in layout order; empty: none
};
enum class PartKind { float_values, flags };

// Reads the tensors "<prefix><part>" of `tensors` for p's state layout (p's
// options and dims set). InputError naming `source` and the tensor for an
// unknown part, one this problem's state does not have (e.g. F of unmasked
// hla2), a wrong shape, a wrong dtype (float: F64, F32, BF16 or F16, one for
// all; flags: U8), and, with `required`, a missing required part (optional
// parts, state.hpp, may be left out: zero).
StateParts read_state_parts(const std::map<std::string, Tensor>& tensors, const BatchProblem& p, std::string_view prefix,
                            const std::string& source, bool required, PartKind kind = PartKind::float_values);

// `values` (laid out as p.state) as the tensors "<prefix><part>" of every part
// p's state has (unused parts left out), in dtype (flags: U8; values must fit).
std::map<std::string, Tensor> state_part_tensors(const BatchProblem& p, const std::vector<double>& values, std::string_view prefix,
                                                 DType dtype, PartKind kind = PartKind::float_values);

// Reads the initial_state.* tensors of `tensors` into p.state and p.state_dtype;
// none: p.state stays empty. Errors as read_state_parts (every required part).
void read_state(const std::map<std::string, Tensor>& tensors, BatchProblem& p, const std::string& source);

// p's state as initial_state.* tensors in p.state_dtype (none when it has no state).
std::map<std::string, Tensor> state_tensors(const BatchProblem& p);

}  // namespace hla::io
