// How a candidate implementation plugs into the fuzzer: a C ABI library
// (include/hla_impl.h, called in a child process) or an exec command that
// reads a fixture file and writes a candidate file.
#pragma once

#include "hla/check/check.hpp"

#include <cstdint>
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
  check::PrecisionMap precision{check::Precision::f32, {}};  // per input dtype
  check::FormClass form_class = check::FormClass::masked;
  bool has(uint32_t feature) const { return (features & feature) != 0; }
  // The declared compute precision for inputs of dtype t (f32 when nothing is declared).
  check::Precision precision_for(DType t) const { return precision.of(t).value_or(check::Precision::f32); }
};

struct RunResult {
  enum class Status { ok, error, crash, timeout, bad_output };
  Status status = Status::ok;
  std::string message;             // for anything but ok
  check::CandidateOutputs out;     // when ok
  std::vector<double> state_out;   // when asked for and ok
};
std::string to_string(RunResult::Status s);

class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual const Supports& supports() const = 0;
  // Runs the candidate on p. `ref`, when given, is p's reference (exec writes
  // it into the fixture file it hands over; computed there when null).
  // state_in / want_state only with HLA_FEAT_STATE.
  virtual RunResult run(const BatchProblem& p, const check::Reference* ref, const std::vector<double>* state_in,
                        bool want_state) = 0;
};

// Runs the library `path` in a child process: `persistent`, one that keeps it
// loaded across calls (a new one after a crash, a timeout or an error return);
// else a fresh one per call. `timeout_s` per call. Throws InputError when the
// library cannot be loaded or lacks the entry points.
std::unique_ptr<Adapter> make_cabi_adapter(const std::string& path, double timeout_s, bool persistent = true);

// Runs `/bin/sh -c command` with {in} and {out} replaced by file paths in a
// temporary folder of its own (removed with the adapter); `supports` comes
// from the command line. With `server`, starts the command once and sends it
// "run<TAB>IN<TAB>OUT" lines, one per case, each answered by a line "ok" or
// "error <message>" (restarted after a crash, a timeout or an error).
std::unique_ptr<Adapter> make_exec_adapter(const std::string& command, const Supports& supports, double timeout_s,
                                           bool server = false);

}  // namespace hla::fuzz
