// Our backward orders in a candidate's precision (gradient_reference.hpp):
// the reference library's backward forms rounded to a float type, the fast
// engine's chunked backward, and the paper state's, as rule 3 names them.
#include "hla/engine/gradient_reference.hpp"

#include "hla/bounds.hpp"
#include "hla/engine/detail.hpp"
#include "hla/engine/gradient_groups.hpp"
#include "hla/engine/orders.hpp"
#include "hla/fast/engine.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>

namespace hla::engine {
namespace {

// c's gradients zero, of p's shapes and dtype `out`, naming the state parts a kernel returns.
void gradient_slots(const BatchProblem& p, DType out, CandidateOutputs& c) {
  c.dq.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.d), 0);
  c.dk.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.d), 0);
  c.dv.assign(static_cast<size_t>(p.batch * p.kv_heads * p.n * p.dv), 0);
  c.dq_dtype = c.dk_dtype = c.dv_dtype = c.dstate_dtype = out;
  c.dstate.assign(p.state.size(), 0);
  c.dstate_parts.clear();
  if (p.has_state())
    for (const StatePart& m : state_layout(p.opt, p.d, p.dv))
      if (m.role != StatePart::Role::unused)
        for (const std::string& name : {m.name, m.ones})
          if (!name.empty()) c.dstate_parts.push_back(name);
}

// Our backward form in scalar S on every group and sequence, rounded to `out`.
template <class S>
void gradients_in(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form, Index chunk,
                  DType out, CandidateOutputs& c, bool log_decay = false) {
  p.validate();
  if (!has_backward_form(p.opt.variant, form))
    throw InputError("variant " + to_string(p.opt.variant) + " has no backward form " + to_string(form));
  gradient_slots(p, out, c);
  std::vector<double>* values[] = {&c.dq, &c.dk, &c.dv, &c.dstate};
  const std::vector<Task> tasks = group_tasks(p);
  parallel_for(tasks.size(), worker_threads(), [&](size_t i) {  // tasks write disjoint elements
    const Task& k = tasks[i];
    for_each_element(p, k, group_gradient<S>(p, dout, dden, k.b, k.kvh, k.t0, k.t1, form, chunk, false, log_decay),
                     [&](int w, size_t at, const S& v, const S&, size_t) { (*values[w])[at] = round_to(out, static_cast<double>(v)); });
  });
}

// The gradients of a problem with reversed features (with_reversed_features)
// as gradients of p: dq's and dk's columns and the state's features back.
CandidateOutputs unreversed(const BatchProblem& p, CandidateOutputs c) {
  for (auto* x : {&c.dq, &c.dk})
    for (size_t row = 0; row < x->size(); row += static_cast<size_t>(p.d))
      std::reverse(x->begin() + static_cast<std::ptrdiff_t>(row), x->begin() + static_cast<std::ptrdiff_t>(row) + p.d);
  if (p.has_state() && !c.dstate.empty()) reverse_state_features(p, c.dstate);
  return c;
}

}  // namespace

