// hla_oracle._core: the Python package's bindings to the C++ core. Thin: every
// computation is the library's (io::problem_from_tensors, engine::compute_reference,
// check::check, io fixtures and candidates, the fuzzer's campaign); this file
// only converts arguments and results. The Python side (hla_oracle/__init__.py)
// turns numpy arrays, torch tensors and anything with __array__ / DLPack into
// tensors (dtype name, shape, little-endian bytes) — the form safetensors
// files hold — so that every float dtype, bf16 included, is read exactly as
// `hla ref` and `hla check` read it.
#include "core.hpp"

#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/fixture.hpp"
#include "hla/io/inputs.hpp"
#include "hla/io/state.hpp"
#include "hla/options.hpp"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>

namespace hla::python {

io::Tensor tensor_of(const TensorArg& t, const std::string& name) {
  const auto& [dtype, shape, bytes] = t;
  const auto st = io::parse_st_dtype(dtype);
  if (!st) throw InputError(name + " has dtype '" + dtype + "', which is not a safetensors dtype");
  io::Tensor x;
  x.dtype = *st;
  x.shape = shape;
  for (int64_t s : shape)
    if (s < 0) throw InputError(name + " has a negative dimension " + io::shape_string(shape));
  x.bytes.assign(bytes.c_str(), bytes.size());
  if (x.elements() * io::st_dtype_size(*st) != x.bytes.size())
    throw InputError(name + ": " + std::to_string(x.bytes.size()) + " bytes do not hold shape " + io::shape_string(shape) + " of " + dtype);
  return x;
}

Options options_of(const std::map<std::string, std::string>& text) {
  io::OptionText t;
  for (const auto& [key, value] : text)
    if (!t.set(key, value)) throw InputError("unknown option '" + key + "'; the options are " + option_names());
  return t.options();
}

BatchProblem problem_of(const std::map<std::string, TensorArg>& tensors, const std::map<std::string, std::string>& options,
                        const std::string& layout) {
  std::map<std::string, io::Tensor> ts;
  for (const auto& [name, t] : tensors) ts.emplace(name, tensor_of(t, name));
  const io::Layout l = io::parse_layout(layout);
  return io::problem_from_tensors(ts, options_of(options), l, "the arguments");
}

nb::object numpy_f64(std::vector<double>&& v, std::vector<size_t> shape) {
  auto* owned = new std::vector<double>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<double>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, double>(owned->data(), shape.size(), shape.data(), owner));
}

nb::object numpy_u8(std::vector<uint8_t>&& v, std::vector<size_t> shape) {
  auto* owned = new std::vector<uint8_t>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, uint8_t>(owned->data(), shape.size(), shape.data(), owner));
}

nb::object numpy_i64(std::vector<int64_t>&& v) {
  auto* owned = new std::vector<int64_t>(std::move(v));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
  const size_t n = owned->size();
  return nb::cast(nb::ndarray<nb::numpy, int64_t>(owned->data(), 1, &n, owner));
}

std::vector<size_t> out_dims(const BatchProblem& p) {
  return {static_cast<size_t>(p.batch), static_cast<size_t>(p.heads), static_cast<size_t>(p.n), static_cast<size_t>(p.dv)};
}
std::vector<size_t> den_dims(const BatchProblem& p) {
  return {static_cast<size_t>(p.batch), static_cast<size_t>(p.heads), static_cast<size_t>(p.n)};
}

