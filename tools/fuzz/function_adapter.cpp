// The in-process adapter: a function computes each case (the Python package's
// hla_oracle.fuzz calls a Python callable through it). The same campaign,
// probes, shrinker and findings as the C ABI and exec adapters.
#include "adapter.hpp"

#include <exception>

namespace hla::fuzz {
namespace {

class FunctionAdapter final : public Adapter {
 public:
  FunctionAdapter(Supports s, RunFunction f) : s_(std::move(s)), f_(std::move(f)) { s_.validate(); }
  const Supports& supports() const override { return s_; }
  RunResult run(const BatchProblem& p, const check::Reference*, const std::vector<double>* state_in, bool want_state) override {
    RunResult r;
    try {
      r = f_(p, state_in, want_state);
    } catch (const StopCampaign&) {
      throw;
    } catch (const std::exception& e) {
      r = RunResult{};
      r.status = RunResult::Status::error;
      r.message = e.what();
      return r;
    }
    if (r.status != RunResult::Status::ok) return r;
    // The shapes check() and the state probe rely on.
    const size_t nout = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nden = static_cast<size_t>(p.batch * p.heads * p.n);
    auto bad = [&](const std::string& m) {
      RunResult b;
      b.status = RunResult::Status::bad_output;
      b.message = m;
      return b;
    };
    if (r.out.out.size() != nout)
      return bad("out has " + std::to_string(r.out.out.size()) + " elements, expected " + std::to_string(nout));
    if (!r.out.den.empty() && r.out.den.size() != nden)
      return bad("den has " + std::to_string(r.out.den.size()) + " elements, expected " + std::to_string(nden));
    if (want_state && r.state_out.empty() && p.n > 0) return bad("no state returned although it was asked for");
    return r;
  }

 private:
  Supports s_;
  RunFunction f_;
};

}  // namespace

std::unique_ptr<Adapter> make_function_adapter(const Supports& supports, RunFunction run) {
  return std::make_unique<FunctionAdapter>(supports, std::move(run));
}

}  // namespace hla::fuzz
