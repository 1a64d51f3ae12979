// How a candidate implementation plugs into the fuzzer: a C ABI library
// (include/hla_impl.h, called in a child process), an exec command that
// reads a fixture file and writes a candidate file, or a function called in
// process (the Python package's hla_oracle.fuzz).
#pragma once

#include "hla/check/check.hpp"
#include "hla_impl.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hla::fuzz {

// What a candidate declares it supports (hla_impl_info); the fuzzer only
// generates problems inside it.
struct Supports {
  std::string name;
  std::vector<Variant> variants;
  std::vector<DType> dtypes;
  uint32_t features = 0;  // HLA_FEAT_* bits
  Index max_n = 4096, max_d = 64, max_dv = 64;
  engine::PrecisionMap precision{engine::Precision::f32, {}};  // per input dtype
  engine::FormClass form_class = engine::FormClass::masked;
  check::Interface interface = check::Interface::cli;  // how the candidate declares itself: the syntax of hints
  // Seconds added to the per-call limit of the call that starts the worker or
  // server, the first time and before a timeout's replay (Adapter::allow_startup):
  // its start-up (imports, JIT, device initialisation) is not the kernel's
  // time (hla fuzz --startup-timeout). Other restarts (after a crash or a
  // timeout) get the plain limit, so that a hanging kernel costs no more.
  double startup_timeout = 120;
  // Sizes a kernel may restrict itself to (every problem generated or shrunk
  // stays inside): the head dimensions it takes (empty: any up to max_d,
  // max_dv), dv = d only, and sequence lengths (each packed sequence, and a
  // state split) a multiple of a block size.
  std::vector<Index> d_values, dv_values;
  bool dv_equals_d = false;
  Index n_multiple = 1;
  bool has(uint32_t feature) const { return (features & feature) != 0; }
  // Throws InputError naming a declaration that admits no problem or
  // contradicts another (an empty list of variants or dtypes, n_multiple > max_n, …).
  void validate() const;
  // Whether p's sizes are inside d_values, dv_values, dv_equals_d and n_multiple.
  bool admits_sizes(const BatchProblem& p) const;
  std::string sizes_text() const;
  // What the case stream depends on: "variants la1, hla2; dtypes f32; features decay; max_n 4096, …".
  std::string text() const;
  // Why p lies outside this support ("" when inside): "variant la1", "dtype bf16",
  // "needs decay", "d = 8", "dv = 4", "dv != d", "n = 300", "n not a multiple of 16"
  // (hla select, the pytest plugin's golden fixtures). den and state are never needed.
  std::string outside(const BatchProblem& p) const;  // "d in {64, 128}, dv = d, n multiple of 16" ("" when unrestricted)
  // The declared compute precision for inputs of dtype t (f32 when nothing is declared).
  engine::Precision precision_for(DType t) const { return precision.of(t).value_or(engine::Precision::f32); }
};

struct RunResult {
  enum class Status { ok, error, crash, timeout, bad_output };
  Status status = Status::ok;
  std::string message;             // for anything but ok
  engine::CandidateOutputs out;    // when ok
  std::vector<double> state_out;   // when asked for and ok
};
std::string to_string(RunResult::Status s);

class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual const Supports& supports() const = 0;
  // The next start of a worker or server gets Supports::startup_timeout more
  // (the first start has it already): the warm-up before a timeout's replay.
  virtual void allow_startup() {}
  // Whether run() may return a final state per part (state.<part>; exec
  // candidates): its case's reference then carries the final state's.
  virtual bool returns_final_state() const { return false; }
  // Runs the candidate on p. `ref`, when given, is p's reference (exec writes
  // it into the fixture file it hands over; computed there when null).
  // state_in / want_state only with HLA_FEAT_STATE.
  virtual RunResult run(const BatchProblem& p, const engine::Reference* ref, const std::vector<double>* state_in, bool want_state) = 0;
  // The candidate's gradients (SPEC §9) for upstream dout [B,H,n,dv] and dden
  // [B,H,n] (or empty) into out.dq, dk, dv; only with HLA_FEAT_BACKWARD, and
  // only where run() returned none: an exec candidate computes them in the same
  // call, from the fixture's `do` (the reference handed to run() carries it).
  virtual RunResult run_backward(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden);
};

// Runs the library `path` in a child process: `persistent`, one that keeps it
// loaded across calls (a new one after a crash, a timeout or an error return);
// else a fresh one per call. `timeout_s` per call. Throws InputError when the
// library cannot be loaded or lacks the entry points. `sizes`: head sizes and
// block (d_values, dv_values, dv_equals_d, n_multiple) declared on the command
// line, inside the library's hla_impl_info (InputError when above its maxima).
std::unique_ptr<Adapter> make_cabi_adapter(const std::string& path, double timeout_s, bool persistent = true,
                                           const Supports* sizes = nullptr);

// The entry points of a C ABI library linked into this process; null where
// the library exports none (all but info and run are optional).
struct CabiEntryPoints {
  decltype(&hla_impl_info_get) info = nullptr;
  decltype(&hla_impl_run) run = nullptr;
  decltype(&hla_impl_state_size) state_size = nullptr;
  decltype(&hla_impl_run_backward) backward = nullptr;
  decltype(&hla_impl_run_backward_state) backward_state = nullptr;
};

// Calls such a library in this process, as make_cabi_adapter calls it in its
// child (the same declarations read, the same buffers): no isolation, so a
// crash or a hang is the caller's to catch (a libFuzzer target's:
// hla_add_candidate_fuzzer). `max_n` > 0 caps the declared max_n. Throws
// InputError as make_cabi_adapter does.
std::unique_ptr<Adapter> make_cabi_adapter_in_process(const CabiEntryPoints& entries, Index max_n = 0);

// Runs `/bin/sh -c command` with {in} and {out} replaced by file paths in a
// temporary folder of its own (removed with the adapter); `supports` comes
// from the command line. With `server`, starts the command once and sends it
// "run<TAB>IN<TAB>OUT" lines, one per case, each answered by a line "ok" or
// "error <message>" (restarted after a crash, a timeout or a malformed answer;
// an error answer keeps it running).
std::unique_ptr<Adapter> make_exec_adapter(const std::string& command, const Supports& supports, double timeout_s,
                                           bool server = false);

// An implementation called in this process (the Python package's adapter,
// a C++ test's kernel): `run` computes p's outputs (state_in / want_state only
// with HLA_FEAT_STATE). A C++ exception it throws (InputError,
// std::exception) becomes an `error` result with its message; anything the
// caller must stop on (an interrupt) it throws as StopCampaign. No crash or
// timeout isolation: the call is not in a child process.
struct StopCampaign {};
// `backward`, when given, computes the gradients (out.dq, dk, dv) for upstream
// dout, dden as run_backward does, and adds HLA_FEAT_BACKWARD to the support.
using RunFunction = std::function<RunResult(const BatchProblem& p, const std::vector<double>* state_in, bool want_state)>;
using BackwardFunction = std::function<RunResult(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden)>;
std::unique_ptr<Adapter> make_function_adapter(const Supports& supports, RunFunction run, BackwardFunction backward = {});

}  // namespace hla::fuzz