namespace {

// The reference with its magnitudes and flags, as numpy arrays in [B,H,T,·].
nb::dict reference_dict(const BatchProblem& p, engine::Reference&& r) {
  nb::dict d;
  const auto od = out_dims(p), dd = den_dims(p);
  const bool normalized = p.opt.normalize;
  std::vector<double> num = r.num.empty() ? r.out : std::move(r.num);
  d["out"] = numpy_f64(std::move(r.out), od);
  d["num"] = numpy_f64(std::move(num), od);
  d["den"] = numpy_f64(std::move(r.den), dd);
  d["mag_num"] = numpy_f64(std::move(r.mag_num), od);
  d["mag_den"] = numpy_f64(std::move(r.mag_den), dd);
  d["mag_num_unmasked"] = numpy_f64(std::move(r.mag_num_sd), od);
  d["mag_den_unmasked"] = numpy_f64(std::move(r.mag_den_sd), dd);
  const size_t nout = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nden = static_cast<size_t>(p.batch * p.heads * p.n);
  if (r.flags.empty()) r.flags.assign(nout, 0);
  if (r.den_flags.empty()) r.den_flags.assign(nden, 0);
  d["flags"] = numpy_u8(std::move(r.flags), od);
  d["den_flags"] = numpy_u8(std::move(r.den_flags), dd);
  d["bits"] = r.bits;
  d["normalized"] = normalized;
  nb::dict s;
  s["elements"] = r.stats.elements, s["uncertified"] = r.stats.uncertified, s["exact"] = r.stats.exact, s["fast"] = r.stats.fast,
  s["binary128"] = r.stats.binary128, s["recomputed"] = r.stats.recomputed;
  d["stats"] = s;
  return d;
}

nb::dict reference(const std::map<std::string, TensorArg>& tensors, const std::map<std::string, std::string>& options,
                   const std::string& layout, int threads) {
  const BatchProblem p = problem_of(tensors, options, layout);
  engine::ReferenceOptions ro;
  ro.threads = threads;
  engine::Reference r;
  {
    nb::gil_scoped_release unlocked;
    r = engine::compute_reference(p, ro);
  }
  return reference_dict(p, std::move(r));
}

check::CheckOptions check_options(const BatchProblem& p, const std::string& precision, const std::string& form_class, size_t worst) {
  check::CheckOptions opt;
  if (!precision.empty()) opt.precision = engine::parse_precision_map(precision).of(p.dtype);
  opt.form_class = engine::parse_form_class(form_class);
  opt.interface = check::Interface::python;
  opt.worst = worst;
  return opt;
}

// The report itself, kept for its HTML page (hla_oracle.Report.html).
struct NativeReport {
  check::Report report;
  std::string title;  // the case, the page's heading
};
using ReportTuple = std::tuple<std::string, std::string, NativeReport>;

// (text, json, the report) of a check; the text starts with the case, as `hla check` prints it.
ReportTuple report_of(check::Report&& r, const BatchProblem& p, const std::string& what) {
  const std::string head = what + ": " + p.opt.describe() + ", B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
                           " Hkv=" + std::to_string(p.kv_heads) + " n=" + std::to_string(p.n) + " d=" + std::to_string(p.d) +
                           " dv=" + std::to_string(p.dv) + " inputs " + std::string(to_string(p.dtype)) +
                           (p.offsets.empty() ? "" : ", " + std::to_string(p.offsets.size() - 1) + " packed sequences");
  std::string text = head + "\n" + r.text(), js = r.json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return {std::move(text), std::move(js), NativeReport{std::move(r), head}};
}

// The [B,heads,n,width] values of a per-head tensor in layout l (width 0: [B,heads,n]), its dtype.
struct HeadTensor {
  Index heads, width;
  const char* dims;
};
HeadTensor head_tensor(const BatchProblem& p, const std::string& name) {
  if (name == "do") return {p.heads, p.dv, "dv"};
  if (name == "dden") return {p.heads, 0, ""};
  if (name == "dq") return {p.heads, p.d, "d"};
  if (name == "dk") return {p.kv_heads, p.d, "d"};
  if (name == "dv") return {p.kv_heads, p.dv, "dv"};
  throw InputError("unknown gradient tensor '" + name + "' (expected do, dden, dq, dk, dv)");
}
std::vector<double> head_values(const BatchProblem& p, const std::map<std::string, TensorArg>& ts, const std::string& name,
                                io::Layout l, DType* dtype = nullptr) {
  const io::Tensor t = tensor_of(ts.at(name), name);
  const HeadTensor h = head_tensor(p, name);
  if (dtype) *dtype = *io::float_dtype(t.dtype);
  return io::head_values(t, name, p, l, h.heads, h.width, h.dims);
}

// The candidate: out, den and the gradients dq, dk, dv among `grads` (the
// upstream do, dden there are the reference's, not the candidate's).
io::Candidate candidate_of(const BatchProblem& p, const TensorArg& out, const std::optional<TensorArg>& den,
                           const std::map<std::string, TensorArg>& grads, io::Layout l) {
  const io::Tensor o = tensor_of(out, "out");
  io::Candidate c;
  c.out = io::output_values(o, "out", p, l, false);
  c.out_dtype = *io::float_dtype(o.dtype);
  if (den) {
    const io::Tensor t = tensor_of(*den, "den");
    c.den = io::output_values(t, "den", p, l, true);
    c.den_dtype = *io::float_dtype(t.dtype);
  }
  for (const auto& [name, x, dt] : {std::tuple{"dq", &c.dq, &c.dq_dtype}, {"dk", &c.dk, &c.dk_dtype}, {"dv", &c.dv, &c.dv_dtype}})
    if (grads.count(name)) *x = head_values(p, grads, name, l, dt);
  // The gradient of the initial state (dstate.<part>) and the final state (state.<part>), as candidate files hold them.
  std::map<std::string, io::Tensor> parts, finals;
  for (const auto& [name, t] : grads)
    if (io::has_prefix(name, "dstate.")) parts.emplace(name, tensor_of(t, name));
    else if (io::has_prefix(name, io::kStatePrefix)) finals.emplace(name, tensor_of(t, name));
  if (!parts.empty()) {
    if (!p.has_state()) throw InputError("dstate= is the gradient of an initial state, but no initial_state= was given");
    io::StateParts d = io::read_state_parts(parts, p, "dstate.", "dstate", false);
    c.dstate = std::move(d.values), c.dstate_parts = std::move(d.given), c.dstate_dtype = d.dtype;
  }
  io::StateParts f = io::read_state_parts(finals, p, io::kStatePrefix, "final_state", true);
  c.final_state = std::move(f.values), c.final_state_parts = std::move(f.given), c.final_state_dtype = f.dtype;
  return c;
}

// The upstream do, dden among `grads` (none: nullopt), read and validated as
// `hla ref` reads them (io::upstream_from_tensors); InputError when gradients
// are given without do or do without gradients.
std::optional<io::Upstream> upstream_of(const BatchProblem& p, const std::map<std::string, TensorArg>& grads, io::Layout l) {
  const bool has_do = grads.count("do") > 0, has_any = std::any_of(grads.begin(), grads.end(), [](const auto&x) {
                                               return x.first != "do" && x.first != "dden" && !io::has_prefix(x.first, io::kStatePrefix);
                                             });
  if (grads.count("dden") && !has_do) throw InputError("dden= needs do= (the upstream gradient of out)");
  if (has_any && !has_do)
    throw InputError("dq, dk, dv (and dstate) are judged as gradients of L = Σ⟨do, out⟩ + Σ dden·den: pass the upstream do= "
                     "(and dden=) they were computed for");
  if (has_do && !has_any) throw InputError("do= was given but none of dq=, dk=, dv=, dstate=: nothing to judge the gradients of");
  std::map<std::string, io::Tensor> up;
  for (const char* name : {"do", "dden"})
    if (grads.count(name)) up.emplace(name, tensor_of(grads.at(name), name));
  return io::upstream_from_tensors(up, p, l, "the arguments");
}

// check::outputs_of(const io::Candidate&), moving the values instead of copying them.
engine::CandidateOutputs outputs_moved(io::Candidate&& c) {
  engine::CandidateOutputs o;
  o.out = std::move(c.out), o.out_dtype = c.out_dtype;
  if (c.den) o.den = std::move(*c.den), o.den_dtype = c.den_dtype;
  if (c.dq) o.dq = std::move(*c.dq), o.dq_dtype = c.dq_dtype;
  if (c.dk) o.dk = std::move(*c.dk), o.dk_dtype = c.dk_dtype;
  if (c.dv) o.dv = std::move(*c.dv), o.dv_dtype = c.dv_dtype;
  o.dstate = std::move(c.dstate), o.dstate_parts = std::move(c.dstate_parts), o.dstate_dtype = c.dstate_dtype;
  o.final_state = std::move(c.final_state), o.final_state_parts = std::move(c.final_state_parts), o.final_state_dtype = c.final_state_dtype;
  return o;
}

ReportTuple check_arrays(const std::map<std::string, TensorArg>& tensors, const std::map<std::string, std::string>& options,
                         const std::string& layout, const TensorArg& out, const std::optional<TensorArg>& den, const std::string& precision,
                         const std::string& form_class, bool exact_tier, size_t worst, const std::string& dump,
                         const std::map<std::string, TensorArg>& grads, std::optional<Index> exact_max_n) {
  const BatchProblem p = problem_of(tensors, options, layout);
  const io::Layout l = io::parse_layout(layout);
  const engine::CandidateOutputs c = outputs_moved(candidate_of(p, out, den, grads, l));
  std::optional<io::Upstream> up = upstream_of(p, grads, l);
  check::CheckOptions opt = check_options(p, precision, form_class, worst);
  opt.exact_tier = exact_tier;
  opt.dump_on_failure = dump;
  check::Report r;
  {
    nb::gil_scoped_release unlocked;
    engine::Reference ref = engine::compute_reference(p, exact_max_n.value_or(engine::kExactMaxN));
    if (!up) {
      r = check::check(p, ref, c, opt);
    } else {  // the reference with its gradients for the upstream (SPEC §9)
      ref.grad = engine::compute_gradient_reference(p, ref, std::move(up->dout), std::move(up->dden));
      r = check::check(p, ref, c, opt);
    }
  }
  return report_of(std::move(r), p, "hla_oracle.check");
}

// A fixture file, read (digest checked) once.
struct Fixture {
  io::Fixture f;
  std::string path;
};

Fixture load_fixture(const std::string& path) { return Fixture{io::read_fixture(path), path}; }

nb::dict fixture_arrays(const Fixture& fx) {
  const io::Fixture& f = fx.f;
  const BatchProblem& p = f.problem;
  nb::dict d;
  d["q"] = numpy_f64(std::vector<double>(p.q), {size_t(p.batch), size_t(p.heads), size_t(p.n), size_t(p.d)});
  d["k"] = numpy_f64(std::vector<double>(p.k), {size_t(p.batch), size_t(p.kv_heads), size_t(p.n), size_t(p.d)});
  d["v"] = numpy_f64(std::vector<double>(p.v), {size_t(p.batch), size_t(p.kv_heads), size_t(p.n), size_t(p.dv)});
  d["offsets"] = p.offsets.empty() ? nb::none() : numpy_i64(std::vector<int64_t>(p.offsets));
  d["ref_out"] = numpy_f64(std::vector<double>(f.ref_out), out_dims(p));
  d["ref_den"] = numpy_f64(std::vector<double>(f.ref_den), den_dims(p));
  d["mag_num"] = numpy_f64(std::vector<double>(f.mag_num), out_dims(p));
  d["mag_den"] = numpy_f64(std::vector<double>(f.mag_den), den_dims(p));
  d["flags"] = f.flags.empty() ? nb::none() : numpy_u8(std::vector<uint8_t>(f.flags), out_dims(p));
  d["den_flags"] = f.den_flags.empty() ? nb::none() : numpy_u8(std::vector<uint8_t>(f.den_flags), den_dims(p));
  // Gradient fixtures: the upstream and the reference gradients (SPEC §9).
  const std::vector<size_t> qd{size_t(p.batch), size_t(p.heads), size_t(p.n), size_t(p.d)},
      kd{size_t(p.batch), size_t(p.kv_heads), size_t(p.n), size_t(p.d)}, vd{size_t(p.batch), size_t(p.kv_heads), size_t(p.n), size_t(p.dv)};
  auto opt = [&](const std::vector<double>& x, const std::vector<size_t>& dims) {
    return !f.gradients || x.empty() ? nb::none() : numpy_f64(std::vector<double>(x), dims);
  };
  d["do"] = opt(f.dout, out_dims(p)), d["dden"] = opt(f.dden, den_dims(p));
  d["ref_dq"] = opt(f.ref_dq, qd), d["ref_dk"] = opt(f.ref_dk, kd), d["ref_dv"] = opt(f.ref_dv, vd);
  d["mag_dq"] = opt(f.mag_dq, qd), d["mag_dk"] = opt(f.mag_dk, kd), d["mag_dv"] = opt(f.mag_dv, vd);
  return d;
}

nb::dict fixture_info(const Fixture& fx) {
  const io::Fixture& f = fx.f;
  const BatchProblem& p = f.problem;
  const Options& o = p.opt;
  nb::dict d;
  d["path"] = fx.path;
  d["case"] = f.case_name;
  d["suite"] = f.suite;
  d["seed"] = f.seed;
  d["dtype"] = std::string(to_string(p.dtype));
  d["exact_tier"] = f.exact_tier;
  d["reference_bits"] = f.reference_bits;
  d["gradients"] = f.gradients;
  d["warnings"] = f.warnings;
  nb::dict opt;
  for (const OptionInfo& r : kOptions) opt[nb::str(r.name.data(), r.name.size())] = r.text(o);
  d["options"] = opt;
  nb::dict shape;
  shape["B"] = p.batch, shape["H"] = p.heads, shape["Hkv"] = p.kv_heads, shape["n"] = p.n, shape["d"] = p.d, shape["dv"] = p.dv;
  d["shape"] = shape;
  // The features a kernel must support to run it (hla select's names).
  d["features"] = fuzz::feature_names(fuzz::required_features(p));
  return d;
}

ReportTuple check_fixture(const Fixture& fx, const TensorArg& out, const std::optional<TensorArg>& den,
                                                  const std::string& layout, const std::string& precision,
                                                  const std::string& form_class, size_t worst,
                                                  const std::map<std::string, TensorArg>& grads) {
  const io::Candidate c = candidate_of(fx.f.problem, out, den, grads, io::parse_layout(layout));
  const check::CheckOptions opt = check_options(fx.f.problem, precision, form_class, worst);
  check::Report r;
  {
    nb::gil_scoped_release unlocked;
    r = check::check_fixture(fx.f, c, opt);
  }
  return report_of(std::move(r), fx.f.problem, "hla check " + fx.path + " (case " + fx.f.case_name + ")");
}

// Writes a candidate file: shapes checked against the fixture when given
// (io::write_candidate), else out [B,H,n,dv] (and den [B,H,n]) as given.
void save_candidate(const std::string& path, const TensorArg& out, const std::optional<TensorArg>& den, const Fixture* fx,
                    const std::string& layout, const std::map<std::string, TensorArg>& grads) {
  const io::Layout l = io::parse_layout(layout);
  if (fx) return io::write_candidate(path, candidate_of(fx->f.problem, out, den, grads, l), fx->f);
  if (!grads.empty()) throw InputError("save_candidate: gradients (dq, dk, dv) need fixture= (their shapes and meaning come from it)");
  const io::Tensor o = tensor_of(out, "out");
  if (o.shape.size() != 4)
    throw InputError("out has shape " + io::shape_string(o.shape) + "; expected 4 dimensions (" +
                     (l == io::Layout::bthd ? "[B,T,H,dv]" : "[B,H,T,dv]") + ")");
  BatchProblem p;  // only the dims: output_values reorders by them
  const bool fla = l == io::Layout::bthd;
  p.batch = o.shape[0], p.heads = o.shape[fla ? 2 : 1], p.n = o.shape[fla ? 1 : 2], p.dv = o.shape[3];
  io::SafetensorsFile file;
  const DType ot = io::float_dtype(o.dtype) ? *io::float_dtype(o.dtype) : DType::f64;
  file.tensors["out"] = io::float_tensor(ot, io::out_shape(p), io::output_values(o, "out", p, l, false), "out");
  if (den) {
    const io::Tensor t = tensor_of(*den, "den");
    const DType dt = io::float_dtype(t.dtype) ? *io::float_dtype(t.dtype) : DType::f64;
    file.tensors["den"] = io::float_tensor(dt, io::den_shape(p), io::output_values(t, "den", p, l, true), "den");
  }
  io::write_safetensors(path, file);
}

}  // namespace

}  // namespace hla::python

