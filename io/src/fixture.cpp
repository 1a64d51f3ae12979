#include "hla/io/fixture.hpp"

#include "hla/io/printable.hpp"
#include "hla/io/sha256.hpp"
#include "hla/io/state.hpp"
#include "hla/options.hpp"

#include <algorithm>

#include <future>
#include <set>

namespace hla::io {
namespace {

// The options' keys (kOptions: "normalize, eps_mode" is two), then the rest.
const std::vector<std::string>& metadata_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k{"format", "format_version"};
    for (const OptionInfo& r : kOptions)
      for (size_t at = 0; at <= r.key.size();) {
        const size_t end = std::min(r.key.find(", ", at), r.key.size());
        k.emplace_back(r.key.substr(at, end - at));
        at = end + 2;
      }
    for (const char* key : {"batch", "heads", "kv_heads", "n", "d", "dv", "dtype", "seed", "generator_version", "reference_bits",
                            "exact_tier", "suite", "case"})
      k.emplace_back(key);
    return k;
  }();
  return keys;
}
constexpr const char* kDigestKey = "digest";  // format version 3 on

// Metadata reader: every accessor names the key and the text it could not use.
struct Meta {
  const std::map<std::string, std::string>& m;
  std::string source;

  InputError bad(const std::string& key, const std::string& want) const {
    return InputError(source + ": metadata " + key + " = '" + printable(m.at(key), 60) + "' is not " + want);
  }
  const std::string& str(const std::string& key) const { return m.at(key); }
  bool boolean(const std::string& key) const {
    if (str(key) == "true") return true;
    if (str(key) == "false") return false;
    throw bad(key, "true or false");
  }
  // Canonical decimal only (what std::to_string writes), so that nothing is read loosely.
  std::uint64_t unsigned_int(const std::string& key) const {
    const std::string& s = str(key);
    if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos || (s.size() > 1 && s[0] == '0'))
      throw bad(key, "a non-negative decimal integer");
    try {
      return std::stoull(s);
    } catch (const std::exception&) {
      throw bad(key, "a 64-bit integer");
    }
  }
  Index dim(const std::string& key) const {
    const std::uint64_t x = unsigned_int(key);
    if (x > (std::uint64_t{1} << 40)) throw bad(key, "a dimension below 2^40");
    return static_cast<Index>(x);
  }
  Rational rational(const std::string& key) const {
    try {
      return parse_rational(str(key));
    } catch (const InputError& e) {
      throw InputError(source + ": metadata " + key + ": " + e.what());
    }
  }
};

}  // namespace

std::vector<std::int64_t> out_shape(const BatchProblem& p) { return {p.batch, p.heads, p.n, p.dv}; }
std::vector<std::int64_t> den_shape(const BatchProblem& p) { return {p.batch, p.heads, p.n}; }
std::vector<std::int64_t> q_shape(const BatchProblem& p) { return {p.batch, p.heads, p.n, p.d}; }
std::vector<std::int64_t> k_shape(const BatchProblem& p) { return {p.batch, p.kv_heads, p.n, p.d}; }
std::vector<std::int64_t> v_shape(const BatchProblem& p) { return {p.batch, p.kv_heads, p.n, p.dv}; }

