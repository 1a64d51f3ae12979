// A problem from a user's own tensors and option text: what `hla ref`, `hla
// gen --case` and the Python package (hla_oracle.reference / check) take.
// Tensors are safetensors-shaped (io::Tensor: dtype, shape, little-endian
// bytes), so every float dtype (F64, F32, BF16, F16) is read exactly, and the
// layout is [B,H,T,D] or FLA's [B,T,H,D].
#pragma once

#include "hla/batch.hpp"
#include "hla/io/safetensors.hpp"
#include "hla/options.hpp"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hla::io {

// The operator options as text, one per row of kOptions (hla/options.hpp):
// exact rationals or decimals ("99/100", "0.99"); options() parses and
// validates them (InputError names the option).
struct OptionText {
  std::array<std::string, kOptions.size()> text;  // each row's default until set

  OptionText();
  // Sets the option named `key` (a row's name; its alias, or `unmasked`, with
  // a warning on stderr); false when the key names no option.
  bool set(const std::string& key, const std::string& value);
  std::string& operator[](Option o) { return text[static_cast<size_t>(o)]; }
  Options options() const;
};

enum class Layout { bhtd, bthd };  // [B,H,T,D], or FLA's [B,T,H,D]
Layout parse_layout(std::string_view s);  // "bhtd" | "bthd"; InputError otherwise

// The problem of tensors q, k, v (one float dtype; 4 dimensions in `layout`;
// k and v with Hkv heads, H a multiple of Hkv) and optionally offsets or
// cu_seqlens (I64 or I32, [m+1], B = 1): packed sequences, and optionally an
// initial state (initial_state.<part> tensors, io/state.hpp). The upstream
// gradients do, dden may be there too (left to upstream_from_tensors). Any other
// tensor is an InputError naming it and `source`. Validated, non-finite values allowed.
BatchProblem problem_from_tensors(const std::map<std::string, Tensor>& tensors, const Options& opt, Layout layout,
                                  const std::string& source);

// The upstream gradients (SPEC §9) of a problem's loss L = Σ ⟨do, o⟩ + Σ dden·den,
// in [B,H,n,dv] and [B,H,n] order (dden empty: zero).
struct Upstream {
  std::vector<double> dout, dden;
};
// The upstream among `tensors` (the file `source` of p's inputs): do shaped as
// the output ([B,H,T,dv], or [B,T,H,dv] in bthd) and optionally dden ([B,H,T] /
// [B,T,H]); nullopt without either. do and dden may have any float dtype, but
// every value must be one of p.dtype (the inputs'): the reference differentiates
// for upstream in the inputs' dtype and the fixture stores it so. InputError,
// naming the tensor, for dden without do, a variant without a backward,
// non-finite inputs, a wrong shape (with a hint when it is the other layout's)
// or dtype, and a non-finite or unrepresentable upstream value (NaN upstream is
// the fuzzer's causality probe, which has no reference gradient to store).
std::optional<Upstream> upstream_from_tensors(const std::map<std::string, Tensor>& tensors, const BatchProblem& p, Layout layout,
                                              const std::string& source);

// A candidate's output `name` in `layout` as the [B,H,n,dv] values check()
// takes (den: [B,H,n], or [B,n,H] in bthd), read exactly; InputError when its
// shape does not match p or its dtype is not a float.
std::vector<double> output_values(const Tensor& t, const std::string& name, const BatchProblem& p, Layout layout, bool den);
// The same for any per-head tensor: [B,heads,n,width] values (width 0: [B,heads,n])
// of t in `layout` (the gradients dq, dk, dv and the upstream do, dden); `dims`
// names the width in the message ("d", "dv"); H stands for `heads` there.
std::vector<double> head_values(const Tensor& t, const std::string& name, const BatchProblem& p, Layout layout, Index heads,
                                Index width, const std::string& dims);

// The packed-sequence offsets of an I64 or I32 tensor [m+1] (not yet validated).
std::vector<int64_t> offsets_of(const Tensor& t, const std::string& name);

}  // namespace hla::io
