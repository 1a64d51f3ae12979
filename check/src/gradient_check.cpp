// The verdict on a candidate's gradients (gradient.hpp check_gradients; SPEC
// §9 "Judging gradients"): every element scored by |ĝ − g| / (u·M*), M* the
// yardstick of the candidate's class (gradient_yardstick.cpp); rule 2 (the a
// priori bound K_g + 1) and rule 3 (at most ratio_limit(N) times the worst of
// our own backward orders in the candidate's precision and class, or the
// element's floor) for every gradient and state part, as for outputs.
#include "hla/engine/gradient_groups.hpp"
#include "internal.hpp"
#include "part_rows.hpp"
#include "score_map.hpp"

#include <algorithm>
#include <iterator>
#include <cstdio>
#include <functional>

namespace hla::check {

using engine::depth_bound;
using engine::flat_path_ratio;
using engine::gradient_baselines;
using engine::gradient_depth_bound;

namespace {

// A row's map (Report::maps): the candidate's and each of our orders' scores.
struct RowMaps {
  MapLayout layout;
  MapAcc cand;
  std::vector<MapAcc> ours;  // per base
  RowMaps(MapLayout l, size_t bases) : layout(std::move(l)), ours(bases) {
    const Index rows = layout.proto.rows;
    cand.start(layout, 0, rows);
    for (MapAcc& a : ours) a.start(layout, 0, rows);
  }
  RowMaps(const RowMaps&) = delete;
};

// An element's fate: not scored (and why), or scored, its score and unit filled in.
enum class Fate { ill_conditioned, out_of_range, underflow, scored };

// |error| in score units of element e.
double in_units(const Judge& j, const Element& e, double err) {
  return err == 0 ? 0.0 : e.magnitude > 0 ? err / (j.r.u * e.magnitude) : HUGE_VAL;
}

Fate prepare(const Judge& j, Element& e, DType dtype) {
  if (!std::isfinite(e.magnitude) || !std::isfinite(e.reference)) return Fate::ill_conditioned;
  if (std::fabs(e.reference) > info(dtype).largest_finite()) return Fate::out_of_range;
  if (j.r.u * e.magnitude < j.tiny && e.magnitude > 0) return Fate::underflow;
  e.score = std::isfinite(e.candidate)
                ? in_units(j, e, std::max(0.0, std::fabs(e.candidate - e.reference) - info(dtype).rounding_error(e.reference)))
                : HUGE_VAL;
  e.unit = e.magnitude > 0 ? std::fabs(e.reference) / e.magnitude : 0;
  return Fate::scored;
}

// A row's elements, walked again for rule 3 and vacuity once our worst is known
// (each scored element, prepared): no per-element copy is kept, which at
// [2, 8, 4096, 128] would be 2 GB per tensor.
using Rewalk = std::function<void(const std::function<void(const Element&)>&)>;

// Scores element e (its magnitude the yardstick M*; +inf: ill-conditioned)
// into row and its worst k, and into maps at (map_row, e.t); `ours(b)` gives
// our form b's value of the element (or NaN when it has none).
void score(const Judge& j, GradientRow& row, Worst& worst, Element e, DType dtype,
           const std::function<double(const CandidateOutputs&)>& ours, RowMaps& maps, Index map_row) {
  ++row.elements;
  switch (prepare(j, e, dtype)) {
    case Fate::ill_conditioned:
      ++row.ill_conditioned;
      return;
    case Fate::out_of_range:
      ++row.out_of_range;
      return;
    case Fate::underflow:
      ++row.underflow;
      return;
    case Fate::scored:
      break;
  }
  ++row.scored;
  if (!std::isfinite(e.candidate)) ++row.nonfinite;
  maps.cand.add(map_row, e.t, e.score);
  for (size_t k = 0; k < j.bases.size(); ++k) {
    const auto& [form, b] = j.bases[k];
    const double x = ours(b);
    if (std::isnan(x)) continue;
    const double sb = std::isfinite(x) ? in_units(j, e, std::fabs(x - e.reference)) : HUGE_VAL;
    maps.ours[k].add(map_row, e.t, sb);
    if (sb > row.baseline_max_score || row.baseline_worst_form.empty()) {
      row.baseline_max_score = std::max(row.baseline_max_score, sb);
      if (sb >= row.baseline_max_score) row.baseline_worst_form = form;
    }
  }
  if (e.score > j.bound) ++row.over_bound;
  if (j.exact_tier && (dtype == DType::f32 || dtype == DType::f64) && !(e.candidate == e.reference)) ++row.exact_mismatches;
  row.max_score = std::max(row.max_score, e.score);
  worst.keep(e);
}

// The row's map into r.maps: the candidate's scores and those of the order rule 3 took as ours.
void finish_map(const Judge& j, Report& r, const GradientRow& row, RowMaps& maps) {
  ScoreMap m = maps.layout.proto;
  maps.cand.flush();
  merge_map(m, maps.cand, false);
  for (size_t k = 0; k < j.bases.size(); ++k)
    if (row.baseline_worst_form.rfind(j.bases[k].first, 0) == 0) {
      maps.ours[k].flush();
      merge_map(m, maps.ours[k], true);
      m.ours_form = j.bases[k].first;
      break;
    }
  m.bound = j.bound;
  m.limit = row.baseline_applied ? row.ratio_limit * std::max(row.baseline_max_score, 1.0) : m.bound;
  m.fails = row.fails();
  r.maps.push_back(std::move(m));
}

// The row's rule 3, worst elements and reasons; `at` says where an element is.
void finish(const Judge& j, Report& r, GradientRow& row, Worst worst, const Rewalk& rewalk,
            const std::function<std::string(const Element&)>& at, RowMaps& maps) {
  if (row.baseline_applied) {
    if (j.path_ratio != 1) {
      row.baseline_max_score *= j.path_ratio;
      char k[32];
      std::snprintf(k, sizeof k, "%.4g", j.path_ratio);
      row.baseline_worst_form += std::string(" x ") + k + " (the class's longest path over the nested one)";
    }
    row.ratio_limit = ratio_limit(row.scored);
    if (row.baseline_max_score == 0 && !row.baseline_worst_form.empty()) row.baseline_worst_form += ", exact on every element";
  }
  // Rule 3's ratio per element (a non-finite score fails by its own rule), and
  // vacuity: an all-zero candidate (score |ref|/(u·M) per element) would pass rules 2 and 3 here.
  bool nonzero = false, zeros_pass = true;
  rewalk([&](const Element& e) {
    if (row.baseline_applied && std::isfinite(e.score)) {
      const double ratio = e.score == 0 ? 0 : e.score / row_yardstick(row, e.unit);
      if (ratio > row.baseline_ratio) row.baseline_ratio = ratio, row.ratio_element = e;
    }
    nonzero |= e.reference != 0;
    const double z = zero_score(e.reference, e.magnitude, j.r.u);
    zeros_pass = zeros_pass && z <= j.bound && (!row.baseline_applied || z <= row.ratio_limit * row_yardstick(row, e.unit));
  });
  if (row.baseline_applied) row.over_ratio = row.baseline_ratio > row.ratio_limit;
  row.vacuous = !j.exact_tier && nonzero && zeros_pass;
  row.worst = std::move(worst).take();
  char buf[400];
  if (row.nonfinite) r.reasons.push_back(row.name + ": " + std::to_string(row.nonfinite) + " non-finite values where the reference is finite");
  if (row.over_bound) {  // where: the worst listed element (none with --worst 0)
    std::snprintf(buf, sizeof buf, " elements exceed the a priori %s %.4g u·magnitude (worst score %.4g", j.bound_name, j.bound,
                  row.max_score);
    r.reasons.push_back(row.name + ": " + std::to_string(row.over_bound) + buf +
                        (row.worst.empty() ? std::string(")") : " at " + at(row.worst.front()) + ")"));
  }
  if (row.exact_mismatches)
    r.reasons.push_back(row.name + ": " + std::to_string(row.exact_mismatches) +
                        " elements differ from the exact reference (exact tier demands bit equality)");
  if (row.over_ratio) {
    const Element& w = row.ratio_element;
    std::snprintf(buf, sizeof buf,
                  " is %.4g times the larger of the worst of our own %s in %s (%.4g by %s) and the element's floor (%.4g); "
                  "limit %.4gx for %zu scored elements",
                  row.baseline_ratio, j.ours_name, to_string(r.precision).c_str(), row.baseline_max_score, row.baseline_worst_form.c_str(),
                  row_yardstick(GradientRow{}, w.unit) == 1.0 && row.baseline_max_score == 0 ? 1.0 : kFloorRoundings * w.unit,
                  row.ratio_limit, row.scored);
    char score_text[40];
    std::snprintf(score_text, sizeof score_text, "%.4g", w.score);
    r.reasons.push_back(row.name + ": score " + score_text + " at " + at(w) + buf);
  }
  finish_map(j, r, row, maps);
  (r.*j.rows).push_back(std::move(row));
}

// A row's elements judged: walk(f) calls f(element, index) on each (twice:
// scoring, then rule 3 and vacuity once our worst is known); ours(o, index)
// is our order o's value there (NaN: none); map rows are b·heads + h.
template <class Walk, class Ours>
void judge_elements(const Judge& j, const CheckOptions& opt, Report& r, GradientRow& row, DType dtype, const Walk& walk, const Ours& ours,
                    RowMaps& maps, Index heads, const std::function<std::string(const Element&)>& at) {
  row.dtype = dtype;
  Worst worst;
  worst.k = opt.worst;
  walk([&](const Element& e, size_t i) {
    score(
        j, row, worst, e, dtype, [&](const CandidateOutputs& o) { return ours(o, i); }, maps, e.b * heads + e.h);
  });
  const Rewalk rewalk = [&](const std::function<void(const Element&)>& f) {
    walk([&](Element e, size_t) {
      if (prepare(j, e, dtype) == Fate::scored) f(e);
    });
  };
  finish(j, r, row, std::move(worst), rewalk, at, maps);
}

// (G + Gᵀ)/2 of the symmetric members of a state's gradient (BatchProblem::state
// layout): the gradient along symmetric directions, as the reference's is.
std::vector<double> symmetrized(const BatchProblem& p, std::vector<double> x) {
  if (x.empty()) return x;
  for (Index seq = 0; seq < p.sequence_count(); ++seq)
    for (Index h = 0; h < p.heads; ++h) {
      const BatchProblem::StateView X = p.state_view(seq, h);
      for (size_t m = 0; m < X.layout.size(); ++m) {
        if (!X.layout[m].symmetric) continue;
        const Index w = X.layout[m].width();
        for (Index a = 0; a < X.layout[m].rows; ++a)
          for (Index b = a + 1; b < X.layout[m].cols; ++b) {
            double &u = x[X.start[m] + static_cast<size_t>(a * w + b)], &v = x[X.start[m] + static_cast<size_t>(b * w + a)];
            u = v = (u + v) / 2;
          }
      }
    }
  return x;
}

// One row per gradient tensor: dq, dk, dv.
void token_rows(const Judge& j, const CheckOptions& opt, const CandidateOutputs& cand, const GradientReference& g,
                const GradientYardstick& y, Report& r, std::vector<std::string>& missing) {
  const BatchProblem& p = j.p;
  struct Tensor {
    const char* name;
    const std::vector<double>& cand;
    DType dtype;
    const std::vector<double>& ref;
    const std::vector<double>& mag;
    Index heads, cols;
    std::vector<double> CandidateOutputs::*ours;
  };
  const Tensor tensors[] = {{"dq", cand.dq, cand.dq_dtype, g.dq, y.q, p.heads, p.d, &CandidateOutputs::dq},
                            {"dk", cand.dk, cand.dk_dtype, g.dk, y.k, p.kv_heads, p.d, &CandidateOutputs::dk},
                            {"dv", cand.dv, cand.dv_dtype, g.dv, y.v, p.kv_heads, p.dv, &CandidateOutputs::dv}};
  for (const Tensor& x : tensors) {
    GradientRow row;
    row.name = x.name;
    row.baseline_applied = !j.bases.empty();
    row.exact_tier = j.exact_tier && (x.dtype == DType::f32 || x.dtype == DType::f64);
    row.checked = !x.cand.empty();
    if (!row.checked) {
      missing.push_back(x.name);
      r.gradients.push_back(row);
      continue;
    }
    const size_t size = static_cast<size_t>(p.batch * x.heads * p.n * x.cols);
    if (x.cand.size() != size)
      throw InputError(std::string("candidate ") + x.name + " holds " + std::to_string(x.cand.size()) + " values, expected " +
                       std::to_string(size));
    const Index group = x.heads == p.heads ? p.heads / p.kv_heads : 1;
    RowMaps maps(map_layout(p, x.name, p.batch * x.heads, x.heads, group, p.n, true), j.bases.size());
    const auto walk = [&](const auto& f) {
      size_t i = 0;
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < x.heads; ++h)
          for (Index t = 0; t < p.n; ++t)
            for (Index c = 0; c < x.cols; ++c, ++i) f(Element{b, h, t, c, x.cand[i], x.ref[i], x.mag[i]}, i);
    };
    judge_elements(
        j, opt, r, row, x.dtype, walk, [&](const CandidateOutputs& o, size_t i) { return (o.*x.ours)[i]; }, maps, x.heads,
        [](const Element& w) {
          return "batch " + std::to_string(w.b) + " head " + std::to_string(w.h) + " token " + std::to_string(w.t) + " column " +
                 std::to_string(w.c);
        });
  }
}

}  // namespace

