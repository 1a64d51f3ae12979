#include "hla/io/candidate.hpp"

#include "hla/io/state.hpp"

#include <algorithm>

namespace hla::io {
namespace {

constexpr std::string_view kDstatePrefix = "dstate.";

std::string expected_names(const Fixture& fx) {
  std::string s = fx.gradients ? "out, den, dq, dk, dv" : "out, den";
  if (fx.gradients && fx.problem.has_state()) s += ", dstate.<part>";
  if (!fx.final_state.empty()) s += ", state.<part>";
  return s;
}

// The given parts of `values` (laid out as p's state) as tensors "<prefix><part>" in dtype.
void put_parts(SafetensorsFile& st, const BatchProblem& p, const std::vector<double>& values, const std::vector<std::string>& parts,
               std::string_view prefix, DType dtype, size_t want, const char* what, const char* whose) {
  if (parts.empty()) return;
  if (values.size() != want)
    throw InputError(std::string("candidate ") + what + " holds " + std::to_string(values.size()) + " values, expected " +
                     std::to_string(want) + whose);
  for (auto& [name, t] : state_part_tensors(p, values, prefix, dtype))
    if (std::find(parts.begin(), parts.end(), name.substr(prefix.size())) != parts.end()) st.tensors.emplace(name, std::move(t));
}

}  // namespace

Candidate candidate_from_safetensors(const SafetensorsFile& file, const Fixture& fx, const std::string& source) {
  auto fail = [&](const std::string& what) { return InputError(source + ": " + what); };
  auto read = [&](const std::string& name, const Tensor& t, const std::vector<std::int64_t>& shape, DType& dtype) {
    const auto ft = float_dtype(t.dtype);
    if (!ft) throw fail("tensor '" + name + "' has dtype " + to_string(t.dtype) + "; expected F64, F32, BF16 or F16");
    if (t.shape != shape)
      throw fail("tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " + shape_string(shape));
    dtype = *ft;
    return float_values(t, name);
  };
  Candidate c;
  const auto out = file.tensors.find("out");
  if (out == file.tensors.end())
    throw fail("tensor 'out' is missing (a candidate file holds out " + shape_string(out_shape(fx.problem)) +
               ", optionally den and state.<part>)");
  c.out = read("out", out->second, out_shape(fx.problem), c.out_dtype);
  for (const auto& [name, t] : file.tensors) {
    if (name == "out") continue;
    if (name == "den") {
      c.den = read(name, t, den_shape(fx.problem), c.den_dtype);
      continue;
    }
    if (name == "dq" || name == "dk" || name == "dv") {
      if (!fx.gradients)
        throw fail("tensor '" + name + "' is a gradient, but the fixture carries no gradients (no upstream 'do' to differentiate "
                   "against): use a fixture written with gradients (hla gen --case ...,grad=true, or the golden *-grad fixtures), "
                   "or leave dq, dk, dv out of the candidate");
      const BatchProblem& p = fx.problem;
      if (name == "dq") c.dq = read(name, t, q_shape(p), c.dq_dtype);
      else if (name == "dk") c.dk = read(name, t, k_shape(p), c.dk_dtype);
      else c.dv = read(name, t, v_shape(p), c.dv_dtype);
      continue;
    }
    if (has_prefix(name, kDstatePrefix)) {
      if (!fx.gradients || !fx.problem.has_state())
        throw fail("tensor '" + name + "' is the gradient of an initial state, but the fixture carries " +
                   (fx.gradients ? "no initial state" : "no gradients") + ": leave dstate.<part> out of the candidate");
      continue;  // all parts at once, below
    }
    if (has_prefix(name, kStatePrefix)) {
      if (fx.final_state.empty())
        throw fail("tensor '" + name + "' is a final state, but the fixture carries no final state to judge it against" +
                   (has_state(fx.problem.opt.variant) ? " (regenerate it with this hla)"
                                                      : " (" + to_string(fx.problem.opt.variant) + " has no streaming state)"));
      continue;  // all parts at once, below
    }
    throw fail("unknown tensor '" + name + "' (expected " + expected_names(fx) + ")");
  }
  try {
    // A final state given in part: every required part (read_state_parts names the missing one).
    StateParts st = read_state_parts(file.tensors, fx.problem, kStatePrefix, source, true);
    c.final_state = std::move(st.values), c.final_state_parts = std::move(st.given), c.final_state_dtype = st.dtype;
  } catch (const InputError& e) {
    throw fail(e.what());
  }
  if (fx.gradients && fx.problem.has_state()) {
    try {
      StateParts d = read_state_parts(file.tensors, fx.problem, kDstatePrefix, source, false);
      c.dstate = std::move(d.values), c.dstate_parts = std::move(d.given), c.dstate_dtype = d.dtype;
    } catch (const InputError& e) {
      throw fail(e.what());
    }
  }
  return c;
}

Candidate read_candidate(const std::filesystem::path& path, const Fixture& fixture) {
  return candidate_from_safetensors(read_safetensors(path), fixture, path.string());
}

SafetensorsFile candidate_to_safetensors(const Candidate& c, const Fixture& fx) {
  SafetensorsFile st;
  st.tensors["out"] = float_tensor(c.out_dtype, out_shape(fx.problem), c.out, "candidate out");
  if (c.den) st.tensors["den"] = float_tensor(c.den_dtype, den_shape(fx.problem), *c.den, "candidate den");
  const BatchProblem& p = fx.problem;
  if (c.dq) st.tensors["dq"] = float_tensor(c.dq_dtype, q_shape(p), *c.dq, "candidate dq");
  if (c.dk) st.tensors["dk"] = float_tensor(c.dk_dtype, k_shape(p), *c.dk, "candidate dk");
  if (c.dv) st.tensors["dv"] = float_tensor(c.dv_dtype, v_shape(p), *c.dv, "candidate dv");
  put_parts(st, fx.problem, c.dstate, c.dstate_parts, kDstatePrefix, c.dstate_dtype, fx.problem.state.size(), "dstate",
            " (the initial state's)");
  put_parts(st, fx.problem, c.final_state, c.final_state_parts, kStatePrefix, c.final_state_dtype, fx.final_state.size(), "final state",
            "");
  return st;
}

void write_candidate(const std::filesystem::path& path, const Candidate& c, const Fixture& fixture) {
  write_safetensors(path, candidate_to_safetensors(c, fixture));
}

}  // namespace hla::io
