#include "hla/io/candidate.hpp"

#include "hla/io/state.hpp"

#include <algorithm>

namespace hla::io {
namespace {

constexpr std::string_view kDstatePrefix = "dstate.";

std::string expected_names(const Fixture& fx) {
  std::string s = fx.gradients ? "out, den, dq, dk, dv" : "out, den";
  if (fx.gradients && fx.problem.has_state()) s += ", dstate.<part>";
  for (const auto& [name, shape] : fx.state_shapes) s += ", state." + name;
  return s;
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
               ", optionally den and state.<name>)");
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
      const std::string s = name.substr(kStatePrefix.size());
      const auto it = fx.state_shapes.find(s);
      if (it == fx.state_shapes.end())
        throw fail("unknown tensor '" + name + "': the fixture has no state '" + s + "' (expected " +
                   expected_names(fx) + ")");
      c.state[s] = read(name, t, it->second, c.state_dtypes[s]);
      continue;
    }
    throw fail("unknown tensor '" + name + "' (expected " + expected_names(fx) + ")");
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
  if (!c.dstate_parts.empty()) {
    if (c.dstate.size() != fx.problem.state.size())
      throw InputError("candidate dstate holds " + std::to_string(c.dstate.size()) + " values, expected " +
                       std::to_string(fx.problem.state.size()) + " (the initial state's)");
    for (auto& [name, t] : state_part_tensors(fx.problem, c.dstate, kDstatePrefix, c.dstate_dtype))
      if (std::find(c.dstate_parts.begin(), c.dstate_parts.end(), name.substr(kDstatePrefix.size())) != c.dstate_parts.end())
        st.tensors.emplace(name, std::move(t));
  }
  for (const auto& [name, values] : c.state) {
    const auto it = fx.state_shapes.find(name);
    if (it == fx.state_shapes.end()) throw InputError("candidate state '" + name + "' is not a state of the fixture");
    const auto dt = c.state_dtypes.find(name);
    st.tensors[std::string(kStatePrefix) + name] =
        float_tensor(dt == c.state_dtypes.end() ? DType::f64 : dt->second, it->second, values, "candidate state." + name);
  }
  return st;
}

void write_candidate(const std::filesystem::path& path, const Candidate& c, const Fixture& fixture) {
  write_safetensors(path, candidate_to_safetensors(c, fixture));
}

}  // namespace hla::io
