// The in-process adapter: a function computes each case (the Python package's
// hla_oracle.fuzz calls a Python callable through it). The same campaign,
// probes, shrinker and findings as the C ABI and exec adapters.
#include "hla/fuzz/adapter.hpp"

#include "hla_impl.h"

#include <exception>
#include <tuple>

namespace hla::fuzz {
namespace {

class FunctionAdapter final : public Adapter {
 public:
  FunctionAdapter(Supports s, RunFunction f, BackwardFunction g) : s_(std::move(s)), f_(std::move(f)), g_(std::move(g)) {
    if (g_) s_.features |= HLA_FEAT_BACKWARD;
    s_.validate();
  }
  const Supports& supports() const override { return s_; }
  RunResult run(const BatchProblem& p, const engine::Reference*, const std::vector<double>* state_in, bool want_state) override {
    RunResult r = guarded([&] { return f_(p, state_in, want_state); });
    if (r.status != RunResult::Status::ok) return r;
    // The shapes check() and the state probe rely on.
    const size_t nout = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nden = static_cast<size_t>(p.batch * p.heads * p.n);
    if (r.out.out.size() != nout)
      return bad("out has " + std::to_string(r.out.out.size()) + " elements, expected " + std::to_string(nout));
    if (!r.out.den.empty() && r.out.den.size() != nden)
      return bad("den has " + std::to_string(r.out.den.size()) + " elements, expected " + std::to_string(nden));
    if (want_state && r.state_out.empty() && p.n > 0) return bad("no state returned although it was asked for");
    return r;
  }
  RunResult run_backward(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden) override {
    if (!g_) return Adapter::run_backward(p, dout, dden);
    RunResult r = guarded([&] { return g_(p, dout, dden); });
    if (r.status != RunResult::Status::ok) return r;
    const auto rows = static_cast<size_t>(p.batch * p.n);
    for (const auto& [name, x, count] : {std::tuple{"dq", &r.out.dq, rows * static_cast<size_t>(p.heads * p.d)},
                                         std::tuple{"dk", &r.out.dk, rows * static_cast<size_t>(p.kv_heads * p.d)},
                                         std::tuple{"dv", &r.out.dv, rows * static_cast<size_t>(p.kv_heads * p.dv)}})
      if (x->size() != count)
        return bad(std::string(name) + " has " + std::to_string(x->size()) + " elements, expected " + std::to_string(count));
    return r;
  }

 private:
  // f's result; a C++ exception it throws (not StopCampaign) is an `error` result.
  template <class F> static RunResult guarded(F f) {
    try {
      return f();
    } catch (const StopCampaign&) {
      throw;
    } catch (const std::exception& e) {
      RunResult r;
      r.status = RunResult::Status::error;
      r.message = e.what();
      return r;
    }
  }
  static RunResult bad(const std::string& m) {
    RunResult b;
    b.status = RunResult::Status::bad_output;
    b.message = m;
    return b;
  }
  Supports s_;
  RunFunction f_;
  BackwardFunction g_;
};

}  // namespace

std::unique_ptr<Adapter> make_function_adapter(const Supports& supports, RunFunction run, BackwardFunction backward) {
  return std::make_unique<FunctionAdapter>(supports, std::move(run), std::move(backward));
}

}  // namespace hla::fuzz
