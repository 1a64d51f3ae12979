// The reference gradients (SPEC §9) of a problem's loss L = Σ ⟨do, o⟩ +
// Σ dden·den, certified per element like the outputs, the a priori bound that
// certifies them and that a candidate's gradients are judged by, and our own
// backward orders in a candidate's precision (rule 3).
//
// The bound (derivation in SPEC §9, "Judging gradients"). A gradient element is
// a sum of terms (the naive gradient: each term of SPEC §2 differentiated
// factor by factor, times the upstream ∂L/∂Y_t of its output token t). Along
// one term's path: the forward's depth K_f = depth_bound (p dot products of
// length d, p+1 nested token sums), plus the contraction ⟨∂L/∂Y_t, v_j⟩ over
// the dv+1 columns: K_b = K_f + dv + 1. Without normalize ∂L/∂Y is the exact
// upstream, so a backward that adds terms errs by ≤ K_b·u·M_g (M_g the
// magnitude: backward_magnitude). With normalize ∂L/∂Y = [do/D | dden −
// ⟨do, num⟩/D²] is computed from the kernel's own num, den (error ≤ K_f·u·M̃,
// M̃ the magnitude of its class), through ⟨do, num⟩ (dv), two divisions and a
// subtraction: K_q = K_f + dv + 4 roundings, and 1/D, 1/D² amplify den's
// error. With δ_t = K_f·u·M̃_den,t/|D_t| (den's relative error bound), per output
// token t: κ_t = ρ_t + (2−δ_t)/(1−δ_t)²·M̃_den,t/|D_t|, ρ_t = max_c M̃_num,t,c /
// M_num,t,c (1 for the masked class; the second term is 0 where a clamp holds
// D at ±ε); then ∂L/∂Y_t errs by ≤ K_f·u·κ_t of its magnitude (to every order
// while δ_t < 1/2), and |error| ≤ u·(K_b + K_q·κ_x)·M_g, κ_x = the largest κ_t
// over the tokens t ≥ x of the element's sequence (token x's gradients depend
// on ∂L/∂Y_t for t ≥ x only) and, for dk and dv, over the query heads of the
// group. Elements that depend on a token with δ_t ≥ 1/2, or, clamped, with
// |den| within its bound of 0 or ε (the sign or the branch of D), are
// ill-conditioned: not scored, not certified.
#pragma once

#include "hla/backward.hpp"
#include "hla/engine/orders.hpp"
#include "hla/engine/reference.hpp"

#include <string>
#include <utility>
#include <optional>
#include <vector>

