// The exec adapter: writes the problem as a fixture file, runs the user's
// command with {in} and {out} replaced, reads the candidate file it wrote. In
// server mode the command starts once and gets one request line per case:
// "run<TAB>{in}<TAB>{out}", answered by "ok" or "error <message>" (the server
// keeps running after an error; it is restarted after a crash, a timeout or
// an answer that is neither). A candidate
// that declares state gets two more: {state_in} (a state file to start from,
// or "-") and {state_out} (where to write its final state, or "-"), also as
// the request's 4th and 5th fields. A candidate that declares backward finds
// the upstream gradient `do` (and `dden`) in fixtures of cases that judge
// gradients, and writes dq, dk, dv into the same candidate file.
#include "hla/fuzz/adapter.hpp"
#include "hla_impl.h"
#include "process.hpp"

#include "hla/check/fixture.hpp"
#include "hla/io/atomic_file.hpp"
#include "hla/io/printable.hpp"
#include "hla/io/safetensors.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>

namespace hla::fuzz {
namespace {

namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

std::string tail_of(const fs::path& file, size_t max_chars = 600) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.size() > max_chars ? "…" + s.substr(s.size() - max_chars) : s;
}

class ExecAdapter final : public Adapter {
 public:
  ExecAdapter(std::string command, Supports s, double timeout_s, bool server)
      : cmd_(std::move(command)), s_(std::move(s)), timeout_(timeout_s) {
    if (!server && (cmd_.find("{in}") == std::string::npos || cmd_.find("{out}") == std::string::npos))
      throw InputError("--exec command must contain {in} and {out}, got: " + io::printable(cmd_));
    if (cmd_.empty()) throw InputError("--exec-server needs a command");
    // State travels in files (docs/fuzzing.md "State through files": {state_in}, {state_out}).
    if (!server && s_.has(HLA_FEAT_STATE) &&
        (cmd_.find("{state_in}") == std::string::npos || cmd_.find("{state_out}") == std::string::npos))
      throw InputError("--features state: the --exec command must contain {state_in} and {state_out}, got: " + io::printable(cmd_));
    // Its own temporary folder, removed afterwards: the command's files never
    // mix with findings, and a findings folder that fails cannot stop a run.
    std::error_code ec;
    std::string templ = (fs::temp_directory_path(ec) / "hla-exec-XXXXXX").string();
    if (ec || !::mkdtemp(templ.data())) throw InputError("cannot create a temporary folder for the exec candidate: " + std::string(std::strerror(errno)));
    dir_ = templ;
    if (dir_.string().find_first_of("\t\n") != std::string::npos)
      throw InputError("the temporary folder " + io::printable(dir_.string()) + " holds a tab or a newline (TMPDIR)");
    if (server) server_.emplace(cmd_, (dir_ / "server.log").string());
  }
  ~ExecAdapter() override {
    if (server_) server_->stop();  // before its folder goes
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const Supports& supports() const override { return s_; }
  void allow_startup() override { startup_.allow(); }
  bool returns_final_state() const override { return true; }

  RunResult run(const BatchProblem& p, const engine::Reference* ref, const std::vector<double>* state_in, bool want_state) override {
    const fs::path in = dir_ / "problem.safetensors", out = dir_ / "candidate.safetensors", log = dir_ / "candidate.log";
    const fs::path sin = dir_ / "state_in.safetensors", sout = dir_ / "state_out.safetensors";
    const io::Fixture f = check::make_fixture(p, ref ? *ref : engine::compute_reference(p), {"fuzz", "case", 0, false});
    io::write_fixture(in, f);
    fs::remove(out);
    fs::remove(sout);
    // The state files' paths, "-" for none (no initial state, no final state wanted).
    std::string state_in_arg = "-", state_out_arg = "-";
    if (state_in) {
      write_state(sin, *state_in);
      state_in_arg = sin.string();
    }
    if (want_state) state_out_arg = sout.string();
    RunResult r;
    auto fail = [&](RunResult::Status s, const std::string& m) {
      r.status = s;
      r.message = m;
      const std::string t = tail_of(server_ ? dir_ / "server.log" : log);
      if (!t.empty()) r.message += "; its output ends: " + t;
      return r;
    };
    ChildOutcome o;
    if (server_) {
      std::string answer;
      std::string request = "run\t" + in.string() + "\t" + out.string();
      if (s_.has(HLA_FEAT_STATE)) request += "\t" + state_in_arg + "\t" + state_out_arg;
      // A server that is not running starts with this call.
      const double limit = startup_.limit(timeout_, s_.startup_timeout, server_->running());
      if (server_->call(request, answer, limit, o)) {
        // An `error` answer keeps the server: it is alive and reads the next
        // request (a restart per error cost a start-up, seconds for torch, per case).
        if (answer.rfind("error", 0) == 0)
          return fail(RunResult::Status::error, "server answered: " + io::printable(answer.substr(0, 300)));
        if (answer != "ok") {
          server_->stop();
          return fail(RunResult::Status::bad_output, "server answered '" + io::printable(answer.substr(0, 100)) +
                                                         "', expected 'ok' or 'error <message>'");
        }
      } else if (o.kind == ChildOutcome::Kind::exited) {
        return fail(RunResult::Status::crash, "server ended without answering (" + o.describe() + ")");
      }
    } else {
      std::string cmd = replace_all(replace_all(cmd_, "{in}", shell_quote(in.string())), "{out}", shell_quote(out.string()));
      cmd = replace_all(replace_all(cmd, "{state_in}", shell_quote(state_in_arg)), "{state_out}", shell_quote(state_out_arg));
      o = run_in_child([&] {
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        return 127;
      }, timeout_);
    }
    if (o.kind == ChildOutcome::Kind::timed_out) return fail(RunResult::Status::timeout, "no result within " + std::to_string(timeout_) + " s");
    if (o.kind == ChildOutcome::Kind::signaled) return fail(RunResult::Status::crash, (server_ ? "server " : "command ") + o.describe());
    if (o.code != 0) return fail(RunResult::Status::error, "command " + o.describe());
    if (!fs::exists(out)) return fail(RunResult::Status::bad_output, "command succeeded but wrote no " + out.string());
    try {
      r.out = check::outputs_of(io::read_candidate(out, f));
    } catch (const InputError& e) {
      return fail(RunResult::Status::bad_output, e.what());
    }
    if (want_state) {
      if (!fs::exists(sout)) return fail(RunResult::Status::bad_output, "the final state was asked for but no " + sout.string() + " was written");
      try {
        r.state_out = read_state(sout);
      } catch (const InputError& e) {
        return fail(RunResult::Status::bad_output, e.what());
      }
    }
    return r;
  }
  // Gradients come with run()'s candidate file (the fixture carries `do`);
  // this is reached only when that file held none.
  RunResult run_backward(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) override {
    if (!s_.has(HLA_FEAT_BACKWARD)) return Adapter::run_backward(p, dout, dden);
    RunResult r;
    r.status = RunResult::Status::bad_output;
    r.message = "the fixture carried the upstream gradient 'do' (--features backward), but the candidate file holds no dq, dk, dv";
    return r;
  }

 private:
  // A state file is a safetensors file of float tensors, opaque to us: read
  // in name order into one vector, written back (as F64) with the names and
  // shapes of the last one read.
  std::vector<double> read_state(const fs::path& file) {
    const io::SafetensorsFile sf = io::read_safetensors(file);
    std::vector<double> all;
    state_layout_.clear();
    for (const auto& [name, t] : sf.tensors) {
      const std::vector<double> x = io::float_values(t, "state tensor '" + io::printable(name) + "'");
      all.insert(all.end(), x.begin(), x.end());
      state_layout_.emplace_back(name, t.shape);
    }
    return all;
  }
  void write_state(const fs::path& file, const std::vector<double>& state) {
    io::SafetensorsFile sf;
    size_t at = 0, total = 0;
    for (const auto& [name, shape] : state_layout_) total += static_cast<size_t>(io::Tensor{io::StDType::F64, shape, {}}.elements());
    if (total != state.size()) {  // not one we read: one flat tensor
      sf.tensors["state"] = io::float_tensor(DType::f64, {static_cast<int64_t>(state.size())}, state, "state");
    } else {
      for (const auto& [name, shape] : state_layout_) {
        const size_t n = static_cast<size_t>(io::Tensor{io::StDType::F64, shape, {}}.elements());
        sf.tensors[name] = io::float_tensor(DType::f64, shape, std::vector<double>(state.begin() + at, state.begin() + at + n), name);
        at += n;
      }
    }
    io::write_safetensors(file, sf);
  }

  std::string cmd_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> state_layout_;
  Supports s_;
  fs::path dir_;
  double timeout_;
  StartupAllowance startup_;
  std::optional<LineServer> server_;
};

}  // namespace

std::unique_ptr<Adapter> make_exec_adapter(const std::string& command, const Supports& supports, double timeout_s, bool server) {
  return std::make_unique<ExecAdapter>(command, supports, timeout_s, server);
}

}  // namespace hla::fuzz
