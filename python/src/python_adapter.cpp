// hla_oracle.fuzz: the fuzzer's campaign (fuzz/: generator, probes,
// shrinker, findings) over a Python callable, through the in-process adapter
// fuzz::make_function_adapter. The Python side (hla_oracle/_fuzz.py) wraps the
// user's fn(q, k, v, options) into `run_case`, which this file calls per case:
//   run_case(q, k, v, info, offsets, state_in, want_state)
//     q, k, v: float64 numpy [B,H,n,·] (values of the case's dtype, exactly);
//     info: dict of the case's options and dtype; offsets: int64 numpy or None;
//     state_in: float64 numpy (flat) or None
//   -> ("ok", out, den or None, state or None)   out, den as tensors (dtype, shape, bytes)
//    | ("error", message) | ("bad_output", message)
// With a backward, per case that judges gradients:
//   run_backward_case(q, k, v, info, offsets, do, dden)
//     do: float64 numpy [B,H,n,dv], dden: float64 numpy [B,H,n] or None
//   -> ("ok", dq, dk, dv) as tensors | ("error", message) | ("bad_output", message)
// An exception that is not an Exception (KeyboardInterrupt) ends the campaign
// and reaches the caller.
#include "core.hpp"

#include "hla_impl.h"
#include "hla/fuzz/campaign.hpp"
#include "hla/io/fixture.hpp"
#include "hla/io/inputs.hpp"
#include "hla/options.hpp"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace hla::python {
namespace {

nb::dict case_info(const BatchProblem& p, bool want_state) {
  const Options& o = p.opt;
  nb::dict d;
  for (const OptionInfo& r : kOptions) d[nb::str(r.name.data(), r.name.size())] = r.text(o);  // by the table's names
  d["dtype"] = std::string(to_string(p.dtype));
  d["want_state"] = want_state;
  return d;
}

struct Stop {
  std::optional<nb::python_error> error;  // the BaseException that ended the campaign
};

// The case's q, k, v (float64 numpy) and offsets (or None), for the callables.
nb::tuple case_arrays(const BatchProblem& p) {
  nb::object q = numpy_f64(std::vector<double>(p.q), {size_t(p.batch), size_t(p.heads), size_t(p.n), size_t(p.d)});
  nb::object k = numpy_f64(std::vector<double>(p.k), {size_t(p.batch), size_t(p.kv_heads), size_t(p.n), size_t(p.d)});
  nb::object v = numpy_f64(std::vector<double>(p.v), {size_t(p.batch), size_t(p.kv_heads), size_t(p.n), size_t(p.dv)});
  nb::object offsets = p.offsets.empty() ? nb::none() : numpy_i64(std::vector<int64_t>(p.offsets));
  return nb::make_tuple(q, k, v, offsets);
}

// A result tuple's status: ok, else r holds the error or bad_output.
bool status_ok(const nb::tuple& res, fuzz::RunResult& r) {
  const std::string status = nb::cast<std::string>(res[0]);
  if (status == "ok") return true;
  r.status = status == "bad_output" ? fuzz::RunResult::Status::bad_output : fuzz::RunResult::Status::error;
  r.message = nb::cast<std::string>(res[1]);
  return false;
}

fuzz::RunResult bad_output(const InputError& e) {
  fuzz::RunResult r;
  r.status = fuzz::RunResult::Status::bad_output;
  r.message = e.what();
  return r;
}

// Runs f (which calls into Python) under the GIL: a Python Exception is an
// `error` result (a bug of the wrapper's conversions: reported, not fatal);
// any other BaseException ends the campaign.
template <class F> fuzz::RunResult in_python(Stop& stop, F f) {
  nb::gil_scoped_acquire locked;
  try {
    return f();
  } catch (nb::python_error& e) {
    if (e.matches(PyExc_Exception)) {
      fuzz::RunResult r;
      r.status = fuzz::RunResult::Status::error;
      r.message = e.what();
      return r;
    }
    stop.error.emplace(std::move(e));
    throw fuzz::StopCampaign{};
  }
}

fuzz::RunResult call(nb::callable& run_case, const BatchProblem& p, const std::vector<double>* state_in, bool want_state,
                     Stop& stop) {
  return in_python(stop, [&] {
    fuzz::RunResult r;
    const nb::tuple a = case_arrays(p);
    nb::object state = state_in ? numpy_f64(std::vector<double>(*state_in), {state_in->size()}) : nb::none();
    nb::tuple res = nb::cast<nb::tuple>(run_case(a[0], a[1], a[2], case_info(p, want_state), a[3], state, want_state));
    if (!status_ok(res, r)) return r;
    const io::Tensor out = tensor_of(nb::cast<TensorArg>(res[1]), "out");
    try {
      r.out.out = io::output_values(out, "out", p, io::Layout::bhtd, false);
      r.out.out_dtype = *io::float_dtype(out.dtype);
      if (!res[2].is_none()) {
        const io::Tensor den = tensor_of(nb::cast<TensorArg>(res[2]), "den");
        r.out.den = io::output_values(den, "den", p, io::Layout::bhtd, true);
        r.out.den_dtype = *io::float_dtype(den.dtype);
      }
    } catch (const InputError& e) {
      return bad_output(e);
    }
    if (!res[3].is_none()) {
      const nb::bytes s = nb::cast<nb::bytes>(res[3]);
      r.state_out.resize(s.size() / sizeof(double));
      if (!r.state_out.empty()) std::memcpy(r.state_out.data(), s.c_str(), r.state_out.size() * sizeof(double));
    }
    return r;
  });
}

fuzz::RunResult call_backward(nb::callable& run_backward_case, const BatchProblem& p, const std::vector<double>& dout,
                              const std::vector<double>& dden, Stop& stop) {
  return in_python(stop, [&] {
    fuzz::RunResult r;
    const nb::tuple a = case_arrays(p);
    nb::object d_out = numpy_f64(std::vector<double>(dout), out_dims(p));
    nb::object d_den = dden.empty() ? nb::none() : numpy_f64(std::vector<double>(dden), den_dims(p));
    nb::tuple res = nb::cast<nb::tuple>(run_backward_case(a[0], a[1], a[2], case_info(p, false), a[3], d_out, d_den));
    if (!status_ok(res, r)) return r;
    try {
      const io::Tensor dq = tensor_of(nb::cast<TensorArg>(res[1]), "dq"), dk = tensor_of(nb::cast<TensorArg>(res[2]), "dk"),
                       dv = tensor_of(nb::cast<TensorArg>(res[3]), "dv");
      r.out.dq = io::head_values(dq, "dq", p, io::Layout::bhtd, p.heads, p.d, "d");
      r.out.dk = io::head_values(dk, "dk", p, io::Layout::bhtd, p.kv_heads, p.d, "d");
      r.out.dv = io::head_values(dv, "dv", p, io::Layout::bhtd, p.kv_heads, p.dv, "dv");
      r.out.dq_dtype = *io::float_dtype(dq.dtype), r.out.dk_dtype = *io::float_dtype(dk.dtype), r.out.dv_dtype = *io::float_dtype(dv.dtype);
    } catch (const InputError& e) {
      return bad_output(e);
    }
    return r;
  });
}

// The summary as `hla fuzz --json` writes it (json.loads of Summary::json), and its text.
nb::dict summary_dict(const fuzz::Summary& s) {
  nb::dict d = nb::cast<nb::dict>(
      nb::module_::import_("json").attr("loads")(s.json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
  d["text"] = s.text();
  return d;
}

}  // namespace

// A support declaration as hla_oracle/_support.py normalizes it: variants,
// dtypes (lists of names), features ("decay,normalize" or ""), max_n, max_d,
// max_dv, d, dv (lists of ints, empty: any), dv_equals_d, n_multiple,
// precision ("f32" or "bf16=f32,…"), form_class, name.
fuzz::Supports supports_of(const nb::dict& d) {
  auto get = [&](const char* key) -> nb::handle {
    if (!d.contains(key)) throw InputError(std::string("support lacks '") + key + "'");
    return d[key];
  };
  fuzz::Supports s;
  s.name = nb::cast<std::string>(get("name"));
  for (const auto& v : nb::cast<std::vector<std::string>>(get("variants"))) s.variants.push_back(parse_variant(v));
  for (const auto& t : nb::cast<std::vector<std::string>>(get("dtypes"))) s.dtypes.push_back(parse_dtype(t));
  const auto features = nb::cast<std::string>(get("features"));
  s.features = features.empty() || features == "none" ? 0 : fuzz::parse_features(features);
  if (d.contains("state") && nb::cast<bool>(d["state"])) s.features |= HLA_FEAT_STATE;  // in-process: the state is handed over
  s.max_n = nb::cast<Index>(get("max_n")), s.max_d = nb::cast<Index>(get("max_d")), s.max_dv = nb::cast<Index>(get("max_dv"));
  s.d_values = nb::cast<std::vector<Index>>(get("d"));
  s.dv_values = nb::cast<std::vector<Index>>(get("dv"));
  s.dv_equals_d = nb::cast<bool>(get("dv_equals_d"));
  s.n_multiple = nb::cast<Index>(get("n_multiple"));
  if (!s.d_values.empty()) s.max_d = *std::max_element(s.d_values.begin(), s.d_values.end());
  if (!s.dv_values.empty()) s.max_dv = *std::max_element(s.dv_values.begin(), s.dv_values.end());
  s.precision = engine::parse_precision_map(nb::cast<std::string>(get("precision")));
  if (s.precision.empty()) throw InputError("precision must name a compute precision (e.g. f32, or bf16=f32,f32=f32)");
  s.form_class = engine::parse_form_class(nb::cast<std::string>(get("form_class")));
  s.interface = check::Interface::python;
  s.validate();
  return s;
}

namespace {

// The campaign's reports through log(level, message) (hla_oracle/_fuzz.py hands
// the logger hla_oracle.fuzz's methods): findings and notes as "warning",
// with `progress` a progress line every 10 s as "info". Nothing is printed
// here. An exception the logger raises ends the campaign and reaches the caller.
void log_reports(fuzz::CampaignOptions& o, const nb::callable& log, bool progress, Stop& stop) {
  auto emit = [&log, &stop](const char* level, const std::string& message) {
    nb::gil_scoped_acquire locked;
    try {
      log(level, message);
    } catch (nb::python_error& e) {
      stop.error.emplace(std::move(e));
      throw fuzz::StopCampaign{};
    }
  };
  o.on_note = [emit](const std::string& m) { emit("warning", m); };
  o.on_finding = [emit](const fuzz::Finding& f) { emit("warning", f.headline()); };
  if (progress)
    o.on_progress = [emit, last = 0.0](const fuzz::Progress& p) mutable {
      if (p.seconds - last < 10) return;
      last = p.seconds;
      emit("info", p.text());
    };
}

// run_jobs' hooks for a Python process (docs/python.md: jobs): Python's own
// buffers flushed and its runtime told of the fork (PyOS_BeforeFork, as
// os.fork does); in each job, `in_job` first (hla_oracle/_fuzz.py: one torch
// thread), its exceptions ignored there (the child must not unwind into the
// parent's code); the parent's signals (Ctrl-C) checked while the jobs run.
void python_jobs(fuzz::Jobs& jobs, nb::handle in_job) {
  auto flush = [] {
    nb::module_ sys = nb::module_::import_("sys");
    for (const char* f : {"stdout", "stderr"})
      if (!sys.attr(f).is_none()) sys.attr(f).attr("flush")();
  };
  jobs.fork = [in_job, flush] {
    nb::gil_scoped_acquire locked;
    flush();
    PyOS_BeforeFork();
    const int pid = ::fork();
    if (pid != 0) {
      PyOS_AfterFork_Parent();
      return pid;
    }
    PyOS_AfterFork_Child();
    try {
      if (!in_job.is_none()) in_job();
    } catch (...) {
    }
    return 0;
  };
  jobs.before_exit = [flush] {
    nb::gil_scoped_acquire locked;
    flush();
  };
  jobs.poll = [] {
    nb::gil_scoped_acquire locked;
    if (PyErr_CheckSignals() != 0) throw nb::python_error();
  };
}

nb::dict fuzz_callable(nb::callable run_case, const nb::dict& support, uint64_t seed, size_t max_cases, double seconds,
                       const std::string& findings, size_t shrink_attempts, size_t stop_after, bool progress, size_t shard, size_t shards,
                       std::optional<Index> exact_max_n, std::optional<nb::callable> run_backward_case, std::optional<nb::callable> log,
                       size_t examples_per_group, unsigned jobs, nb::object in_job) {
  const fuzz::Supports s = supports_of(support);
  fuzz::CampaignOptions o;
  o.seed = seed, o.max_cases = max_cases, o.max_seconds = seconds, o.findings_dir = findings, o.shrink_attempts = shrink_attempts,
  o.stop_after = stop_after, o.shard = shard, o.shards = shards, o.exact_max_n = exact_max_n.value_or(engine::kExactMaxN);
  o.examples_per_group = examples_per_group;
  Stop stop;
  if (log) log_reports(o, *log, progress, stop);
  auto make_adapter = [&] {
    return fuzz::make_function_adapter(
        s,
        [&](const BatchProblem& p, const std::vector<double>* state_in, bool want_state) {
          return call(run_case, p, state_in, want_state, stop);
        },
        run_backward_case
            ? fuzz::BackwardFunction([&](const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) {
                return call_backward(*run_backward_case, p, dout, dden, stop);
              })
            : fuzz::BackwardFunction{});
  };
  fuzz::Summary sum;
  try {
    nb::gil_scoped_release unlocked;  // the reference and the check run without the GIL; call() takes it back
    if (jobs > 1) {
      fuzz::Jobs j;
      j.count = jobs, j.make_adapter = make_adapter;
      python_jobs(j, in_job);
      sum = fuzz::run_jobs(j, o);
    } else {
      sum = fuzz::run_campaign(*make_adapter(), o);
    }
  } catch (const fuzz::StopCampaign&) {
    if (stop.error) throw std::move(*stop.error);
    throw;
  }
  return summary_dict(sum);
}

// Why the problem of each fixture lies outside the support ("" inside).
std::vector<std::string> outside(const nb::dict& support, const std::vector<std::string>& paths) {
  const fuzz::Supports s = supports_of(support);
  std::vector<std::string> why;
  for (const auto& path : paths) why.push_back(s.outside(io::read_fixture(path).problem));
  return why;
}

}  // namespace

void add_fuzz(nb::module_& m) {
  m.def("fuzz", &fuzz_callable, nb::arg("run_case"), nb::arg("support"), nb::arg("seed"), nb::arg("max_cases"), nb::arg("seconds"),
        nb::arg("findings"), nb::arg("shrink_attempts"), nb::arg("stop_after"), nb::arg("progress"), nb::arg("shard") = 0,
        nb::arg("shards") = 1, nb::arg("exact_max_n").none() = nb::none(), nb::arg("run_backward_case").none() = nb::none(),
        nb::arg("log").none() = nb::none(), nb::arg("examples_per_group") = 3, nb::arg("jobs") = 1, nb::arg("in_job").none() = nb::none());
  m.def("outside", &outside, nb::arg("support"), nb::arg("paths"));
  m.def("validate_support", [](const nb::dict& d) { supports_of(d); });
  m.def("feature_names", [](const std::string& s) { return fuzz::feature_names(fuzz::parse_features(s)); });
}

}  // namespace hla::python