namespace hla::engine {

// K_b = depth_bound + dv + 1: the backward's depth without normalize.
double backward_depth_bound(Variant v, Index n, Index d, Index dv);
// K_q = depth_bound + dv + 4: the upstream ∂L/∂Y of a normalized problem.
double quotient_depth_bound(Variant v, Index n, Index d, Index dv);
// K_g = K_b (+ K_q with normalize): every scored gradient element has score ≤ K_g + 1.
double gradient_depth_bound(const Options& o, Index n, Index d, Index dv);

// Per element of dq ([B,H,n,d] → one value per (b, h, t)) and of dk, dv
// (per (b, Hkv head, t)): the factor (K_b + K_q·κ_x) / K_g ≥ 1 by which the
// magnitude is scaled (1 without normalize), or +inf where ill-conditioned.
// From the forward reference's den, num's magnitude and the magnitudes of the
// given class (mnum_err, mden_err: what the forward's error scales with), with the
// forward's error bound K_f·u per unit magnitude.
// An initial state's gradient depends on ∂L/∂Y_t of every token of its
// sequence: its factor is the largest over the sequence (that of its first token).
struct GradientScale {
  std::vector<double> q;      // [B, H, n]
  std::vector<double> kv;     // [B, Hkv, n]
  std::vector<double> state;  // [sequences, H]: dstate of (sequence, query head)
};
GradientScale gradient_scale(const BatchProblem& p, const std::vector<double>& den, const std::vector<double>& mag_num,
                             const std::vector<double>& mnum_err, const std::vector<double>& mden_err, double u);

// The reference gradients for upstream dout [B,H,n,dv] and dden [B,H,n] (or
// empty: zero), given the problem's forward reference: exact rationals when
// the forward was exact (every head small), else the double-double engine
// (below), or binary128 by the streaming backward where the engine cannot
// (a pole it cannot exclude, overflow), an element certified when every value
// within 2·2^-113·(K_b + K_q·κ_x)·M_g rounds to the same double (flagged
// otherwise; 2: slack for the bound's own rounding, as the forward's). Throws InputError
// for a variant without a backward, non-finite inputs or upstream, or
// upstream values not representable in the problem's dtype.
// Heads that exact rationals do not take go through the double-double
// engine's backward (fast/backward.hpp; heads × sequences in parallel), each
// element certified from the engine's running bound and the bound of the
// normalized upstream; a task (batch entry, K/V head, sequence) with an
// uncertified element is recomputed in binary128 when that costs at most
// recompute_work (tokens · d · (d + dv) · group), else the elements stay flagged.
struct GradientOptions {
  bool fast = true;
  Index chunk = 64;
  double recompute_work = 0x1p22;
};
GradientReference compute_gradient_reference(const BatchProblem& p, const Reference& forward, std::vector<double> dout,
                                             std::vector<double> dden, const GradientOptions& opt = {});

// Our backward form `form` (chunk width `chunk`) evaluated in precision prec
// on every group and sequence, rounded to `out`, into c.dq, c.dk, c.dv (and
// c.dstate): what a correct kernel's backward writes (hla eval --grad). f64:
// in double; f32 and the tensor-core precisions: in float; bf16, f16: the chunked forms only, by
// fast_ours_gradients (every operation rounded). InputError otherwise.
void ours_gradients(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, BackwardForm form, Index chunk,
                    DType out, CandidateOutputs& c, Precision prec = Precision::f64);

// Our backward form in precision prec at scale: the fast engine's chunked
// backward with chunk width `chunk` (engine/src/fast/gradient_baseline.cpp), the
// normalized upstream formed from its own forward in that precision; dq, dk,
// dv and (from a state) dstate, as a candidate's; `along`: decay in log space
// along each sequence (fast::set_log_decay).
CandidateOutputs fast_ours_gradients(const BatchProblem& p, Precision prec, const std::vector<double>& dout,
                                     const std::vector<double>& dden, Index chunk, LogAlong along = LogAlong::none);

// Rule 3's yardsticks for gradients: our own backward forms in precision prec
// (gradient_orders.cpp), named.
// With `masked_done` (the masked class's orders, already evaluated: a class
// hint's second judgement), only the orders the class adds are evaluated and
// those are moved in after them.
std::vector<std::pair<std::string, CandidateOutputs>> gradient_baselines(
    const BatchProblem& p, const GradientReference& g, Precision prec, FormClass cls,
    std::vector<std::pair<std::string, CandidateOutputs>>* masked_done = nullptr);
// Rule 3's gradient orders with decay in log space along each sequence (the
// fast engine's chunked backward, fast::set_log_decay), apart from
// gradient_baselines: their error grows with the sequence, so the check
// consults them only where a row fails rule 3 without them. Width 64, and one
// chunk per sequence (a masked-matmul kernel's shape) up to 512 tokens, b
// summed and rounded once (LogAlong); none
// where γ = 1 or the engine has no chunked form of the variant.
std::vector<std::pair<std::string, CandidateOutputs>> gradient_log_orders(const BatchProblem& p, const GradientReference& g,
                                                                          Precision prec);

// hla2's state-difference backward (the reverse of the paper-state recurrence,
// S·C − G; gradient_paper_state.cpp) in double (f64), float (f32, tensor-core), bf16
// or f16 (every operation rounded), from an initial state too (dstate:
// ∂L/∂X0 in p.state's layout): rule 3's subtracting order for the
// state-difference class.
CandidateOutputs paper_state_gradients(const BatchProblem& p, Precision prec, const std::vector<double>& dout,
                                       const std::vector<double>& dden);

}  // namespace hla::engine