// One row per part of a state-shaped tensor (a state's gradient, a final state).
void part_rows(const Judge& j, const CheckOptions& opt, const PartTensor& x, Report& r, std::vector<std::string>& missing) {
  const BatchProblem& p = j.p;
  std::vector<std::vector<double>> ours;
  for (const auto& [form, b] : j.bases) ours.push_back(x.symmetric ? symmetrized(p, b.*x.ours) : b.*x.ours);
  const std::vector<double> mine = x.symmetric ? symmetrized(p, x.cand) : x.cand;
  const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
  for (size_t mi = 0; mi < layout.size(); ++mi) {
    const StatePart& m = layout[mi];
    if (m.role == StatePart::Role::unused) continue;
    for (const bool ones : {false, true}) {
      const std::string part = ones ? m.ones : m.name;
      if (part.empty()) continue;
      GradientRow row;
      row.name = x.prefix + part;
      row.baseline_applied = !j.bases.empty() && !(x.no_rule3 && x.no_rule3(m));
      row.checked = std::find(x.parts.begin(), x.parts.end(), part) != x.parts.end();
      if (!row.checked) {
        if (m.role == StatePart::Role::required) missing.push_back(row.name);
        (r.*j.rows).push_back(row);
        continue;
      }
      RowMaps maps(map_layout(p, row.name, p.sequence_count() * p.heads, p.heads, 1, m.rows, false), j.bases.size());
      const auto walk = [&](const auto& f) {
        p.for_each_state_entry([&](Index seq, Index h, size_t i_m, Index rr, Index c, size_t at) {
          if (i_m == mi && (c == m.cols) == ones) f(Element{seq, h, rr, ones ? -1 : c, mine[at], x.ref[at], x.mag[at]}, at);
        });
      };
      judge_elements(
          j, opt, r, row, x.dtype, walk,
          [&](const CandidateOutputs& o, size_t at) -> double {
            for (size_t k = 0; k < j.bases.size(); ++k)
              if (&j.bases[k].second == &o) return ours[k].empty() || !row.baseline_applied ? NAN : ours[k][at];
            return NAN;
          },
          maps, p.heads,
          [](const Element& w) {
            return "sequence " + std::to_string(w.b) + " head " + std::to_string(w.h) + " row " + std::to_string(w.t) +
                   (w.c < 0 ? "" : " column " + std::to_string(w.c));
          });
    }
  }
}

