// Initial states in files (SPEC §8, hla/state.hpp): one tensor per state part
// named "initial_state.<part>" — the value columns [N, H, rows, cols] (S, C, F, P, E,
// SQ) and the denominator's column [N, H, rows] (m, f, z, e) — for N
// sequences (batch entries, or packed sequences) and H query heads, in any
// float dtype (one for all). The same in every layout: a state has no token axis.
#pragma once

#include "hla/batch.hpp"
#include "hla/io/safetensors.hpp"

#include <map>
#include <string>
#include <string_view>

namespace hla::io {

inline constexpr std::string_view kInitialStatePrefix = "initial_state.";
inline bool is_initial_state_tensor(std::string_view name) { return name.substr(0, kInitialStatePrefix.size()) == kInitialStatePrefix; }

// Reads the initial_state.* tensors of `tensors` into p.state and p.state_dtype (p's
// options and dims set); none: p.state stays empty. InputError naming `source`
// and the tensor for an unknown part, one this problem's state does not have
// (e.g. F of unmasked hla2), a missing required part, a wrong shape or dtype.
// Optional parts (state.hpp) may be left out: zero.
void read_state(const std::map<std::string, Tensor>& tensors, BatchProblem& p, const std::string& source);

// p's state as initial_state.* tensors in p.state_dtype (none when it has no state;
// parts unused by the problem are left out).
std::map<std::string, Tensor> state_tensors(const BatchProblem& p);

}  // namespace hla::io