namespace {
// The gradient tensors of a fixture: name, values, shape (flags apart).
struct GradTensor {
  const char* name;
  std::vector<double> Fixture::*values;
  std::vector<std::int64_t> (*shape)(const BatchProblem&);
};
constexpr GradTensor kGradTensors[] = {
    {"ref_dq", &Fixture::ref_dq, q_shape}, {"ref_dk", &Fixture::ref_dk, k_shape}, {"ref_dv", &Fixture::ref_dv, v_shape},
    {"mag_dq", &Fixture::mag_dq, q_shape}, {"mag_dk", &Fixture::mag_dk, k_shape}, {"mag_dv", &Fixture::mag_dv, v_shape}};
struct GradFlags {
  const char* name;
  std::vector<std::uint8_t> Fixture::*flags;
  std::vector<std::int64_t> (*shape)(const BatchProblem&);
};
constexpr GradFlags kGradFlags[] = {
    {"dq_flags", &Fixture::dq_flags, q_shape}, {"dk_flags", &Fixture::dk_flags, k_shape}, {"dv_flags", &Fixture::dv_flags, v_shape}};
// The state's gradient: tensors <prefix><part> (io/state.hpp).
constexpr std::string_view kRefDstate = "ref_dstate.", kMagDstate = "mag_dstate.", kDstateFlags = "dstate_flags.";
constexpr std::string_view kMagState = "mag_state.", kStateFlags = "state_flags.";
bool is_final_state_tensor(std::string_view name) {
  return has_prefix(name, kStatePrefix) || has_prefix(name, kMagState) || has_prefix(name, kStateFlags);
}
bool is_dstate_tensor(std::string_view name) {
  return has_prefix(name, kRefDstate) || has_prefix(name, kMagDstate) || has_prefix(name, kDstateFlags);
}
}  // namespace

void validate_fixture(const Fixture& f) {
  const BatchProblem& p = f.problem;
  p.validate(/*allow_nonfinite=*/true);
  auto size = [](const char* name, std::size_t got, const std::vector<std::int64_t>& shape) {
    const std::uint64_t want = shape_elements(shape).value_or(0);
    if (got != want)
      throw InputError(std::string(name) + " holds " + std::to_string(got) + " values, expected " +
                       std::to_string(want) + " for shape " + shape_string(shape));
  };
  size("ref_out", f.ref_out.size(), out_shape(p));
  size("ref_den", f.ref_den.size(), den_shape(p));
  size("mag_num", f.mag_num.size(), out_shape(p));
  size("mag_den", f.mag_den.size(), den_shape(p));
  if (!f.ref_num.empty()) size("ref_num", f.ref_num.size(), out_shape(p));
  if (!f.mag_num_unmasked.empty() || !f.mag_den_unmasked.empty()) {
    size("mag_num_unmasked", f.mag_num_unmasked.size(), out_shape(p));
    size("mag_den_unmasked", f.mag_den_unmasked.size(), den_shape(p));
  }
  auto check_flags = [&](const char* name, const std::vector<std::uint8_t>& flags, const std::vector<std::int64_t>& shape) {
    if (flags.empty()) return;
    size(name, flags.size(), shape);
    for (std::size_t i = 0; i < flags.size(); ++i)
      if (flags[i] & ~(kFlagNotCertified | kFlagIllConditioned))
        throw InputError(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(flags[i]) +
                         " has bits other than 1 (not certified) and 2 (ill-conditioned)");
  };
  check_flags("flags", f.flags, out_shape(p));
  check_flags("den_flags", f.den_flags, den_shape(p));
  if (f.gradients) {
    size("do", f.dout.size(), out_shape(p));
    if (!f.dden.empty()) size("dden", f.dden.size(), den_shape(p));
    for (const GradTensor& g : kGradTensors) size(g.name, (f.*g.values).size(), g.shape(p));
    for (const GradFlags& g : kGradFlags) check_flags(g.name, f.*g.flags, g.shape(p));
  } else if (!f.dout.empty() || !f.dden.empty() || !f.ref_dq.empty() || !f.ref_dk.empty() || !f.ref_dv.empty()) {
    throw InputError("gradient tensors without gradients = true");
  }
  const std::vector<std::int64_t> state_shape{static_cast<std::int64_t>(p.state.size())};
  if (f.gradients && p.has_state()) {
    size("ref_dstate", f.ref_dstate.size(), state_shape);
    size("mag_dstate", f.mag_dstate.size(), state_shape);
    check_flags("dstate_flags", f.dstate_flags, state_shape);
  } else if (!f.ref_dstate.empty() || !f.mag_dstate.empty() || !f.dstate_flags.empty()) {
    throw InputError("a state's gradient (ref_dstate) without gradients from an initial state");
  }
  if (!f.final_state.empty() || !f.mag_final_state.empty() || !f.final_state_flags.empty()) {
    if (!has_state(p.opt.variant))
      throw InputError("a final state (state.<part>), but " + to_string(p.opt.variant) + " has no streaming state");
    const std::vector<std::int64_t> final_shape{p.sequence_count() * p.heads * state_size(state_layout(p.opt, p.d, p.dv))};
    size("state", f.final_state.size(), final_shape);
    size("mag_state", f.mag_final_state.size(), final_shape);
    check_flags("state_flags", f.final_state_flags, final_shape);
  }
  if (f.reference_bits < 0) throw InputError("reference_bits = " + std::to_string(f.reference_bits) + " must be >= 0");
}

