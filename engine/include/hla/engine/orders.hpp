// Our own evaluation orders in a candidate's precision (rule 3's float
// orders, docs/pass-rule.md): what they produce, which of them a problem
// gets, and the forms and fast engine that evaluate them.
#pragma once

#include "hla/batch.hpp"
#include "hla/engine/precision.hpp"
#include "hla/evaluate.hpp"

#include <string>
#include <vector>

namespace hla::engine {

// What a candidate produced, exactly as it produced it (values exact in f64).
struct CandidateOutputs {
  std::vector<double> out;       // [B, H, n, dv]
  std::vector<double> den;       // [B, H, n], or empty when the candidate does not expose it
  DType out_dtype = DType::f32;  // the type `out` was stored in (its rounding is allowed for)
  DType den_dtype = DType::f64;
  // Gradients of the reference's loss (SPEC §9), each empty when not written:
  // dq [B, H, n, d], dk [B, Hkv, n, d], dv [B, Hkv, n, dv].
  std::vector<double> dq{}, dk{}, dv{};  // ({}: aggregate initializers may omit them)
  DType dq_dtype = DType::f64, dk_dtype = DType::f64, dv_dtype = DType::f64;
  // From an initial state: ∂L/∂X0 laid out as BatchProblem::state, the parts
  // given (state.hpp names: S, F, f, …; empty: none; the others are zero) and their dtype.
  std::vector<double> dstate{};
  std::vector<std::string> dstate_parts{};
  DType dstate_dtype = DType::f64;
  // The final state (SPEC §8), laid out as StateReference::values, the parts
  // given (empty: none; the others are zero) and their dtype.
  std::vector<double> final_state{};
  std::vector<std::string> final_state_parts{};
  DType final_state_dtype = DType::f64;
};

// One of our forms on every head and sequence, evaluated in precision `prec`
// (rounding after every operation for bf16/f16; tensor-core ones, tf32, bf16+f32 and
// f16+f32, run as f32), outputs
// rounded to `out`. A paper-literal form when `paper` is set. A problem with
// an initial state: streaming (chunks of one token) and chunked_matmul through
// the fast engine (fast_ours), from the state; other forms InputError.
// log_decay: decay weights as exp of a cumulative sum of log γ (Head::span).
CandidateOutputs ours(const BatchProblem& p, Precision prec, Form f, Index chunk = 64, DType out = DType::f64, bool log_decay = false);
CandidateOutputs ours_paper(const BatchProblem& p, Precision prec, PaperForm f, Index chunk = 64, DType out = DType::f64);

// The FlashAttention-style baseline: our own honest evaluation orders in the
// candidate's precision and class — sequential (streaming recurrence, also with
// every dot product reversed), blocked (chunked matmul form at widths 8, 16,
// 32, 64), tree (Blelloch scan, where its operator only adds and the head is
// small), the literal sums (small heads), and for the state-difference class
// our forms that subtract partial sums; the worst of them sets the bar. With NaN/Inf inputs only the streaming forms (the chunked
// form masks by multiplying with 0, which is not NaN-causal); check() runs the
// baseline on the inputs with NaN/Inf set to 0 instead, which leaves every
// scored element (those that do not depend on them) as it is.
// Decay in log space along each sequence (the fast engine's, fast::set_log_decay):
// b_t, the cumulative sum of log γ, summed in f32 at every step (np.cumsum, a
// loop: exact differences of nearby b, a drift along the sequence) or each
// rounded once from its exact value (torch.cumsum: an error of |b_t|·u/2 at every
// position); none: powers of γ, or the reference library's log_decay.
enum class LogAlong : uint8_t { none, summed, rounded_once };

struct BaselineForm {
  Form form;
  Index chunk = 64;
  // q and k with their feature columns reversed: the same sums with every dot
  // product q·k accumulated in the opposite order.
  bool reversed_features = false;
  // Decay weights as production chunk kernels form them: exp of a cumulative
  // sum of log γ, per chunk (chunked forms) or per sequence (literal forms).
  bool log_decay = false;
  // With log_decay, the sum along the whole sequence in the fast engine's
  // chunked form: a masked-matmul kernel's decays, within chunks of `chunk`.
  LogAlong log_along = LogAlong::none;
  std::string name() const;  // "chunked_matmul/16", "literal (log-space decay)"
};
std::vector<BaselineForm> baseline_forms(const BatchProblem& p, FormClass c = FormClass::masked);
// The orders with decay in log space along each sequence (LogAlong), last in
// baseline_forms and, for gradients, gradient_log_orders: the fast engine's
// chunked form at width 64 and, up to 512 tokens, as one chunk per sequence,
// b summed and rounded once; none where γ = 1, on non-finite inputs, or
// without the engine's chunked form of the variant.
std::vector<BaselineForm> log_along_forms(const BatchProblem& p);

// The same orders at scale: the streaming recurrence and the chunked matmul
// form evaluated by the fast engine's vectorized kernels (hla/fast/), every
// operation rounded to the precision as ours() rounds it, heads in parallel.
// Applies to the variants with a chunked form and finite inputs; check() uses
// it instead of ours() for those forms when a problem is large
// (fast_baseline_wanted), where ours() would take minutes.
bool fast_baseline_applies(const BatchProblem& p, const BaselineForm& f, bool known_finite = false);
CandidateOutputs fast_ours(const BatchProblem& p, Precision prec, const BaselineForm& f, DType out = DType::f64);
// The final state (reference.hpp StateReference) by the same orders
// (streaming as chunks of one token), laid out as BatchProblem::state.
std::vector<double> fast_ours_state(const BatchProblem& p, Precision prec, const BaselineForm& f);
// Rule 3's orders for a final state, named: the streaming recurrence (also
// with reversed features) and the chunked form at widths 8, 16 (reversed),
// 32, 64; for the state-difference class of masked hla2 also F = S·C − G by
// the paper state's streaming recurrence (fast::paper_state_final), in every
// precision and size (none for hla3: rule 3 then does not judge the parts
// whose magnitude that class changes).
std::vector<std::pair<std::string, std::vector<double>>> state_baselines(const BatchProblem& p, Precision prec, FormClass c);

// Σ over heads × sequences of n·d·(d + dv) above 2^24: the golden fixtures and
// small fuzz cases stay with ours() (their verdicts are as before).
bool fast_baseline_wanted(const BatchProblem& p);

// p with q and k's feature columns reversed (and its state permuted alike):
// the same sums with every dot product accumulated in the opposite order (a
// baseline order). reverse_state_features applies the state's permutation
// (its own inverse) to a vector in BatchProblem::state layout.
BatchProblem with_reversed_features(BatchProblem p);
void reverse_state_features(const BatchProblem& p, std::vector<double>& state);

}  // namespace hla::engine