NB_MODULE(_core, m) {
  using namespace hla::python;
  m.doc() = "hla-oracle's C++ core (reference, check, fixtures, fuzzer); use the hla_oracle package, not this module";
  nb::exception<hla::InputError>(m, "InputError", PyExc_ValueError);
  m.attr("__version__") = HLA_VERSION;  // CMakeLists.txt's project(VERSION), the one place it is written
  // What hla_oracle.Support selects by default (ALL_VARIANTS): the variant table's rows, less the paper-literal ones.
  m.def("variants", [] {
    std::vector<std::string> names;
    for (const hla::VariantInfo& v : hla::kVariants)
      if (!v.paper_literal) names.emplace_back(v.name);
    return names;
  });

  m.attr("EXACT_MAX_N") = hla::engine::kExactMaxN;  // the one exact-reference threshold (engine/include/hla/engine/reference.hpp)
  m.def("reference", &reference, nb::arg("tensors"), nb::arg("options"), nb::arg("layout"), nb::arg("threads") = 0);
  m.def("check", &check_arrays, nb::arg("tensors"), nb::arg("options"), nb::arg("layout"), nb::arg("out"), nb::arg("den").none(),
        nb::arg("precision"), nb::arg("form_class"), nb::arg("exact_tier"), nb::arg("worst"), nb::arg("dump"),
        nb::arg("grads") = std::map<std::string, TensorArg>{}, nb::arg("exact_max_n").none() = nb::none());
  // The table of options (hla/options.hpp), from which hla_oracle's keywords and defaults derive.
  m.def("options", [] {
    std::vector<std::map<std::string, std::string>> rows;
    for (const hla::OptionInfo& r : hla::kOptions) {
      auto s = [](std::string_view v) { return std::string(v); };
      rows.push_back({{"name", s(r.name)},
                      {"type", s(r.type)},
                      {"default", s(r.default_text)},
                      {"range", s(r.range)},
                      {"values", hla::option_values(r)},
                      {"cli", s(r.cli)},
                      {"key", s(r.key)},
                      {"help", s(r.help)},
                      {"alias", s(r.alias)}});
    }
    return rows;
  });

  nb::class_<NativeReport>(m, "NativeReport")
      .def("html", [](const NativeReport& r) { return r.report.html(r.title); })
      .def("write_html", [](const NativeReport& r, const std::string& path) { hla::check::write_html_report(path, r.report, r.title); },
           nb::arg("path"));
  nb::class_<Fixture>(m, "Fixture");
  m.def("load_fixture", &load_fixture, nb::arg("path"));
  m.def("fixture_arrays", &fixture_arrays);
  m.def("fixture_info", &fixture_info);
  m.def("check_fixture", &check_fixture, nb::arg("fixture"), nb::arg("out"), nb::arg("den").none(), nb::arg("layout"),
        nb::arg("precision"), nb::arg("form_class"), nb::arg("worst"), nb::arg("grads") = std::map<std::string, TensorArg>{});
  m.def("save_candidate", &save_candidate, nb::arg("path"), nb::arg("out"), nb::arg("den").none(), nb::arg("fixture").none(),
        nb::arg("layout"), nb::arg("grads") = std::map<std::string, TensorArg>{});
  m.def("generator_version", [] { return std::string(hla::check::generator_version()); });
  add_fuzz(m);
}