std::string fixture_digest(const SafetensorsFile& file) {
  Sha256 h;
  h.update("hla-oracle-fixture-digest-1\n");
  auto field = [&](std::string_view x) {
    h.update(std::to_string(x.size()) + ":");
    h.update(x);
  };
  for (const auto& [key, value] : file.metadata) {
    if (key == kDigestKey) continue;
    h.update("m ");
    field(key);
    h.update(" ");
    field(value);
    h.update("\n");
  }
  for (const auto& [name, t] : file.tensors) {
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (i) shape += ',';
      shape += std::to_string(t.shape[i]);
    }
    h.update("t ");
    field(name);
    h.update(" " + to_string(t.dtype) + " [" + shape + "] ");
    field(t.bytes);
    h.update("\n");
  }
  return "sha256:" + to_hex(h.finish());
}

SafetensorsFile fixture_to_safetensors(const Fixture& f) {
  validate_fixture(f);
  const BatchProblem& p = f.problem;
  const Options& o = p.opt;
  SafetensorsFile st;
  st.tensors["q"] = float_tensor(p.dtype, {p.batch, p.heads, p.n, p.d}, p.q, "q");
  st.tensors["k"] = float_tensor(p.dtype, {p.batch, p.kv_heads, p.n, p.d}, p.k, "k");
  st.tensors["v"] = float_tensor(p.dtype, {p.batch, p.kv_heads, p.n, p.dv}, p.v, "v");
  if (!p.offsets.empty()) st.tensors["offsets"] = i64_tensor({static_cast<std::int64_t>(p.offsets.size())}, p.offsets);
  st.tensors.merge(state_tensors(p));  // initial_state.<part>
  st.tensors["ref_out"] = float_tensor(DType::f64, out_shape(p), f.ref_out, "ref_out");
  st.tensors["ref_den"] = float_tensor(DType::f64, den_shape(p), f.ref_den, "ref_den");
  st.tensors["mag_num"] = float_tensor(DType::f64, out_shape(p), f.mag_num, "mag_num");
  st.tensors["mag_den"] = float_tensor(DType::f64, den_shape(p), f.mag_den, "mag_den");
  if (!f.flags.empty()) st.tensors["flags"] = u8_tensor(out_shape(p), f.flags);
  if (!f.den_flags.empty()) st.tensors["den_flags"] = u8_tensor(den_shape(p), f.den_flags);
  if (!f.ref_num.empty()) st.tensors["ref_num"] = float_tensor(DType::f64, out_shape(p), f.ref_num, "ref_num");
  if (!f.mag_num_unmasked.empty()) {
    st.tensors["mag_num_unmasked"] = float_tensor(DType::f64, out_shape(p), f.mag_num_unmasked, "mag_num_unmasked");
    st.tensors["mag_den_unmasked"] = float_tensor(DType::f64, den_shape(p), f.mag_den_unmasked, "mag_den_unmasked");
  }
  if (!f.final_state.empty()) {
    st.tensors.merge(state_part_tensors(p, f.final_state, kStatePrefix, DType::f64));
    st.tensors.merge(state_part_tensors(p, f.mag_final_state, kMagState, DType::f64));
    if (!f.final_state_flags.empty())
      st.tensors.merge(state_part_tensors(p, std::vector<double>(f.final_state_flags.begin(), f.final_state_flags.end()), kStateFlags,
                                          DType::f64, PartKind::flags));
  }
  if (f.gradients) {
    st.tensors["do"] = float_tensor(p.dtype, out_shape(p), f.dout, "do");
    if (!f.dden.empty()) st.tensors["dden"] = float_tensor(p.dtype, den_shape(p), f.dden, "dden");
    for (const GradTensor& g : kGradTensors) st.tensors[g.name] = float_tensor(DType::f64, g.shape(p), f.*g.values, g.name);
    for (const GradFlags& g : kGradFlags)
      if (!(f.*g.flags).empty()) st.tensors[g.name] = u8_tensor(g.shape(p), f.*g.flags);
    if (p.has_state()) {
      st.tensors.merge(state_part_tensors(p, f.ref_dstate, kRefDstate, DType::f64));
      st.tensors.merge(state_part_tensors(p, f.mag_dstate, kMagDstate, DType::f64));
      if (!f.dstate_flags.empty())
        st.tensors.merge(state_part_tensors(p, std::vector<double>(f.dstate_flags.begin(), f.dstate_flags.end()), kDstateFlags,
                                            DType::f64, PartKind::flags));
    }
  }

  auto& m = st.metadata;
  m["format"] = kFixtureFormat;
  m["format_version"] = kFixtureFormatVersion;
  for (const OptionInfo& r : kOptions)
    if (r.write_meta) r.write_meta(o, m);
    else m[std::string(r.key)] = r.text(o);
  m["batch"] = std::to_string(p.batch);
  m["heads"] = std::to_string(p.heads);
  m["kv_heads"] = std::to_string(p.kv_heads);
  m["n"] = std::to_string(p.n);
  m["d"] = std::to_string(p.d);
  m["dv"] = std::to_string(p.dv);
  m["dtype"] = to_string(p.dtype);
  m["seed"] = std::to_string(f.seed);
  m["generator_version"] = f.generator_version;
  m["reference_bits"] = std::to_string(f.reference_bits);
  m["exact_tier"] = bool_text(f.exact_tier);
  m["suite"] = f.suite;
  m["case"] = f.case_name;
  for (const auto& [key, value] : m)
    if (has_control_bytes(value)) throw InputError("metadata " + key + " = '" + printable(value, 60) + "' holds control bytes");
  m[kDigestKey] = fixture_digest(st);
  return st;
}

