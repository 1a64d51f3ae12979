// Our own evaluation orders in a candidate's precision (orders.hpp): the
// reference library's forms rounded after every operation, the orders rule 3
// takes for a problem and class, and the transforms they run on.
#include "hla/engine/orders.hpp"

#include "hla/bounds.hpp"
#include "hla/engine/detail.hpp"
#include "hla/engine/reference.hpp"
#include "hla/state.hpp"

#include <algorithm>
#include <cmath>

namespace hla::engine {
namespace {

// The library's forms compute plain f32 where a tensor-core precision rounds its products' operands:
// only the fast engine's chunked form does that (ours()).
InputError operands_not_rounded(Precision prec, const std::string& form_runs) {
  return InputError("in " + to_string(prec) + " (products' operands rounded, sums in f32) our form is chunked_matmul, on finite inputs; " +
                    form_runs + " in f64, f32, bf16 and f16");
}

// Runs eval(head problem in S) on every head and sequence in precision prec.
template <class Eval> CandidateOutputs run_ours(const BatchProblem& p, Precision prec, DType out_dtype, Eval&& eval) {
  CandidateOutputs out{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                       std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), out_dtype, out_dtype};
  auto run = [&](auto tag, Index b, Index h, Index t0, Index t1) {
    using S = decltype(tag);
    const Output<S> o = eval(p.head<S>(b, h, t0, t1));
    for (Index t = t0; t < t1; ++t) {
      out.den[p.den_index(b, h, t)] = round_to(out_dtype, static_cast<double>(o.den(t - t0)));
      for (Index c = 0; c < p.dv; ++c) out.out[p.out_index(b, h, t, c)] = round_to(out_dtype, static_cast<double>(o.out(t - t0, c)));
    }
  };
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    switch (prec) {
      case Precision::f64:
        run(double(), b, h, t0, t1);
        break;
      case Precision::f32:
      case Precision::tf32:  // tensor-core precisions: our orders in f32
      case Precision::bf16_f32:
      case Precision::f16_f32:
        run(float(), b, h, t0, t1);
        break;
      case Precision::bf16:
        run(bf16(), b, h, t0, t1);
        break;
      case Precision::f16:
        run(f16(), b, h, t0, t1);
        break;
    }
  });
  return out;
}

}  // namespace

CandidateOutputs ours(const BatchProblem& p, Precision prec, Form f, Index chunk, DType out, bool log_decay) {
  const bool tc = tensor_core(prec);
  if (tc && f != Form::chunked_matmul) throw operands_not_rounded(prec, "form " + to_string(f) + " runs");
  if (tc || p.has_state()) {
    // The fast engine's orders: the ones that start from an initial state, and whose products round their
    // operands in a tensor-core precision.
    const BaselineForm bf{f, f == Form::chunked_matmul ? chunk : 1, false, log_decay, log_decay ? LogAlong::summed : LogAlong::none};
    if ((f != Form::streaming && f != Form::chunked_matmul) || !fast_baseline_applies(p, bf, false))
      throw tc ? operands_not_rounded(prec, "form " + to_string(f) + " runs")
               : InputError("form " + to_string(f) +
                            " does not start from an initial state (streaming and chunked_matmul do, on finite inputs)");
    return fast_ours(p, prec, bf, out);
  }
  return run_ours(p, prec, out, [&](const auto& head) { return evaluate(head, f, chunk, log_decay); });
}

CandidateOutputs ours_paper(const BatchProblem& p, Precision prec, PaperForm f, Index chunk, DType out) {
  if (p.has_state()) throw InputError("the paper's forms do not start from an initial state");
  if (tensor_core(prec)) throw operands_not_rounded(prec, "the paper's forms run");
  return run_ours(p, prec, out, [&](const auto& head) { return evaluate_paper(head, f, chunk); });
}

std::string BaselineForm::name() const {
  return to_string(form) + (is_chunked(form) ? "/" + std::to_string(chunk) : "") + (reversed_features ? " (features reversed)" : "") +
         (log_along == LogAlong::summed         ? " (log-space decay along the sequence, summed)"
          : log_along == LogAlong::rounded_once ? " (log-space decay along the sequence, rounded once)"
          : log_decay                           ? " (log-space decay)"
                                                : "");
}

BatchProblem with_reversed_features(BatchProblem p) {
  for (auto* x : {&p.q, &p.k})
    for (size_t row = 0; row < x->size(); row += static_cast<size_t>(p.d))
      std::reverse(x->begin() + static_cast<std::ptrdiff_t>(row), x->begin() + static_cast<std::ptrdiff_t>(row) + p.d);
  if (p.has_state()) reverse_state_features(p, p.state);
  return p;
}

void reverse_state_features(const BatchProblem& p, std::vector<double>& state) {
  // The same permutation of the feature index in the state: every member's
  // rows, and the columns of the d × d ones (S, SQ). It is its own inverse.
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  const std::vector<double> x = state;
  size_t at = 0;
  while (at < x.size())
    for (const StatePart& m : layout) {
      const bool square = m.ones.empty();
      for (Index r = 0; r < m.rows; ++r)
        for (Index c = 0; c < m.width(); ++c)
          state[at + static_cast<size_t>(r * m.width() + c)] =
              x[at + static_cast<size_t>((m.rows - 1 - r) * m.width() + (square ? m.width() - 1 - c : c))];
      at += static_cast<size_t>(m.size());
    }
}

bool fast_baseline_wanted(const BatchProblem& p) {
  double work = 0;
  for (const auto& [t0, t1] : p.sequences()) work += static_cast<double>(t1 - t0) * p.d * (p.d + p.dv);
  return work * static_cast<double>(p.batch * p.heads) > 0x1p24;
}

