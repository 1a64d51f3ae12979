// The reference a candidate is judged against (SPEC §7): outputs evaluated in
// ≥ 113 bits from the candidate's exact inputs, rounded to f64, with per-element
// magnitudes and flags. A fixture file stores exactly this.
//
// One interface: compute_reference(problem, ReferenceOptions) is "the
// reference of this problem with certified error ≤ x"; which engine computes
// a head is a policy behind it, never the caller's choice:
//   1. exact rationals for heads up to exact_max_n tokens (d, dv ≤ 16, finite
//      inputs, cheap options): every element the correctly rounded exact value;
//   2. else the double-double engine (hla/fast/, chunked matmul form, heads in
//      parallel), each element certified from its running error bound;
//   3. binary128 for what it does not certify (the head's prefix, where cheap:
//      recompute_work), for heads it cannot take and for NaN/Inf inputs.
// What each element carries (Flag): clear — its f64 value is the correctly
// rounded exact value (error ≤ half an ulp); kUncertified — within the
// engine's own bound plus its f64 rounding (binary128: 2^-112·K·M, K the
// depth bound, M the magnitude; the double-double engine's running bound,
// Reference::bits 106), not proven correctly rounded; kIllConditioned (with
// kUncertified) — den ⊕ ε not bounded away from the pole. Gradients alike:
// gradient_reference.hpp.
#pragma once