namespace {

// The metadata's keys, format and version checked (a fixture of this reader's
// format, versions 1 to kFixtureFormatVersion, with no unknown key and no
// control byte); its format_version.
std::string checked_metadata(const std::map<std::string, std::string>& md, const std::string& source) {
  auto fail = [&](const std::string& what) { return InputError(source + ": " + what); };
  for (const auto& key : metadata_keys())
    if (!md.count(key)) throw fail("metadata key '" + key + "' is missing (not an hla-oracle fixture?)");
  if (md.at("format") != kFixtureFormat)
    throw fail("metadata format = '" + printable(md.at("format"), 60) + "', expected '" + kFixtureFormat + "'");
  const std::string version = md.at("format_version");
  if (version != "1" && version != "2" && version != kFixtureFormatVersion)
    throw fail("metadata format_version = '" + printable(version, 20) + "' is not supported (this reader reads 1 to " +
               kFixtureFormatVersion + ")");
  std::set<std::string> known(metadata_keys().begin(), metadata_keys().end());
  if (version != "1" && version != "2") known.insert(kDigestKey);
  for (const auto& [key, value] : md) {
    if (!known.count(key)) throw fail("unknown metadata key '" + printable(key, 60) + "'");
    if (has_control_bytes(value)) throw fail("metadata " + key + " = '" + printable(value, 60) + "' holds control bytes");
  }
  return version;
}

// Reads a fixture's parts from its checked metadata and tensors, in the order
// fixture_from_safetensors calls them; every error names the source, and every
// tensor taken is recorded in `seen` (no_unknown_tensors refuses the others).
struct FixtureReader {
  const SafetensorsFile& file;
  const std::string& source;
  const std::string& version;
  std::set<std::string> seen;