namespace {
// Terms × columns that a flat order of window w (0: the sequence) adds on p:
// every sequence's tokens, each with at most literal_terms(window) terms.
double flat_work(const BatchProblem& p, Index w) {
  double work = 0;
  for (const auto& [t0, t1] : p.sequences()) {
    const Index L = t1 - t0;
    work += static_cast<double>(L) * literal_terms(p.opt, w == 0 ? L : std::min(w, L));
  }
  return work * static_cast<double>(p.batch * p.heads) * static_cast<double>(p.dv + 1);
}
// hla3 at n = 96 (d = dv = 16) is 2^27: 0.11 s in f32, 0.46 s in bf16 (measured 2026-12-05).
constexpr double kFlatWorkBudget = 0x1p28;

// The orders of the flat classes and of decay in log space (issue 37), where
// affordable: they run on the small problems the fuzzer and the golden suite
// make, not at production shapes (there the nested orders of the fast engine).
//   flat:   the literal terms one by one, in the order of the definition and
//           reversed (Form::literal, literal_reversed);
//   flat:W: the chunked form with its intra-chunk terms so added, at width W;
//   γ < 1:  in every class, decay as exp of a cumulative sum of log γ — per
//           chunk in the chunked matmul form (widths 16, 64), per sequence in
//           one chunk (a masked-matmul kernel) and in the flat orders.
void add_flat_and_log_forms(const BatchProblem& p, FormClass cls, std::vector<BaselineForm>& out) {
  const auto fs = forms_of(p.opt.variant);
  auto has = [&](Form f) { return std::find(fs.begin(), fs.end(), f) != fs.end(); };
  const bool log = p.opt.gamma != 1;
  const Index longest = std::max<Index>(longest_sequence(p), 1);
  // Last, consulted only when needed (check.cpp): log_along_forms.
  auto along_sequence = [&] {
    for (const BaselineForm& f : log_along_forms(p)) out.push_back(f);
  };
  if (p.has_state() || fast_baseline_wanted(p)) return along_sequence();
  if (!p.all_finite()) return;
  std::vector<bool> decays{false};
  if (log) decays.push_back(true);
  if (cls.is_flat() && has(Form::literal)) {
    const bool whole = cls.width == 0 || cls.width >= longest;
    if (flat_work(p, whole ? 0 : cls.width) <= kFlatWorkBudget)
      for (bool lg : decays) {
        if (!whole) out.push_back({Form::chunked_pairs, cls.width, false, lg});
        else
          for (Form f : {Form::literal, Form::literal_reversed}) out.push_back({f, 64, false, lg});
      }
  }
  if (log && has(Form::chunked_matmul))
    for (Index w : {Index(16), Index(64), longest}) out.push_back({Form::chunked_matmul, w, false, true});
  along_sequence();
}
}  // namespace

// A masked-matmul kernel's decays exp(b_t − b_j) err by about |b_t|·u: at
// n = 4096, γ = 0.9 an honest torch kernel was 35x our other orders; hla3 at
// n = 300, γ = 1/2, 9.7x with b summed only (2026-12-06).
std::vector<BaselineForm> log_along_forms(const BatchProblem& p) {
  std::vector<BaselineForm> out;
  if (p.opt.gamma == 1 || !p.all_finite()) return out;
  const Index longest = longest_sequence(p);
  for (const Index w : {Index(64), longest})
    if (w == 64 || (w > 64 && w <= 512))  // one chunk costs O(w^order) a chunk: short sequences only
      for (const LogAlong a : {LogAlong::summed, LogAlong::rounded_once}) {
        const BaselineForm f{Form::chunked_matmul, w, false, true, a};
        if (fast_baseline_applies(p, f, true)) out.push_back(f);
      }
  return out;
}

std::vector<BaselineForm> baseline_forms(const BatchProblem& p, FormClass cls) {
  const Options& o = p.opt;
  const auto fs = forms_of(o.variant);
  auto has = [&](Form f) { return std::find(fs.begin(), fs.end(), f) != fs.end(); };
  const bool sd = cls == FormClass::state_difference;
  std::vector<BaselineForm> out{{Form::streaming}, {Form::streaming, 64, true}};
  if (p.has_state()) {
    // From an initial state: the fast engine's orders, which take one (the
    // streaming forms as chunks of width 1, fast_ours).
    for (Index w : {8, 16, 32, 64}) out.push_back({Form::chunked_matmul, w, w == 16});
    add_flat_and_log_forms(p, cls, out);
    return out;
  }
  // Our forms that subtract partial sums (hla2's paper state, hla3_paper's Algorithm 3).
  if (sd)
    for (Form f : {Form::streaming_paper_state})
      if (has(f) && subtracts_partial_sums(o, f)) out.push_back({f});
  if (!p.all_finite()) return out;
  if (has(Form::chunked_matmul))
    for (Index w : {8, 16, 32, 64}) out.push_back({Form::chunked_matmul, w, w == 16});
  // The tree order: every combine of a segment operator costs O(d²(d + dv)),
  // so only where that stays cheap (the blocked and sequential orders bound large problems).
  const Index longest = longest_sequence(p);
  const bool cheap = static_cast<double>(longest) * p.d * p.d * (p.d + p.dv) <= std::ldexp(1.0, 22);
  if (cheap && (sd || !subtracts_partial_sums(o, Form::blelloch))) out.push_back({Form::blelloch});
  // The literal sums (a different order again: every term formed alone) on small heads.
  const int p_order = order_of(o.variant);
  if (std::pow(static_cast<double>(longest), p_order + 1) * p.d <= std::ldexp(1.0, 27)) out.push_back({Form::naive});
  add_flat_and_log_forms(p, cls, out);
  return out;
}

}  // namespace hla::engine