namespace {

// From an initial state: one row per part of the state's gradient.
void state_rows(const Judge& j, const CheckOptions& opt, const CandidateOutputs& cand, const GradientReference& g,
                const GradientYardstick& y, Report& r, std::vector<std::string>& missing) {
  const BatchProblem& p = j.p;
  if (!p.has_state() || g.dstate.size() != p.state.size()) return;
  if (!cand.dstate_parts.empty() && cand.dstate.size() != p.state.size())
    throw InputError("candidate dstate holds " + std::to_string(cand.dstate.size()) + " values, expected " +
                     std::to_string(p.state.size()));
  part_rows(j, opt, {"dstate.", cand.dstate, cand.dstate_parts, cand.dstate_dtype, g.dstate, y.state, &CandidateOutputs::dstate, true}, r,
            missing);
}

// The tokens whose den ⊕ ε is not bounded away from the pole, named (SPEC §9).
std::string ill_tokens(const GradientYardstick& y) {
  std::string s;
  const size_t shown = std::min<size_t>(y.ill.size(), 8);
  for (size_t i = 0; i < shown; ++i)
    s += (i ? ", " : "") + std::string("(batch ") + std::to_string(y.ill[i].b) + ", head " + std::to_string(y.ill[i].h) + ", token " +
         std::to_string(y.ill[i].t) + ")";
  if (y.ill.size() > shown) s += ", … (" + std::to_string(y.ill.size()) + " in all)";
  return s;
}

}  // namespace