  InputError fail(const std::string& what) const { return InputError(source + ": " + what); }
  bool has(const std::string& name) const { return file.tensors.count(name) > 0; }

  // Checks dtype and, when given, shape; records the name as expected.
  const Tensor& take(const std::string& name, StDType dtype, const std::optional<std::vector<std::int64_t>>& shape) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) throw fail("tensor '" + name + "' is missing");
    seen.insert(name);
    const Tensor& t = it->second;
    if (t.dtype != dtype)
      throw fail("tensor '" + name + "' has dtype " + to_string(t.dtype) + ", expected " + to_string(dtype) +
                 (name == "q" || name == "k" || name == "v" ? " (metadata dtype = " + file.metadata.at("dtype") + ")" : ""));
    if (shape && t.shape != *shape)
      throw fail("tensor '" + name + "' has shape " + shape_string(t.shape) + ", expected " + shape_string(*shape) +
                 " from the metadata dims");
    return t;
  }
  std::vector<double> values(const std::string& name, StDType dtype, const std::vector<std::int64_t>& shape) {
    return float_values(take(name, dtype, shape), source + ": tensor '" + name + "'");
  }

  // The options, dims and provenance from the metadata.
  void metadata(Fixture& f) const {
    const std::map<std::string, std::string>& md = file.metadata;
    const Meta meta{md, source};
    BatchProblem& p = f.problem;
    Options& o = p.opt;
    try {
      p.dtype = parse_dtype(md.at("dtype"));
    } catch (const InputError& e) {
      throw fail(std::string("metadata: ") + e.what());
    }
    for (const OptionInfo& r : kOptions) try {
        if (r.read_meta) r.read_meta(o, md);
        else r.set(o, md.at(std::string(r.key)));
      } catch (const InputError& e) {
        throw fail("metadata " + std::string(r.key) + ": " + e.what());
      }
    p.batch = meta.dim("batch");
    p.heads = meta.dim("heads");
    p.kv_heads = meta.dim("kv_heads");
    p.n = meta.dim("n");
    p.d = meta.dim("d");
    p.dv = meta.dim("dv");
    f.seed = meta.unsigned_int("seed");
    const std::uint64_t bits = meta.unsigned_int("reference_bits");
    if (bits > 1'000'000) throw meta.bad("reference_bits", "a plausible precision in bits");
    f.reference_bits = static_cast<int>(bits);
    f.exact_tier = meta.boolean("exact_tier");
    f.generator_version = md.at("generator_version");
    f.suite = md.at("suite");
    f.case_name = md.at("case");
  }

  // q, k, v in the metadata's dtype, the offsets and the initial state.
  void inputs(BatchProblem& p) {
    const StDType in = st_dtype(p.dtype);
    p.q = values("q", in, {p.batch, p.heads, p.n, p.d});
    p.k = values("k", in, {p.batch, p.kv_heads, p.n, p.d});
    p.v = values("v", in, {p.batch, p.kv_heads, p.n, p.dv});
    if (has("offsets")) {
      const Tensor& t = take("offsets", StDType::I64, std::nullopt);
      if (t.shape.size() != 1) throw fail("tensor 'offsets' has shape " + shape_string(t.shape) + ", expected 1-D");
      p.offsets = i64_values(t, "offsets");
    }
    try {
      read_state(file.tensors, p, source);  // initial_state.<part>: shapes and dtype checked there
    } catch (const InputError& e) {
      throw fail(e.what());
    }
    for (const auto& [name, t] : file.tensors)
      if (is_initial_state_tensor(name)) seen.insert(name);
  }

  // The forward reference: outputs, magnitudes, flags (num and the unmasked magnitudes from version 2 on).
  void reference(Fixture& f) {
    const BatchProblem& p = f.problem;
    f.ref_out = values("ref_out", StDType::F64, out_shape(p));
    f.ref_den = values("ref_den", StDType::F64, den_shape(p));
    f.mag_num = values("mag_num", StDType::F64, out_shape(p));
    f.mag_den = values("mag_den", StDType::F64, den_shape(p));
    if (has("flags")) f.flags = u8_values(take("flags", StDType::U8, out_shape(p)), "flags");
    if (has("den_flags")) f.den_flags = u8_values(take("den_flags", StDType::U8, den_shape(p)), "den_flags");
    if (version == "1") return;
    if (has("ref_num")) f.ref_num = values("ref_num", StDType::F64, out_shape(p));
    if (has("mag_num_unmasked") || has("mag_den_unmasked")) {
      f.mag_num_unmasked = values("mag_num_unmasked", StDType::F64, out_shape(p));
      f.mag_den_unmasked = values("mag_den_unmasked", StDType::F64, den_shape(p));
    }
  }

  // Gradients: all or none (dden and the flags optional).
  void gradients(Fixture& f) {
    const BatchProblem& p = f.problem;
    bool any_grad = has("do") || has("dden");
    for (const GradTensor& g : kGradTensors) any_grad = any_grad || has(g.name);
    for (const GradFlags& g : kGradFlags) any_grad = any_grad || has(g.name);
    if (!any_grad) return;
    if (version == "1" || version == "2") throw fail("gradient tensors in a format_version " + version + " fixture (they came with version 3)");
    f.gradients = true;
    const StDType in = st_dtype(p.dtype);
    f.dout = values("do", in, out_shape(p));
    if (has("dden")) f.dden = values("dden", in, den_shape(p));
    for (const GradTensor& g : kGradTensors) f.*g.values = values(g.name, StDType::F64, g.shape(p));
    for (const GradFlags& g : kGradFlags)
      if (has(g.name)) f.*g.flags = u8_values(take(g.name, StDType::U8, g.shape(p)), g.name);
  }

  // The state's gradient: with gradients from an initial state, ref_dstate and mag_dstate (every part), flags if any.
  void state_gradient(Fixture& f) {
    const BatchProblem& p = f.problem;
    bool any_dstate = false;
    for (const auto& [name, t] : file.tensors)
      if (is_dstate_tensor(name)) any_dstate = true, seen.insert(name);
    if (any_dstate && !(f.gradients && p.has_state()))
      throw fail(std::string("ref_dstate/mag_dstate/dstate_flags tensors, but the fixture ") +
                 (f.gradients ? "has no initial state" : "carries no gradients"));
    if (!f.gradients || !p.has_state()) return;
    try {
      StateParts ref = read_state_parts(file.tensors, p, kRefDstate, source, true);
      StateParts mag = read_state_parts(file.tensors, p, kMagDstate, source, true);
      const StateParts flags = read_state_parts(file.tensors, p, kDstateFlags, source, true, PartKind::flags);
      if (ref.given.empty() || mag.given.empty())
        throw InputError("gradients from an initial state without the state's gradient (ref_dstate.<part> and mag_dstate.<part>)");
      for (const StateParts* x : {&ref, &mag})
        if (x->dtype != DType::f64) throw InputError("the ref_dstate/mag_dstate tensors must be F64");
      f.ref_dstate = std::move(ref.values), f.mag_dstate = std::move(mag.values);
      f.dstate_flags.assign(flags.values.begin(), flags.values.end());
    } catch (const InputError& e) {
      throw fail(e.what());
    }
  }

  // The final state: state.<part> and mag_state.<part> (every part), flags if any.
  void final_state(Fixture& f) {
    const BatchProblem& p = f.problem;
    bool any = false;
    for (const auto& [name, t] : file.tensors)
      if (is_final_state_tensor(name)) any = true, seen.insert(name);
    if (!any) return;
    try {
      p.validate(true);  // an option or dims error first (the parts depend on them)
      StateParts ref = read_state_parts(file.tensors, p, kStatePrefix, source, true);
      StateParts mag = read_state_parts(file.tensors, p, kMagState, source, true);
      const StateParts flags = read_state_parts(file.tensors, p, kStateFlags, source, true, PartKind::flags);
      if (ref.given.empty() || mag.given.empty()) throw InputError("a final state needs both state.<part> and mag_state.<part> tensors");
      for (const StateParts* x : {&ref, &mag})
        if (x->dtype != DType::f64) throw InputError("the state/mag_state tensors must be F64");
      f.final_state = std::move(ref.values), f.mag_final_state = std::move(mag.values);
      if (!flags.given.empty()) f.final_state_flags.assign(flags.values.begin(), flags.values.end());
    } catch (const InputError& e) {
      throw fail(e.what());
    }
  }

  void no_unknown_tensors() const {
    for (const auto& [name, t] : file.tensors)
      if (!seen.count(name))
        throw fail("unknown tensor '" + printable(name, 60) +
                   "' (a fixture holds q, k, v, offsets, ref_out, ref_den, mag_num, mag_den, "
                   "flags, den_flags, initial_state.<part>, state.<part>, mag_state.<part>, state_flags.<part>" +
                   std::string(version == "1" ? "" : ", ref_num, mag_num_unmasked, mag_den_unmasked") +
                   std::string(version == "1" || version == "2"
                                   ? ""
                                   : "; gradients: do, dden, ref_dq, ref_dk, ref_dv, mag_dq, mag_dk, mag_dv, "
                                     "dq_flags, dk_flags, dv_flags, ref_dstate.<part>, mag_dstate.<part>, dstate_flags.<part>") +
                   ")");
  }
};

}  // namespace