#include "hla/batch.hpp"
#include "hla/engine/precision.hpp"
#include "hla/evaluate.hpp"
#include "hla/parallel.hpp"  // worker_threads: the engines and checker share it

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace hla::engine {

enum Flag : uint8_t {
  kUncertified = 1,     // the f64 value may not be the correctly rounded exact value (cancellation)
  kIllConditioned = 2,  // normalized output: den ⊕ ε not bounded away from the pole
};

// Gradients (SPEC §9) of L = Σ ⟨do, o⟩ + Σ dden·den: the upstream and the
// reference ∂L/∂q, ∂L/∂k, ∂L/∂v rounded to f64, with the magnitudes of their
// defining sums (backward_magnitude; k and v gradients summed over the query
// heads of each group) and Flag bits. See check/gradient.hpp.
struct GradientReference {
  std::vector<double> dout;                           // [B, H, n, dv]
  std::vector<double> dden;                           // [B, H, n], or empty (zero)
  std::vector<double> dq, mag_dq;                     // [B, H, n, d]
  std::vector<double> dk, mag_dk;                     // [B, Hkv, n, d]
  std::vector<double> dv, mag_dv;                     // [B, Hkv, n, dv]
  std::vector<uint8_t> dq_flags, dk_flags, dv_flags;  // sized like the values
  // From an initial state (else empty): ∂L/∂X0 laid out as BatchProblem::state
  // (per sequence and query head), its magnitude (|X0| counts as an input) and flags.
  std::vector<double> dstate, mag_dstate;
  std::vector<uint8_t> dstate_flags;
  int bits = 113;  // 0: every head exact (rationals)
  size_t uncertified = 0;
};

// The final state (SPEC §8): the state after each sequence's last token, laid
// out as BatchProblem::state (every (sequence, query head), its members in
// layout order, hla/state.hpp), rounded to f64 with flags as the outputs; its
// SPEC §7 magnitude (the recurrence over absolute values); and mag_sd, the
// magnitude a state-difference kernel is judged against (masked hla2 and hla3:
// F and f, formed as a product of unmasked members minus G; else = mag).
// Empty for a variant without a state.
struct StateReference {
  std::vector<double> values, mag, mag_sd;
  std::vector<uint8_t> flags;
};

struct Reference {
  std::vector<double> out;      // [B, H, n, dv]  num, or num/(den ⊕ ε) when normalized
  std::vector<double> num;      // [B, H, n, dv]  num (= out unless normalized): residual scoring
  std::vector<double> den;      // [B, H, n]
  std::vector<double> mag_num;  // [B, H, n, dv] SPEC §7 magnitude of num
  std::vector<double> mag_den;  // [B, H, n]     magnitude of den
  // The magnitudes a state-difference algorithm is judged against (SPEC §7
  // evaluation classes): the unmasked-order magnitude for masked hla2 and
  // hla3, the same as mag_num / mag_den for every other problem.
  std::vector<double> mag_num_sd;  // [B, H, n, dv]
  std::vector<double> mag_den_sd;  // [B, H, n]
  std::vector<uint8_t> flags;      // [B, H, n, dv] Flag bits of out
  std::vector<uint8_t> den_flags;  // [B, H, n] Flag bits of den
  // Precision behind the values (0 = exact): 113 when every element is either
  // certified correctly rounded or was evaluated in binary128; 106 when some
  // uncertified element comes from the double-double engine.
  int bits = 113;
  // The gradients, when the fixture (or the caller) has upstream gradients.
  std::optional<GradientReference> grad;
  StateReference final_state;
  // How it was computed (not stored in fixtures): heads × sequences by each path.
  struct Stats {
    size_t heads = 0, exact = 0, fast = 0, binary128 = 0, recomputed = 0;  // recomputed: fast, then a prefix in binary128
    size_t elements = 0, uncertified = 0;                                  // out and den elements; those flagged not certified
  } stats;
};

// The one exact-reference threshold: heads up to this long (and d, dv ≤ 16)
// get exact rationals by default, in every interface (hla ref/check/fuzz,
// hla_oracle.reference/check/fuzz: EXACT_MAX_N).
inline constexpr Index kExactMaxN = 48;

// How compute_reference works.
struct ReferenceOptions {
  Index exact_max_n = kExactMaxN;  // exact rationals for heads up to this long (and d, dv ≤ 16)
  double max_seconds = 0;          // > 0: InputError once this much time has passed
  // The double-double engine for heads that exact rationals do not take (else
  // binary128 streaming). Where it leaves elements uncertified, the head's
  // prefix up to the last of them is recomputed in binary128 if that costs at
  // most recompute_work (tokens · d · (d + dv): 2^22 is about half a second), else they stay flagged.
  bool fast = true;
  Index chunk = 64;
  // Heads above this much work (tokens · d · (d + dv)) take their magnitudes
  // from the double engine (fast_reference.hpp); below, double-double.
  double double_magnitudes_above = 0x1p22;
  double recompute_work = 0x1p22;
  // Where exact rationals would serve: the engine first, and exact rationals
  // only for a head where it leaves an element uncertified. The values are the same (the
  // exact ones rounded), the magnitudes within a rounding, and the state-
  // difference ones upper bounds within K·2^-52 (the fuzzer: 5–10× faster).
  bool engine_first = false;
  bool final_state = true;  // false: Reference::final_state left empty (compute_state_reference when needed)
  int threads = 0;          // 0: every core (HLA_THREADS in the environment overrides)
  // Called from one thread at a time with the work done and the total (for progress bars).
  std::function<void(double done, double total)> progress;
};

// A priori bound, in units of u·magnitude, on the error of any algorithm that
// evaluates the defining sum in precision u by adding (not cancelling) its
// terms: every term passes at most K roundings — p dot products of length d,
// p+1 nested prefix sums of length ≤ n, and a few products and decays —
// K = (p + 1)(n + d) + 16, with p the order.
double depth_bound(Variant v, Index n, Index d);

// The most literal terms of the §2 sum that one output element adds when its
// tokens lie in a window of w: la1 w, hla2 and ahla w(w+1)/2 (unmasked hla2 w²),
// masked hla3 w(w+1)(2w+1)/6 (unmasked w³), plus w ridge terms (hla2, λ > 0).
double literal_terms(const Options& o, Index w);

// K of an evaluation class (SPEC §7, docs/pass-rule.md): the longest rounding
// path one term can take in any kernel of the class, in units of u.
//   masked, state_difference: depth_bound (nested sums);
//   flat:W: the same plus literal_terms(min(W, n)): a flat sum of T terms in
//     any order or association puts at most T − 1 roundings on one term's path;
//   flat: flat:n.
// Every class with γ < 1 adds (p+1)·n for the multiplications by γ along the
// nested prefix sums, p·n for γ rounded to the precision (γ^e, e ≤ p·n), and
// p·(|log γ|·n·(n+2) + 2) for decay computed in log space, exp(Σ log γ) as
// chunk kernels compute it, with the cumulative sum over the whole sequence
// (the longest span): its rounding errs the exponent of a weight γ^(t−j) by at
// most |log γ|·(t−j)·(n+2)·u (p = order).
double depth_bound(const Options& o, Index n, Index d, FormClass c);

// How much longer a flat class's longest rounding path is than the nested one:
// 1 + literal_terms(min(W, n)) / depth_bound(v, n, d) (1 for the other classes).
// Where no flat order of ours is affordable (long heads; gradients), rule 3's
// bar is our nested orders' worst times this: a flat sum's error grows with
// its path at most in proportion, so the bar holds what the flat orders would
// set and still fails a kernel far beyond every honest order.
double flat_path_ratio(const Options& o, Index n, Index d, FormClass c);

// Exact rationals (then certified) when every head is small (n ≤ exact_max_n,
// d, dv ≤ 16), the inputs finite and the options short (exact_options_cheap),
// else the double-double engine (fast_reference.hpp; heads in parallel), with
// binary128 for what it leaves uncertified (see ReferenceOptions), and
// binary128 through the streaming form for inputs with NaN/Inf, where a NaN/Inf
// input reaches exactly the outputs that depend on it (SPEC §7). Problem validated first
// (InputError). max_seconds > 0: InputError once that much time has passed
// (checked between heads; every head's work is bounded by the shape limits).
Reference compute_reference(const BatchProblem& p, Index exact_max_n = kExactMaxN, double max_seconds = 0);
Reference compute_reference(const BatchProblem& p, const ReferenceOptions& opt);
// Whether exact rational evaluation stays cheap: gamma of at most 128 bits
// (numerator + denominator; it is raised to the power 3n), the other options 256.
bool exact_options_cheap(const Options& o);
// The policy above: every head of p takes exact rationals (outputs and final state alike).
bool exact_applies(const BatchProblem& p, Index exact_max_n);

// One head's sequence [t0, t1) of batch entry b by the streaming form in S
// (Rational, f113, double), from p's initial state when it has one: its
// values, its SPEC §7 magnitude and (with_sd) the unmasked-order magnitude a
// state-difference algorithm is judged against (else = magnitude). With a
// state, the latter adds the masked magnitude to the unmasked-order one of the
// members both states share (an unmasked-only member, hla3's SQ, counts as zero).
template <class S> struct SequenceValues { Output<S> values, magnitude, sd_magnitude; };
// Without values (with_values false) it computes only what the state-difference
// magnitude needs: values and, without a state, magnitude are left empty.
template <class S>
SequenceValues<S> evaluate_sequence(const BatchProblem& p, Index b, Index h, Index t0, Index t1, bool with_sd, bool with_values = true);

// Whether a state-difference algorithm forms larger terms than a masked one on
// this problem (masked hla2 and hla3): then Reference::mag_*_sd differ.
bool has_state_difference_magnitude(const Options& o);

// Fills ref.mag_num_sd / mag_den_sd from the inputs: the unmasked-order
// magnitude in double, rounded up by its own a priori error bound (cheap: one
// streaming pass over absolute values).
void fill_state_difference_magnitude(const BatchProblem& p, Reference& ref);

// p on absolute values (inputs, state, scale, λ), unnormalized: its outputs and
// final state are p's SPEC §7 magnitudes.
BatchProblem abs_problem_of(BatchProblem p);
// The final state's reference: exact rationals where compute_reference takes
// them, else the double-double engine's carry (certified from its running
// bound) on large finite heads, else binary128; then its mag_sd. engine_first
// (campaigns): the engine's carry on every finite head whose entries it all
// certifies, the above for the others.
StateReference compute_state_reference(const BatchProblem& p, Index exact_max_n = kExactMaxN, bool engine_first = false);
// The final state in double for verifying a stored one (check::verify_fixture):
// the fast engine's carry where it applies (finite inputs), else the streaming
// recurrence (binary128 where double overflows); tol: the most a stored f64
// reference (or magnitude) may differ from values (mag), its a priori or
// running bound plus two roundings.
struct StateCheck {
  std::vector<double> values, mag, tol;
};
StateCheck double_final_state(const BatchProblem& p);
// Fills s.mag_sd from the inputs and s.mag (in double, rounded up).
void fill_state_difference_state_magnitude(const BatchProblem& p, StateReference& s);

// Completes a Reference that lacks what format 1 fixtures and hand-built
// references do not carry: num (from the rounded quotient out·(den ⊕ ε),
// within 2 ulp, when normalized) and the state-difference magnitudes.
void complete_reference(const BatchProblem& p, Reference& ref);
bool is_complete(const Reference& ref);

}  // namespace hla::engine