void check_gradients(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r) {
  check_gradients(p, ref, cand, opt, r, nullptr);
}

void check_gradients(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, Report& r,
                     BaselineMemo* memo) {
  const bool has_any = !cand.dq.empty() || !cand.dk.empty() || !cand.dv.empty() || !cand.dstate_parts.empty();
  if (!ref.grad) {
    if (has_any)
      throw InputError("the candidate holds gradients (dq, dk, dv), but the fixture carries none (no upstream do to differentiate "
                       "against): use a fixture written with gradients (hla gen --case ...,grad=true, or the golden *-grad fixtures)");
    if (opt.require_gradients)
      throw InputError("gradients are required (--require-grad), but the fixture carries none (no upstream do): use a fixture "
                       "written with gradients");
    return;
  }
  const GradientReference& g = *ref.grad;
  if (!cand.dstate_parts.empty() && (!p.has_state() || g.dstate.size() != p.state.size()))
    throw InputError("the candidate holds the gradient of an initial state (dstate), but the fixture " +
                     std::string(p.has_state() ? "carries no reference for it" : "has no initial state"));
  // The class's longer paths (flat sums, decay in log space: depth_bound) lengthen
  // the backward's as they do the forward's, twice with normalize (∂L/∂Y passes a forward too).
  const Index Lmax = longest_sequence(p);
  const double class_extra = depth_bound(p.opt, Lmax, p.d, opt.form_class) - depth_bound(p.opt.variant, Lmax, p.d);
  r.gradient_bound = gradient_depth_bound(p.opt, Lmax, p.d, p.dv) + class_extra * (p.opt.normalize ? 2 : 1) + 1;
  const GradientYardstick y = has_any ? gradient_yardstick(p, ref, g, opt.form_class, r.u) : GradientYardstick{};
  const bool replay = memo && memo->mode == BaselineMemo::Mode::replay;
  const size_t reused = replay ? memo->gradient_bases.size() : 0;
  Bases bases = has_any ? gradient_baselines(p, g, r.precision, opt.form_class, replay ? &memo->gradient_bases : nullptr) : Bases{};
  if (memo) memo->evaluated += bases.size() - std::min(reused, bases.size());
  const bool exact_tier = opt.exact_tier && (!cand.dq.empty() || !cand.dk.empty() || !cand.dv.empty()) && gradient_exact_tier(p, g);
  const Judge j{
      p, r, bases, exact_tier, info(r.precision).smallest_normal(), flat_path_ratio(p.opt, Lmax, p.d, opt.form_class), r.gradient_bound};
  std::vector<std::string> missing;
  const size_t reasons_before = r.reasons.size(), rows_before = r.gradients.size(), states_before = r.states.size(),
               maps_before = r.maps.size();
  token_rows(j, opt, cand, g, y, r, missing);
  state_rows(j, opt, cand, g, y, r, missing);
  // Decay in log space along the sequence (engine::gradient_log_orders): only
  // where a row fails rule 3 without it, and then every row judged again with
  // it (an order more only raises each bar: the verdict is the same as with it always).
  const auto over_ratio = [](const GradientRow& x) { return x.over_ratio; };
  if (has_any && !exact_tier &&
      (std::any_of(r.gradients.begin() + static_cast<std::ptrdiff_t>(rows_before), r.gradients.end(), over_ratio) ||
       std::any_of(r.states.begin() + static_cast<std::ptrdiff_t>(states_before), r.states.end(), over_ratio)))
    if (auto log_orders = engine::gradient_log_orders(p, g, r.precision); !log_orders.empty()) {
      std::move(log_orders.begin(), log_orders.end(), std::back_inserter(bases));  // j reads bases
      r.gradients.resize(rows_before), r.states.resize(states_before), r.maps.resize(maps_before), r.reasons.resize(reasons_before);
      missing.clear();
      token_rows(j, opt, cand, g, y, r, missing);
      state_rows(j, opt, cand, g, y, r, missing);
    }
  if (!y.ill.empty())
    r.gradients_ill_tokens = "elements that depend on these tokens' den ⊕ ε, within its error bound of 0" +
                             std::string(p.opt.eps_mode == EpsMode::clamp ? " or of the clamp's edge" : "") +
                             ", are not scored: " + ill_tokens(y);
  // A kernel without a den output cannot have differentiated dden·den: say so where its gradients fail.
  const bool dden_used = std::any_of(g.dden.begin(), g.dden.end(), [](double x) { return x != 0; });
  if (dden_used && cand.den.empty() && r.reasons.size() > reasons_before)
    r.reasons.push_back("the fixture's upstream has dden (∂L/∂den), so its gradients include the terms through den, but the candidate "
                        "returns no den: a kernel whose loss does not see den is judged against a fixture written with dden=false "
                        "(hla gen --case ...,grad=true,dden=false)");
  if (memo && !replay) memo->gradient_bases = std::move(bases);
  // A variant without a subtracting form (ahla: Alg. 2 only adds) has no
  // state-difference order or magnitude of ours: the class is judged as masked.
  if (has_any && opt.form_class == FormClass::state_difference && p.opt.masked &&
      !info(p.opt.variant).forms.has(Form::streaming_paper_state))
    r.gradients_note = to_string(p.opt.variant) + " has no state-difference form of ours (its forms only add): its gradients are " +
                       "judged as masked, against the masked orders and magnitudes";
  if (!missing.empty()) {
    std::string list;
    for (const auto& s : missing) list += (list.empty() ? "" : ", ") + s;
    r.gradients_note += std::string(r.gradients_note.empty() ? "" : "; ") +
                        (has_any ? "not checked: the candidate has no " : "gradients not checked: the candidate has no ") + list;
    if (opt.require_gradients) r.reasons.push_back("the candidate lacks " + list + ", required by --require-grad");
  }
}

}  // namespace hla::check