Fixture fixture_from_safetensors(const SafetensorsFile& file, const std::string& source) {
  auto fail = [&](const std::string& what) { return InputError(source + ": " + what); };
  const auto& md = file.metadata;
  const std::string version = checked_metadata(md, source);
  const bool digested = version != "1" && version != "2";
  std::vector<std::string> warnings;
  // The digest runs beside the decoding on a large file; its verdict comes
  // first either way (a changed file says so, not what the change broke).
  std::future<std::string> digest;
  if (digested) {
    if (!md.count(kDigestKey)) throw fail("metadata key 'digest' is missing (format_version " + version + " fixtures carry one)");
    std::size_t bytes = 0;
    for (const auto& [name, t] : file.tensors) bytes += t.bytes.size();
    digest = std::async(bytes > (std::size_t{1} << 22) ? std::launch::async : std::launch::deferred, [&file] { return fixture_digest(file); });
  } else {
    warnings.push_back(source + ": format_version " + version + " fixture without a digest: file corruption is caught only by "
                       "the semantic checks; regenerate it with this hla for a self-verifying fixture");
  }
  auto check_digest = [&] {
    if (!digested) return;
    const std::string want = digest.get();
    if (md.at(kDigestKey) != want)
      throw fail("digest mismatch: the file's tensors or metadata changed after it was written (metadata digest " +
                 printable(md.at(kDigestKey), 80) + ", content " + want + "); regenerate the fixture");
  };
  auto body = [&]() -> Fixture {
    Fixture f;
    f.format_version = version;
    f.warnings = std::move(warnings);
    FixtureReader read{file, source, version, {}};
    read.metadata(f);
    read.inputs(f.problem);
    read.reference(f);
    read.gradients(f);
    read.state_gradient(f);
    read.final_state(f);
    read.no_unknown_tensors();
    try {
      validate_fixture(f);
    } catch (const InputError& e) {
      throw fail(e.what());
    }
    return f;
  };
  Fixture f;
  try {
    f = body();
  } catch (...) {
    check_digest();
    throw;
  }
  check_digest();
  return f;
}

Fixture read_fixture(const std::filesystem::path& path) {
  return fixture_from_safetensors(read_safetensors(path), path.string());
}

void write_fixture(const std::filesystem::path& path, const Fixture& f) {
  write_safetensors(path, fixture_to_safetensors(f));
}

}  // namespace hla::io
