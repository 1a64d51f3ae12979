// The catalog of known mistakes (docs/pass-rule.md#differential-diagnosis):
// one row each, its wrong form evaluated in double on a failing check's
// inputs. Where a mistake is a change of the inputs or options (scale
// missing: scale 1; q and k swapped: the inputs swapped; the mask missing:
// unmasked), the row changes them and runs our own streaming form, so that no
// algebra is written twice; catalog_forms.cpp and catalog_backward.cpp hold
// the few truly new forms. Rows compare the outputs, the gradients or the
// final state; a precision row judges the reference at a coarser precision; a
// continuation row runs only on the fuzzer's state-continuation checks, whose
// split points it takes. Adding a row: one entry below plus its evaluation.
#include "catalog.hpp"

#include "catalog_forms.hpp"
#include "hla/bounds.hpp"
#include "hla/engine/gradient_reference.hpp"

#include <algorithm>
#include <cmath>

namespace hla::check {
namespace catalog_rows {

using engine::ours;
using engine::ours_paper;
using Forms = std::vector<WrongForm>;

CandidateOutputs f64(const BatchProblem& q) { return ours(q, Precision::f64, Form::streaming, 64, DType::f64); }
Forms one(CandidateOutputs c) { return {{"", std::move(c)}}; }
// p changed by `change`, by our streaming form; its magnitudes: the same
// on the absolute values of the changed inputs, unnormalized.
// `after`: what the kernel does to the outputs (a layout it writes them in).
template <class F, class G = void (*)(CandidateOutputs&)>
Forms changed(
    BatchProblem p, F&& change, G after = [](CandidateOutputs&) {}) {
  change(p);
  Forms f{{"", f64(p), f64(engine::abs_problem_of(p))}};
  after(f[0].values), after(f[0].magnitude);
  return f;
}
bool hla2_masked(const BatchProblem& p) { return p.opt.variant == Variant::hla2 && p.opt.masked; }
bool decayed(const BatchProblem& p) { return p.opt.gamma != 1; }
bool plain(const BatchProblem& p) { return !p.has_state(); }

// The chunk widths a width search tries: 4, 8, …, 256, below the longest sequence.
std::vector<Index> widths(const BatchProblem& p) {
  std::vector<Index> w;
  for (Index x = 4; x <= 256 && x < longest_sequence(p); x *= 2) w.push_back(x);
  return w;
}
// The forms of widths w, named by them ("/16").
Forms by_width(const std::vector<Index>& w, std::vector<CandidateOutputs> c) {
  Forms out;
  for (size_t i = 0; i < w.size(); ++i) out.push_back({"/" + std::to_string(w[i]), std::move(c[i])});
  return out;
}
template <class F> Forms per_width(const BatchProblem& p, F&& eval) {
  std::vector<CandidateOutputs> c;
  for (Index w : widths(p)) c.push_back(eval(w));
  return by_width(widths(p), std::move(c));
}

// Outputs num / N(den) from the reference's num and den (the normalization mistakes).
template <class N> Forms renormalized(const BatchProblem& p, const Reference& ref, N&& norm) {
  CandidateOutputs c{ref.num, ref.den, DType::f64, DType::f64};
  for (size_t i = 0; i < c.out.size(); ++i) c.out[i] = ref.num[i] / norm(ref.den[i / static_cast<size_t>(p.dv)]);
  return one(std::move(c));
}
double eps_of(const BatchProblem& p) { return to_double(p.opt.eps); }

// Each sequence's rows moved one token later (the first gets zeros): x_{j−1} for x_j.
void shift_rows(const BatchProblem& p, std::vector<double>& x, Index lead, Index cols) {
  const std::vector<double> y = x;
  for (Index l = 0; l < lead; ++l)
    for (const auto& [t0, t1] : p.sequences())
      for (Index t = t0; t < t1; ++t)
        for (Index c = 0; c < cols; ++c)
          x[static_cast<size_t>((l * p.n + t) * cols + c)] = t == t0 ? 0.0 : y[static_cast<size_t>((l * p.n + t - 1) * cols + c)];
}

// A [B, heads, n, cols] buffer read as if laid out [B, n, heads, cols]: what
// a kernel that takes the other layout computes on (and writes back).
std::vector<double> as_bthd(const std::vector<double>& x, Index batch, Index heads, Index n, Index cols, bool inverse) {
  std::vector<double> y(x.size());
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h)
      for (Index t = 0; t < n; ++t)
        for (Index c = 0; c < cols; ++c) {
          const size_t ours_at = static_cast<size_t>(((b * heads + h) * n + t) * cols + c);
          const size_t theirs = static_cast<size_t>(((b * n + t) * heads + h) * cols + c);
          (inverse ? y[theirs] : y[ours_at]) = x[inverse ? ours_at : theirs];
        }
  return y;
}

// Query head h given K/V head h % kv_heads: a problem with a K/V head per query head.
BatchProblem gqa_modulo(BatchProblem p) {
  const Index H = p.heads, K = p.kv_heads;
  auto spread = [&](const std::vector<double>& x, Index cols) {
    std::vector<double> y(static_cast<size_t>(p.batch * H * p.n * cols));
    for (Index b = 0; b < p.batch; ++b)
      for (Index h = 0; h < H; ++h)
        std::copy_n(x.begin() + ((b * K + h % K) * p.n) * cols, p.n * cols, y.begin() + ((b * H + h) * p.n) * cols);
    return y;
  };
  p.k = spread(p.k, p.d), p.v = spread(p.v, p.dv), p.kv_heads = H;
  return p;
}

// Every sequence cut into independent pieces of w tokens (the state not carried across chunks).
CandidateOutputs chunks_alone(const BatchProblem& p, Index w) {
  CandidateOutputs all{std::vector<double>(p.batch * p.heads * p.n * p.dv), std::vector<double>(p.batch * p.heads * p.n), DType::f64,
                       DType::f64};
  for (Index b = 0; b < p.batch; ++b) {
    BatchProblem e = p;
    e.batch = 1;
    auto entry = [&](const std::vector<double>& x, Index heads, Index cols) {
      const auto at = x.begin() + b * heads * p.n * cols;
      return std::vector<double>(at, at + heads * p.n * cols);
    };
    e.q = entry(p.q, p.heads, p.d), e.k = entry(p.k, p.kv_heads, p.d), e.v = entry(p.v, p.kv_heads, p.dv);
    e.offsets.clear();
    for (const auto& [t0, t1] : p.sequences())
      for (Index t = t0; t < t1; t += w) e.offsets.push_back(t);
    e.offsets.push_back(p.n);
    const CandidateOutputs c = f64(e);
    std::copy(c.out.begin(), c.out.end(), all.out.begin() + b * p.heads * p.n * p.dv);
    std::copy(c.den.begin(), c.den.end(), all.den.begin() + b * p.heads * p.n);
  }
  return all;
}

// The reference with each sequence's ragged last chunk (beyond a multiple of w) left at 0.
CandidateOutputs ragged_dropped(const BatchProblem& p, const Reference& ref, Index w) {
  CandidateOutputs c{ref.out, ref.den, DType::f64, DType::f64};
  for (Index bh = 0; bh < p.batch * p.heads; ++bh)
    for (const auto& [t0, t1] : p.sequences())
      for (Index t = t0 + (t1 - t0) / w * w; t < t1; ++t) {
        c.den[static_cast<size_t>(bh * p.n + t)] = 0;
        std::fill_n(c.out.begin() + (bh * p.n + t) * p.dv, p.dv, 0.0);
      }
  return c;
}

// Gradients of p (changed) from the reference's upstream, by our streaming backward.
// A NaN/Inf upstream (a NaN-causality probe) reaches only unscored elements: evaluated as 0.
CandidateOutputs grads(const BatchProblem& p, std::vector<double> dout, std::vector<double> dden) {
  for (auto* x : {&dout, &dden})
    for (double& e : *x)
      if (!std::isfinite(e)) e = 0;
  CandidateOutputs c;
  engine::ours_gradients(p, dout, dden, BackwardForm::streaming, 64, DType::f64, c);
  return c;
}
bool has_grad(const BatchProblem& p, const Reference& r) { return r.grad && !r.grad->dout.empty() && plain(p); }
// The reference's values (c) judged at f16, then bf16 (catalog.hpp WrongForm::judged_at; the first that matches names it).
Forms at_low_precision(const CandidateOutputs& c) { return {{"/f16", c, {}, Precision::f16}, {"/bf16", c, {}, Precision::bf16}}; }

// p's tokens in the ranges given per sequence (one per p.sequences(), in order), as sequences of their own.
BatchProblem with_tokens(const BatchProblem& p, const std::vector<std::pair<Index, Index>>& ranges) {
  BatchProblem s = p;
  s.n = 0, s.offsets.clear();
  for (const auto& [t0, t1] : ranges) {
    if (!p.offsets.empty() && s.offsets.empty()) s.offsets.push_back(0);
    s.n += t1 - t0;
    if (!p.offsets.empty()) s.offsets.push_back(s.n);
  }
  s.resize_buffers();
  s.state = p.state;
  for (Index b = 0; b < p.batch; ++b) {
    Index to = 0;
    for (const auto& [t0, t1] : ranges)
      for (Index t = t0; t < t1; ++t, ++to)
        for (Index h = 0; h < p.heads; ++h) {
          for (Index c = 0; c < p.d; ++c) s.q[s.q_index(b, h, to, c)] = p.q[p.q_index(b, h, t, c)];
          for (Index c = 0; c < p.d; ++c) s.k[s.k_index(b, h, to, c)] = p.k[p.k_index(b, h, t, c)];
          for (Index c = 0; c < p.dv; ++c) s.v[s.v_index(b, h, to, c)] = p.v[p.v_index(b, h, t, c)];
        }
  }
  return s;
}

// Final-state rows: where p has one to compare, every sequence of ≥ 1 token.
bool final_state_row(const BatchProblem& p, const Reference& r) {
  const auto seqs = p.sequences();
  return !r.final_state.values.empty() && std::all_of(seqs.begin(), seqs.end(), [](const auto& s) { return s.second > s.first; });
}
// The final state one token before each sequence's end (its last token
// dropped; a sequence of one token: its initial state).
std::vector<double> state_before_last(const BatchProblem& p) {
  std::vector<std::pair<Index, Index>> r;
  for (const auto& [t0, t1] : p.sequences()) r.emplace_back(t0, t1 - (t1 - t0 > 1));
  std::vector<double> x = engine::double_final_state(with_tokens(p, r)).values;
  const size_t block = x.size() / static_cast<size_t>(p.sequence_count());  // one sequence's heads
  const auto seqs = p.sequences();
  for (Index s = 0; s < p.sequence_count(); ++s) {
    const auto [t0, t1] = seqs[static_cast<size_t>(p.offsets.empty() ? 0 : s)];
    if (t1 - t0 > 1) continue;
    const auto at = x.begin() + static_cast<long>(static_cast<size_t>(s) * block);
    if (p.has_state()) std::copy_n(p.state.begin() + static_cast<long>(static_cast<size_t>(s) * block), block, at);
    else std::fill_n(at, block, 0.0);
  }
  return x;
}
// One form per member of the state layout that `pick` takes: the reference's
// final state with change(values, before, first entry, member) applied to that member of every (sequence, head).
template <class Pick, class Change> Forms per_member(const BatchProblem& p, const Reference& r, Pick&& pick, Change&& change) {
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  const std::vector<double> before = state_before_last(p), &end = r.final_state.values;
  Forms f;
  size_t at = 0;
  for (const StatePart& m : layout) {
    if (pick(m)) {
      CandidateOutputs c;
      c.final_state = end;
      for (size_t block = 0; block < end.size(); block += static_cast<size_t>(state_size(layout)))
        change(c.final_state, before, block + at, m);
      f.push_back({"/" + (m.ones.empty() ? m.name : m.name + "|" + m.ones), std::move(c)});
    }
    at += static_cast<size_t>(m.size());
  }
  return f;
}

// A continuation check's parts of every sequence: [t0, m) and [m, t1) (CheckOptions::continuation_splits).
using Ranges = std::vector<std::pair<Index, Index>>;
std::pair<Ranges, Ranges> parts_at(const BatchProblem& p, const std::vector<Index>& splits) {
  Ranges first, second;
  const Ranges seqs = p.sequences();
  if (splits.size() != seqs.size()) throw InputError("continuation splits do not fit the sequences");
  for (size_t i = 0; i < seqs.size(); ++i) first.emplace_back(seqs[i].first, splits[i]), second.emplace_back(splits[i], seqs[i].second);
  return {first, second};
}
// The rows in rs of x ([lead][n][cols]), as with_tokens lays them out; put_rows: back.
std::vector<double> rows_in(const std::vector<double>& x, Index lead, Index n, const Ranges& rs, Index cols) {
  std::vector<double> y;
  for (Index l = 0; l < lead && !x.empty(); ++l)
    for (const auto& [t0, t1] : rs) y.insert(y.end(), x.begin() + (l * n + t0) * cols, x.begin() + (l * n + t1) * cols);
  return y;
}
void put_rows(std::vector<double>& x, const std::vector<double>& y, Index lead, Index n, const Ranges& rs, Index cols) {
  auto from = y.begin();
  for (Index l = 0; l < lead; ++l)
    for (const auto& [t0, t1] : rs) {
      std::copy_n(from, (t1 - t0) * cols, x.begin() + (l * n + t0) * cols);
      from += (t1 - t0) * cols;
    }
}
// The second parts from the state the first leave (f64), changed by `change`.
template <class F> BatchProblem second_part(const BatchProblem& p, const std::vector<Index>& splits, F&& change) {
  const auto [first, second] = parts_at(p, splits);
  BatchProblem p2 = with_tokens(p, second);
  p2.state = engine::double_final_state(with_tokens(p, first)).values, p2.state_dtype = DType::f64;
  change(p2.state);
  return p2;
}
bool continues(const BatchProblem& p, const Reference&) { return plain(p) && info(p.opt.variant).has_state; }
// The reference's gradients with the first parts' rows from g (laid out as with_tokens(p, first)).
CandidateOutputs first_parts_from(const BatchProblem& p, const Reference& r, const Ranges& first, const CandidateOutputs& g) {
  CandidateOutputs c;
  c.dq = r.grad->dq, c.dk = r.grad->dk, c.dv = r.grad->dv;
  put_rows(c.dq, g.dq, p.batch * p.heads, p.n, first, p.d);
  put_rows(c.dk, g.dk, p.batch * p.kv_heads, p.n, first, p.d);
  put_rows(c.dv, g.dv, p.batch * p.kv_heads, p.n, first, p.dv);
  return c;
}

const std::vector<Mistake> kCatalog = {
    // The paper as printed (SPEC §6).
    {"E1", false, "hla2's G decayed as the paper prints it: G_t = γG_{t−1} + k_tk_tᵀC_{t−1} (SPEC §6 E1)",
     "G_t = γ²G_{t−1} + γ·k_t(k_tᵀC_{t−1}) (SPEC §3)",
     [](const BatchProblem& p, const Reference&) { return hla2_masked(p) && decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) { return one(ours_paper(p, Precision::f64, PaperForm::E1_hla2_streaming)); }},
    {"E2", false, "hla2 summaries combined by the paper's G = ρ_B G_A + G_B + S_B(ρ_B C_A) (SPEC §6 E2)", "ρ_B² on G_A (SPEC §4)",
     [](const BatchProblem& p, const Reference&) { return hla2_masked(p) && decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) {  // as a scan of tokens, and as the carry between chunks of W
       Forms f = one(ours_paper(p, Precision::f64, PaperForm::E2_hla2_scan));
       for (WrongForm& x : per_width(p, [&](Index w) { return hla2_e2_chunk_carry(p, w); })) f.push_back(std::move(x));
       return f;
     }},
    {"E3", false, "ahla's R decayed in the concatenation, ρ_B R_A + R_B (SPEC §6 E3)", "R undecayed, cross term ρ_B R_B P_A (SPEC §4)",
     [](const BatchProblem& p, const Reference&) { return p.opt.variant == Variant::ahla && decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) { return one(ours_paper(p, Precision::f64, PaperForm::E3_ahla_scan)); }},
    {"E4", false, "hla3 by the paper's S^K S^Q P − G⁽¹⁾ − G⁽²⁾ − G⁽³⁾: the tied-maximum sum, hla3_paper (SPEC §6 E4)",
     "the masked third-order recurrence of SPEC §3",
     [](const BatchProblem& p, const Reference&) { return p.opt.variant == Variant::hla3 && p.opt.masked && !decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.variant = Variant::hla3_paper; }); }},
    {"E5", false, "hla2's chunk form of the paper's Fig. 1C, without the carry × chunk term ρ_t(q_tᵀS_A)C_{B,≤t} (SPEC §6 E5)",
     "add ρ_t(q_tᵀS_A)C_{B,≤t} (SPEC §5)", [](const BatchProblem& p, const Reference&) { return hla2_masked(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) {
       return per_width(p, [&](Index w) { return ours_paper(p, Precision::f64, PaperForm::E5_hla2_chunked, w); });
     }},
    {"E6", false, "ahla's routed carry with R_{B,<t} for R_{B,≤t} (SPEC §6 E6)", "include i = t in R_{B,≤t} (SPEC §5)",
     [](const BatchProblem& p, const Reference&) { return p.opt.variant == Variant::ahla && plain(p); },
     [](const BatchProblem& p, const Reference&) {
       return per_width(p, [&](Index w) { return ours_paper(p, Precision::f64, PaperForm::E6_ahla_chunked, w); });
     }},
    // Decay.
    {"decay_power_plus_one", false, "every decay one step too many: γ^(t−j+1), or the decay applied after adding the token",
     "decay the state before adding token t: S_t = γS_{t−1} + k_tk_tᵀ", [](const BatchProblem& p, const Reference&) { return decayed(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.scale *= x.opt.gamma; }); }},
    {"decay_power_minus_one", false, "every decay one step too few: γ^(t−j−1)", "the weight of token j at t is γ^(t−j)",
     [](const BatchProblem& p, const Reference&) { return decayed(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.scale /= x.opt.gamma; }); }},
    {"decay_from_start", false, "decay counted from the wrong end: γ^(j−t0) (the key's distance from the sequence start) for γ^(t−j)",
     "weigh token j at t by γ^(t−j)",
     [](const BatchProblem& p, const Reference&) { return p.opt.variant == Variant::la1 && decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) {
       return changed(p, [](BatchProblem& x) {
         const double g = to_double(x.opt.gamma);
         for (Index row = 0; row < x.batch * x.kv_heads; ++row)
           for (const auto& [t0, t1] : x.sequences())
             for (Index t = t0; t < t1; ++t)
               for (Index c = 0; c < x.d; ++c)
                 x.k[static_cast<size_t>((row * x.n + t) * x.d + c)] *= std::pow(g, static_cast<double>(t - t0));
         x.opt.gamma = 1;
       });
     }},
    {"F_decay_gamma", false, "hla2's corrected state decayed by γ, not γ²: F_t = γF_{t−1} + (S_tq_t)v_tᵀ", "F_t = γ²F_{t−1} + (S_tq_t)v_tᵀ",
     [](const BatchProblem& p, const Reference&) { return hla2_masked(p) && decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) { return one(hla2_wrong_decay(p, Hla2Decay::F_by_gamma)); }},
    {"G_decay_gamma", false, "hla2's paper state G decayed by γ, not γ²: G_t = γG_{t−1} + γk_t(k_tᵀC_{t−1})",
     "G_t = γ²G_{t−1} + γk_t(k_tᵀC_{t−1})",
     [](const BatchProblem& p, const Reference&) { return hla2_masked(p) && decayed(p) && plain(p); },
     [](const BatchProblem& p, const Reference&) { return one(hla2_wrong_decay(p, Hla2Decay::G_by_gamma)); }},
    {"ridge_decay_plus_one", false, "hla2's ridge term decayed by γ^(t−j+1)", "λ·Σ γ^(t−j)(q_t·q_j)v_j",
     [](const BatchProblem& p, const Reference&) { return p.opt.lambda != 0 && decayed(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.lambda *= x.opt.gamma; }); }},
    // scale.
    {"scale_missing", false, "q never multiplied by scale", "multiply q by scale first",
     [](const BatchProblem& p, const Reference&) { return p.opt.scale != 1; },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.scale = 1; }); }},
    {"scale_twice", false, "q multiplied by scale twice", "multiply q by scale once",
     [](const BatchProblem& p, const Reference&) { return p.opt.scale != 1; },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.scale *= x.opt.scale; }); }},
    {"scale_on_k", false, "k multiplied by scale instead of q", "multiply q, not k, by scale",
     [](const BatchProblem& p, const Reference&) { return p.opt.scale != 1; },
     [](const BatchProblem& p, const Reference&) {
       return changed(p, [](BatchProblem& x) {
         for (double& e : x.k) e *= to_double(x.opt.scale);
         x.opt.scale = 1;
       });
     }},
    // The causal mask.
    {"mask_missing", false, "the causal mask missing (the unmasked operator)", "mask: only i ≤ j ≤ t (SPEC §2)",
     [](const BatchProblem& p, const Reference&) { return p.opt.masked && info(p.opt.variant).has_unmasked; },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.opt.masked = false; }); }},
    {"mask_strict", false,
     "the causal mask strict inside chunks of W (< for ≤): la1 drops j = t; hla2 j = t and i = j; ahla i = t and j = i",
     "mask with ≤: a token sees itself (tril with diagonal 0, an inclusive scan)",
     [](const BatchProblem& p, const Reference&) {
       return (p.opt.variant == Variant::la1 || hla2_masked(p) || p.opt.variant == Variant::ahla) && plain(p);
     },
     [](const BatchProblem& p, const Reference& r) {
       if (p.opt.variant == Variant::la1) return one(std::move(strict_mask_in_chunks(p, r, {1})[0]));
       return by_width(widths(p), strict_mask_in_chunks(p, r, widths(p)));
     }},
    {"mask_exclusive", false, "la1's causal mask exclusive: token t does not see itself (the output read before the update)",
     "include the diagonal j = t: update the state, then read it",
     [](const BatchProblem& p, const Reference&) { return p.opt.variant == Variant::la1 && plain(p); },
     [](const BatchProblem& p, const Reference&) {
       return changed(p, [](BatchProblem& x) {
         shift_rows(x, x.k, x.batch * x.kv_heads, x.d);
         shift_rows(x, x.v, x.batch * x.kv_heads, x.dv);
       });
     }},
    // Normalization.
    {"den_max_eps", false, "normalized by max(den, ε): wrong wherever den < 0", "sign(den)·max(|den|, ε) (clamp) or den + ε (add)",
     [](const BatchProblem& p, const Reference&) { return p.opt.normalize; },
     [](const BatchProblem& p, const Reference& r) { return renormalized(p, r, [e = eps_of(p)](double d) { return std::max(d, e); }); }},
    {"eps_missing", false, "normalized by den alone, ε missing", "divide by den ⊕ ε",
     [](const BatchProblem& p, const Reference&) { return p.opt.normalize; },
     [](const BatchProblem& p, const Reference& r) { return renormalized(p, r, [](double d) { return d; }); }},
    {"eps_twice", false, "ε added twice", "add ε once", [](const BatchProblem& p, const Reference&) { return p.opt.normalize; },
     [](const BatchProblem& p, const Reference& r) {
       return renormalized(p, r, [&](double d) { return normalizer(d, 2 * eps_of(p), p.opt.eps_mode); });
     }},
    {"eps_mode_swapped", false, "clamp where add is declared, or add where clamp is", "normalize as the declared eps_mode",
     [](const BatchProblem& p, const Reference&) { return p.opt.normalize; },
     [](const BatchProblem& p, const Reference& r) {
       const EpsMode other = p.opt.eps_mode == EpsMode::add ? EpsMode::clamp : EpsMode::add;
       return renormalized(p, r, [&](double d) { return normalizer(d, eps_of(p), other); });
     }},
    // Inputs read wrongly.
    {"v_shifted", false, "values one token late: v_{j−1} for v_j", "pair k_j with v_j",
     [](const BatchProblem& p, const Reference&) { return plain(p); },
     [](const BatchProblem& p, const Reference&) {
       return changed(p, [](BatchProblem& x) { shift_rows(x, x.v, x.batch * x.kv_heads, x.dv); });
     }},
    {"qk_swapped", false, "q and k swapped", "pass q as q and k as k",
     [](const BatchProblem& p, const Reference&) { return p.heads == p.kv_heads && plain(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { std::swap(x.q, x.k); }); }},
    {"layout_bthd", false, "[B, H, T, D] tensors read (and out written) as [B, T, H, D]", "read the layout the caller passes",
     [](const BatchProblem& p, const Reference&) { return p.heads > 1 && p.n > 1 && plain(p) && p.offsets.empty(); },
     [](const BatchProblem& p, const Reference&) {
       return changed(
           p,
           [](BatchProblem& x) {
             x.q = as_bthd(x.q, x.batch, x.heads, x.n, x.d, false), x.k = as_bthd(x.k, x.batch, x.kv_heads, x.n, x.d, false);
             x.v = as_bthd(x.v, x.batch, x.kv_heads, x.n, x.dv, false);
           },
           [&](CandidateOutputs& c) {
             c.out = as_bthd(c.out, p.batch, p.heads, p.n, p.dv, true), c.den = as_bthd(c.den, p.batch, p.heads, p.n, 1, true);
           });
     },
     false, nullptr, true},
    {"k_transposed", false, "K read as if laid out [B, Hkv, d, n]", "read K as [B, Hkv, n, d]",
     [](const BatchProblem& p, const Reference&) { return p.n > 1 && plain(p); },
     [](const BatchProblem& p, const Reference&) {
       return changed(p, [](BatchProblem& x) {
         const std::vector<double> k = x.k;
         for (size_t head = 0; head < k.size(); head += static_cast<size_t>(x.n * x.d))
           for (Index t = 0; t < x.n; ++t)
             for (Index c = 0; c < x.d; ++c) x.k[head + static_cast<size_t>(t * x.d + c)] = k[head + static_cast<size_t>(c * x.n + t)];
       });
     }},
    {"gqa_modulo", false, "query head h reads K/V head h % Hkv", "K/V head h / (H / Hkv)",
     [](const BatchProblem& p, const Reference&) { return p.kv_heads > 1 && p.heads > p.kv_heads && plain(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x = gqa_modulo(x); }); }, false, nullptr, true},
    // State.
    {"chunk_state_dropped", false, "the state not carried across chunks of W tokens (each chunk starts from zero)",
     "hand each chunk the state of the one before", [](const BatchProblem& p, const Reference&) { return plain(p); },
     [](const BatchProblem& p, const Reference&) { return per_width(p, [&](Index w) { return chunks_alone(p, w); }); }},
    {"ragged_chunk_dropped", false, "a ragged last chunk never computed (outputs 0 beyond the last multiple of W)",
     "launch ceil(n / W) chunks", [](const BatchProblem&, const Reference&) { return true; },
     [](const BatchProblem& p, const Reference& r) { return per_width(p, [&](Index w) { return ragged_dropped(p, r, w); }); }},
    {"initial_state_ignored", false, "the initial state ignored (every sequence from zero)", "start from the given state",
     [](const BatchProblem& p, const Reference&) { return p.has_state(); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.state.clear(); }); }},
    {"varlen_no_reset", false, "packed sequences share one state: no reset at the cu_seqlens offsets", "reset the state at every offset",
     [](const BatchProblem& p, const Reference&) { return p.offsets.size() > 2 && plain(p); },
     [](const BatchProblem& p, const Reference&) { return changed(p, [](BatchProblem& x) { x.offsets.clear(); }); }},
    // The final state (SPEC §8) handed to the next call; the outputs right.
    {"final_state_not_decayed", false, "the final state's member X missing its last token's decay: X_{n−1} + T_n for γ^p X_{n−1} + T_n",
     "decay the member before adding the last token",
     [](const BatchProblem& p, const Reference& r) { return final_state_row(p, r) && decayed(p); },
     [](const BatchProblem& p, const Reference& r) {
       return per_member(
           p, r, [](const StatePart&) { return true; },
           [&](std::vector<double>& x, const std::vector<double>& before, size_t at, const StatePart& m) {
             const double lost = 1 - std::pow(to_double(p.opt.gamma), m.name == "F" ? order_of(p.opt.variant) : 1);
             for (Index e = 0; e < m.size(); ++e) x[at + static_cast<size_t>(e)] += lost * before[at + static_cast<size_t>(e)];
           });
     },
     true},
    {"final_state_stale_column", false, "the final state's denominator column (z, m, e, f) the one before the last token",
     "store the column after the last token's update", [](const BatchProblem& p, const Reference& r) { return final_state_row(p, r); },
     [](const BatchProblem& p, const Reference& r) {
       return per_member(
           p, r, [](const StatePart& m) { return !m.ones.empty(); },
           [](std::vector<double>& x, const std::vector<double>& before, size_t at, const StatePart& m) {
             for (Index row = 0; row < m.rows; ++row) {
               const size_t e = at + static_cast<size_t>(row * m.width() + m.cols);
               x[e] = before[e];
             }
           });
     },
     true},
    // State continuation (two calls per sequence, the state handed over: CheckOptions::continuation_splits).
    {"state_member_dropped", false, "the state handed to the next call lacks a member (written as zero; the outputs of one call right)",
     "write every member of the state", continues, nullptr, false,
     [](const BatchProblem& p, const Reference& r, const std::vector<Index>& splits) {
       const auto [first, second] = parts_at(p, splits);
       const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
       Forms f;
       size_t at = 0;
       for (const StatePart& m : layout) {
         const CandidateOutputs o = f64(second_part(p, splits, [&](std::vector<double>& x) {
           for (size_t block = 0; block < x.size(); block += static_cast<size_t>(state_size(layout)))
             std::fill_n(x.begin() + static_cast<long>(block + at), m.size(), 0.0);
         }));
         CandidateOutputs c{r.out, r.den, DType::f64, DType::f64};
         put_rows(c.out, o.out, p.batch * p.heads, p.n, second, p.dv), put_rows(c.den, o.den, p.batch * p.heads, p.n, second, 1);
         f.push_back({"/" + m.name, std::move(c)});
         at += static_cast<size_t>(m.size());
       }
       return f;
     }},
    {"dstate_dropped", true, "the initial state's gradient handed back as zero: a prefix's backward never hears of the tokens after it",
     "write ∂L/∂X0", [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && continues(p, r); }, nullptr, false,
     [](const BatchProblem& p, const Reference& r, const std::vector<Index>& splits) {
       const auto [first, second] = parts_at(p, splits);
       const Index BH = p.batch * p.heads;
       const CandidateOutputs g =
           grads(with_tokens(p, first), rows_in(r.grad->dout, BH, p.n, first, p.dv), rows_in(r.grad->dden, BH, p.n, first, 1));
       return one(first_parts_from(p, r, first, g));
     }},
    {"dstate_next_sequence", true,
     "sequence i's initial-state gradient handed back from sequence i + 1 (the last its own): an off-by-one in the store",
     "store ∂L/∂X0 of sequence i at i",
     [](const BatchProblem& p, const Reference& r) {
       return has_grad(p, r) && continues(p, r) && p.sequence_count() > 1 && (p.opt.variant == Variant::la1 || hla2_masked(p));
     },
     nullptr, false,
     [](const BatchProblem& p, const Reference& r, const std::vector<Index>& splits) {
       const auto [first, second] = parts_at(p, splits);
       const Index BH = p.batch * p.heads;
       auto rows = [&](const std::vector<double>& x, const Ranges& rs, Index cols) { return rows_in(x, BH, p.n, rs, cols); };
       const BatchProblem p2 = second_part(p, splits, [](std::vector<double>&) {});
       const CandidateOutputs g2 = grads(p2, rows(r.grad->dout, second, p.dv), rows(r.grad->dden, second, 1));
       // Sequence i's ∂L/∂X0 where i − 1's belongs (per head; the last keeps its own).
       std::vector<double> next = g2.dstate;
       const size_t block = next.size() / static_cast<size_t>(p.sequence_count());
       for (size_t s = 0; s + 1 < static_cast<size_t>(p.sequence_count()); ++s)
         std::copy_n(g2.dstate.begin() + static_cast<long>((s + 1) * block), block, next.begin() + static_cast<long>(s * block));
       const std::vector<double> dout1 = rows(r.grad->dout, first, p.dv), dden1 = rows(r.grad->dden, first, 1),
                                 num1 = rows(r.num, first, p.dv), den1 = rows(r.den, first, 1);
       return one(
           first_parts_from(p, r, first, la1_hla2_backward(with_tokens(p, first), {dout1, dden1, num1, den1, &next}, BackwardFlaw::none)));
     }},
    // Precision: the reference judged at bf16 or f16 (the sums of a kernel declaring f32 kept in a 16-bit dtype,
    // or its products' operands so rounded: a tensor-core kernel errs as much in u·M, so the fix names both).
    {"low_precision_accumulation", false,
     "computed below the declared f32 (within the pass rule judged at /bf16 or /f16): sums or state kept in a 16-bit "
     "dtype, or products' operands rounded (tensor cores)",
     "keep the state and running sums in f32; a kernel whose products take bf16, f16 or tf32 operands and sum in f32 "
     "declares bf16+f32, f16+f32 or tf32",
     [](const BatchProblem&, const Reference&) { return true; },
     [](const BatchProblem&, const Reference& r) {
       return at_low_precision(CandidateOutputs{r.out, r.den, DType::f64, DType::f64});
     }},
    {"low_precision_accumulation", true,
     "the backward computed below the declared f32 (/bf16 or /f16): adjoints kept in a 16-bit dtype, or products' operands "
     "rounded (tensor cores)",
     "keep the adjoint states in f32; a backward on bf16, f16 or tf32 operands with f32 sums declares bf16+f32, f16+f32 or tf32",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r); },
     [](const BatchProblem&, const Reference& r) {
       CandidateOutputs c;
       c.dq = r.grad->dq, c.dk = r.grad->dk, c.dv = r.grad->dv;
       return at_low_precision(std::move(c));
     }},
    // Gradients.
    {"dk_no_cross", true, "hla2's dk_i = M_ik_i: the k_i half of d(k_ik_iᵀ) dropped (M: the adjoint of S)", "dk_i = (M_i + M_iᵀ)k_i",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && hla2_masked(p); },
     [](const BatchProblem& p, const Reference& r) { return one(flawed_backward(p, r, BackwardFlaw::dk_no_cross)); }},
    {"adjoint_decay_gamma", true, "hla2's reverse adjoint of F decayed by γ, not γ²: R_j = γR_{j+1} + q_jȲ_jᵀ",
     "R_j = γ²R_{j+1} + q_jȲ_jᵀ (F carries two decayed indices)",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && hla2_masked(p) && decayed(p); },
     [](const BatchProblem& p, const Reference& r) { return one(flawed_backward(p, r, BackwardFlaw::adjoint_decay_gamma)); }},
    {"dq_carry_chunk_before", true, "dq's carry term at a chunk's first row from the chunk before's carry (its chunk index from t − 1)",
     "the carry into t's own chunk: index t / W",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && (p.opt.variant == Variant::la1 || hla2_masked(p)); },
     [](const BatchProblem& p, const Reference& r) {
       return per_width(p, [&](Index w) { return flawed_backward(p, r, BackwardFlaw::dq_carry_chunk_before, w); });
     }},
    {"dq_dk_swapped", true, "dq and dk swapped", "write ∂L/∂q to dq and ∂L/∂k to dk",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && p.heads == p.kv_heads; },
     [](const BatchProblem&, const Reference& r) {
       CandidateOutputs c;
       c.dq = r.grad->dk, c.dk = r.grad->dq, c.dv = r.grad->dv;
       return one(std::move(c));
     }},
    {"dden_dropped", true, "the upstream of den (dden) ignored", "add dden's term to dq and dk",
     [](const BatchProblem& p, const Reference& r) {
       return has_grad(p, r) && std::any_of(r.grad->dden.begin(), r.grad->dden.end(), [](double x) { return x != 0; });
     },
     [](const BatchProblem& p, const Reference& r) { return one(grads(p, r.grad->dout, {})); }},
    {"upstream_transposed", true, "the upstream do read as [B, H, dv, n]", "read do as [B, H, n, dv]",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && p.n > 1 && p.dv > 1; },
     [](const BatchProblem& p, const Reference& r) {
       std::vector<double> d = r.grad->dout;
       for (size_t head = 0; head < d.size(); head += static_cast<size_t>(p.n * p.dv))
         for (Index t = 0; t < p.n; ++t)
           for (Index c = 0; c < p.dv; ++c)
             d[head + static_cast<size_t>(t * p.dv + c)] = r.grad->dout[head + static_cast<size_t>(c * p.n + t)];
       return one(grads(p, d, r.grad->dden));
     }},
    {"gqa_unsummed", true, "dk, dv of a K/V head from the last query head of its group only", "sum dk, dv over the group's query heads",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && p.heads > p.kv_heads; },
     [](const BatchProblem& p, const Reference& r) {
       BatchProblem x = p;
       x.k.clear(), x.v.clear();
       for (Index b = 0; b < p.batch; ++b)
         for (Index h = 0; h < p.heads; ++h) {
           x.k.insert(x.k.end(), p.k.begin() + static_cast<long>(p.k_index(b, h, 0, 0)),
                      p.k.begin() + static_cast<long>(p.k_index(b, h, 0, 0) + p.n * p.d));
           x.v.insert(x.v.end(), p.v.begin() + static_cast<long>(p.v_index(b, h, 0, 0)),
                      p.v.begin() + static_cast<long>(p.v_index(b, h, 0, 0) + p.n * p.dv));
         }
       x.kv_heads = p.heads;
       CandidateOutputs all = grads(x, r.grad->dout, r.grad->dden), c;
       c.dq = all.dq;
       const Index g = p.heads / p.kv_heads;
       for (Index b = 0; b < p.batch; ++b)
         for (Index kv = 0; kv < p.kv_heads; ++kv) {
           const Index h = b * p.heads + kv * g + g - 1;
           c.dk.insert(c.dk.end(), all.dk.begin() + h * p.n * p.d, all.dk.begin() + (h + 1) * p.n * p.d);
           c.dv.insert(c.dv.end(), all.dv.begin() + h * p.n * p.dv, all.dv.begin() + (h + 1) * p.n * p.dv);
         }
       return one(std::move(c));
     }},
    // The forward resets its state at every offset (else the outputs fail first): la1's and hla2's
    // adjoints run on across them; other variants (no flawed backward of ours): forward and backward unreset.
    {"varlen_backward_no_reset", true, "the backward's adjoints not reset at the cu_seqlens offsets", "reset them at every offset",
     [](const BatchProblem& p, const Reference& r) { return has_grad(p, r) && p.offsets.size() > 2; },
     [](const BatchProblem& p, const Reference& r) {
       if (p.opt.variant == Variant::la1 || hla2_masked(p)) return one(flawed_backward(p, r, BackwardFlaw::adjoints_not_reset));
       BatchProblem x = p;
       x.offsets.clear();
       return one(grads(x, r.grad->dout, r.grad->dden));
     }},
};

}  // namespace catalog_rows

const std::vector<Mistake>& mistake_catalog() { return catalog_rows::kCatalog; }

}  // namespace hla::check