// Rule 3's yardsticks (SPEC §9): our own backward forms in the candidate's
// precision and class, named. On small problems in f32 or f64 the reference
// library's streaming, chunked/16 and chunked_matmul/64 backwards (in float,
// double); at every size and precision the fast engine's chunked backward
// at widths 16 and 64 and at 64 with reversed features (every dot product
// summed in the opposite order). Each forms a normalized upstream from its own
// forward, in that precision.
std::vector<std::pair<std::string, CandidateOutputs>> gradient_baselines(
    const BatchProblem& p, const GradientReference& g, Precision prec, FormClass cls,
    std::vector<std::pair<std::string, CandidateOutputs>>* masked_done) {
  std::vector<std::pair<std::string, CandidateOutputs>> out;
  // The state-difference class: our own subtracting backward (hla2's paper
  // state, S·C − G; hla3's, S·SQ·P − G; from a state too), also with reversed
  // features, in every precision, whose honest error the cancellation of
  // unmasked terms makes 10-50x the masked orders' (measured on a correct
  // autograd through S·C − G: tests/falarm).
  const bool sd = cls == FormClass::state_difference && info(p.opt.variant).forms.has(Form::streaming_paper_state) && p.opt.masked;
  if (sd) {
    const std::string name = p.opt.variant == Variant::hla3 ? "paper state (S*SQ*P - G)" : "paper state (S*C - G)";
    out.emplace_back(name, paper_state_gradients(p, prec, g.dout, g.dden));
    out.emplace_back(name + ", reversed features", unreversed(p, paper_state_gradients(with_reversed_features(p), prec, g.dout, g.dden)));
  }
  if (masked_done) {  // the rest does not depend on the class
    std::move(masked_done->begin(), masked_done->end(), std::back_inserter(out));
    masked_done->clear();
    return out;
  }
  // Decay in log space (exp of a cumulative sum of log γ per chunk, as
  // production chunk kernels and autograd through them form it), at γ < 1,
  // in the chunked forms; one chunk: per sequence.
  std::vector<std::tuple<BackwardForm, Index, bool>> forms{
      {BackwardForm::streaming, 16, false}, {BackwardForm::chunked, 16, false}, {BackwardForm::chunked_matmul, 64, false}};
  if (p.opt.gamma != 1 && !p.has_state()) {
    for (const Index w : {Index(16), Index(64), std::max<Index>(longest_sequence(p), 1)})
      forms.emplace_back(BackwardForm::chunked_matmul, w, true);
    // The literal sums' backward, per sequence, on small heads (every variant has it; hla3 no chunked one).
    if (std::pow(static_cast<double>(longest_sequence(p)), order_of(p.opt.variant) + 1) * p.d <= std::ldexp(1.0, 28))
      forms.emplace_back(BackwardForm::naive, 1, true);
  }
  const Precision in = orders_precision(prec);
  if ((in == Precision::f32 || in == Precision::f64) && !fast_baseline_wanted(p))
    for (const auto& [form, chunk, lg] : forms) {
      if (!has_backward_form(p.opt.variant, form)) continue;
      CandidateOutputs c;
      if (in == Precision::f32) gradients_in<float>(p, g.dout, g.dden, form, chunk, DType::f64, c, lg);
      else gradients_in<double>(p, g.dout, g.dden, form, chunk, DType::f64, c, lg);
      out.emplace_back(to_string(form) +
                           (form == BackwardForm::streaming || form == BackwardForm::naive ? "" : "/" + std::to_string(chunk)) +
                           (lg ? " (log-space decay)" : ""),
                       std::move(c));
    }
  if (!fast::supports(p.opt.variant)) return out;
  for (const Index w : {Index(16), Index(64)})
    out.emplace_back("engine chunked/" + std::to_string(w), fast_ours_gradients(p, prec, g.dout, g.dden, w));
  out.emplace_back("engine chunked/64 reversed features",
                   unreversed(p, fast_ours_gradients(with_reversed_features(p), prec, g.dout, g.dden, 64)));
  return out;
}

// Decay in log space along the whole sequence (b_t − b_j of a cumulative sum
// of log γ, as a masked-matmul kernel or autograd through one forms it): its
// decays' error grows with |b_t|; without this order such a torch kernel's
// gradients were up to 75x our worst at n = 4096, γ = 0.9 (2026-12-06).
std::vector<std::pair<std::string, CandidateOutputs>> gradient_log_orders(const BatchProblem& p, const GradientReference& g,
                                                                          Precision prec) {
  std::vector<std::pair<std::string, CandidateOutputs>> out;
  for (const BaselineForm& f : log_along_forms(p))
    out.emplace_back("engine " + f.name(), fast_ours_gradients(p, prec, g.dout, g.dden, f.chunk, f.log_along));
  return out;
}

void ours_gradients(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form, Index chunk,
                    DType out, CandidateOutputs& c, Precision prec) {
  if (prec == Precision::f64) return gradients_in<double>(p, dout, dden, form, chunk, out, c);
  if (prec == Precision::f32) return gradients_in<float>(p, dout, dden, form, chunk, out, c);
  // bf16, f16: the reference library's backward forms exist in double and
  // float only; the fast engine's chunked backward rounds every operation
  // (and, in a tensor-core precision, its products' operands).
  if (form != BackwardForm::chunked && form != BackwardForm::chunked_matmul)
    throw InputError("backward form " + to_string(form) + " runs in f64 and f32; in " + to_string(prec) +
                     " the chunked backward does (chunked or chunked_matmul)");
  if (!fast::supports(p.opt.variant))
    throw InputError("variant " + to_string(p.opt.variant) + " has no chunked backward in " + to_string(prec));
  p.validate();
  const CandidateOutputs g = fast_ours_gradients(p, prec, dout, dden, chunk);
  gradient_slots(p, out, c);
  for (auto [from, to] : {std::pair{&g.dq, &c.dq}, {&g.dk, &c.dk}, {&g.dv, &c.dv}, {&g.dstate, &c.dstate}})
    for (size_t i = 0; i < from->size(); ++i) (*to)[i] = round_to(out, (*from)[i]);
}

}  // namespace hla::engine
