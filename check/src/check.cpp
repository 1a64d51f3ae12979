// The pass rule (docs/pass-rule.md):
//  (a) no non-finite candidate value where the reference is finite;
//  (b) every scored element within the a priori bound: score ≤ K + 1
//      (K = depth_bound, +1 for the f64 rounding of the reference); scores
//      are |cand − ref| / (u·M), or the residual of a normalized output;
//  (c) every element's score at most ratio_limit(N) times the worst of our own
//      honest evaluation orders in the same precision and class, or times the
//      element's floor (kFloorRoundings roundings of its value) if larger;
//  (d) exact tier: bit equality with the exact reference.
// M is the masked magnitude, or the unmasked-order one for the state-difference class.
#include "hla/check/check.hpp"

#include "hla/bounds.hpp"
#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/evaluate.hpp"
#include "catalog.hpp"
#include "internal.hpp"
#include "score_map.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

namespace hla::check {

using engine::baseline_forms;
using engine::BaselineForm;
using engine::compute_reference;
using engine::depth_bound;
using engine::fast_baseline_applies;
using engine::fast_baseline_wanted;
using engine::fast_ours;
using engine::has_state_difference_magnitude;
using engine::ours;
using engine::precision_of;
using engine::with_reversed_features;

namespace {

// The magnitudes a class is judged against (SPEC §7 evaluation classes).
struct Mags {
  const std::vector<double>& num;
  const std::vector<double>& den;
};
Mags mags_of(const Reference& ref, FormClass c) {
  if (c == FormClass::state_difference) return {ref.mag_num_sd, ref.mag_den_sd};
  return {ref.mag_num, ref.mag_den};
}

// Scores every element of `cand` and calls visit(element); elements that are
// not scored say why in Element::skip.
//   plain outputs and den: |cand − ref| / (u·M);
//   normalized outputs: the residual |o·D − num| / (u·(M_num + |o|·(M_den + ε))),
//   D = den ⊕ ε (SPEC §7): o is then the exact quotient of a num and a D each
//   perturbed by about score·u times their magnitudes (backward error). It
//   needs no pole exclusion; where D is within the bound of 0 a non-finite o
//   is accepted (at_pole) and, in clamp mode, either sign of D.
template <class Visit>
void score_head(const BatchProblem& p, const Reference& ref, Mags mag, const CandidateOutputs& cand, double u, double tiny,
                double K, Index b, Index h, Visit&& visit) {
  const Options& o = p.opt;
  const double eps = to_double(o.eps);
  // Storing a result in its output dtype may round it once more: that much
  // (relative u_t, or half the smallest subnormal) is not the kernel's
  // compute error and is taken off before scoring.
  auto judge = [&](Element& e, const DTypeLimits& lim) {
    if (!std::isfinite(e.reference)) e.skip = Skip::reference_nonfinite;
    else if (std::fabs(e.reference) > lim.max_finite) e.skip = Skip::out_of_range;
    else if (u * e.magnitude < tiny && e.magnitude > 0) e.skip = Skip::underflow;
    if (e.skip != Skip::none) return;
    if (!std::isfinite(e.candidate)) {
      e.score = HUGE_VAL;
      return;
    }
    const double err = std::max(0.0, std::fabs(e.candidate - e.reference) - lim.rounding_error(e.reference));
    e.score = err == 0 ? 0.0 : e.magnitude > 0 ? err / (u * e.magnitude) : HUGE_VAL;
    e.unit = e.magnitude > 0 ? std::fabs(e.reference) / e.magnitude : 0;
  };
  // A normalized token's row: D = den ⊕ ε, its magnitude, and whether D is
  // within the bound of the pole (then the candidate's own D may be 0 or of
  // either sign).
  struct Row {
    double den, D, MD;
    bool near_pole;
  };
  const DTypeLimits& out_lim = limits(cand.out_dtype);
  auto judge_normalized = [&](Element& e, double num, const Row& row) {
    if (!std::isfinite(num) || !std::isfinite(row.den)) e.skip = Skip::reference_nonfinite;
    else if (!row.near_pole && std::fabs(e.reference) > out_lim.max_finite) e.skip = Skip::out_of_range;
    else if (u * e.magnitude < tiny && e.magnitude > 0) e.skip = Skip::underflow;
    if (e.skip != Skip::none) return;
    if (!std::isfinite(e.candidate)) {
      if (row.near_pole) e.skip = Skip::at_pole;
      else e.score = HUGE_VAL;
      return;
    }
    const double oc = e.candidate, tol = e.magnitude + std::fabs(oc) * row.MD;
    auto residual = [&](double Dx) { return std::max(0.0, std::fabs(oc * Dx - num) - out_lim.rounding_error(oc) * std::fabs(Dx)); };
    double r = residual(row.D);
    if (o.eps_mode == EpsMode::clamp && row.near_pole) r = std::min(r, residual(-row.D));
    e.magnitude = tol;
    e.score = r == 0 ? 0.0 : tol > 0 ? r / (u * tol) : HUGE_VAL;
    // One rounding each of num, den and ε as the kernel holds them.
    e.unit = tol > 0 ? (std::fabs(num) + std::fabs(oc) * (std::fabs(row.den) + eps)) / tol : 0;
  };
  for (Index t = 0; t < p.n; ++t) {
    const size_t di = p.den_index(b, h, t);
    const double den = ref.den[di], magD = mag.den[di];
    Row row{den, 0, 0, false};
    if (o.normalize) {
      row.D = normalizer(den, eps, o.eps_mode), row.MD = magD + eps;
      row.near_pole = o.eps_mode == EpsMode::add ? std::fabs(row.D) <= K * u * row.MD : std::fabs(den) <= K * u * magD;
    }
    for (Index c = 0; c < p.dv; ++c) {
      const size_t i = p.out_index(b, h, t, c);
      Element e{b, h, t, c, cand.out[i], ref.out[i], mag.num[i]};
      if (o.normalize) judge_normalized(e, ref.num[i], row);
      else judge(e, out_lim);
      visit(e);
    }
    if (!cand.den.empty()) {
      Element e{b, h, t, -1, cand.den[di], den, magD};
      judge(e, limits(cand.den_dtype));
      visit(e);
    }
  }
}

// score_head over every (batch entry, head), heads in parallel on large
// problems: acc[b·heads + h] is visited by its head's elements alone, in
// order, so merging the accumulators in index order is deterministic.
template <class Acc, class Visit>
std::vector<Acc> score_all(const BatchProblem& p, const Reference& ref, Mags mag, const CandidateOutputs& cand, double u,
                           double tiny, double K, Visit&& visit) {
  std::vector<Acc> acc(static_cast<size_t>(p.batch * p.heads));
  const bool large = static_cast<double>(cand.out.size()) > 0x1p16;
  parallel_for(acc.size(), large ? worker_threads() : 1, [&](size_t i) {
    const Index b = static_cast<Index>(i) / p.heads, h = static_cast<Index>(i) % p.heads;
    score_head(p, ref, mag, cand, u, tiny, K, b, h, [&](const Element& e) { visit(acc[i], e); });
  });
  return acc;
}

// One head's share of a report: its tally, the outputs' own counts, the
// histogram and its row of the maps (baseline_ratio: its largest rule-3 ratio,
// given the baseline's worst score; floor: that element's floor).
struct HeadTally : Tally {
  size_t at_pole = 0, reference_nonfinite = 0;
  std::vector<size_t> bins = std::vector<size_t>(23, 0);
  double floor = 0;
  MapAcc out_map, den_map;     // this head's row of the out and den maps
  double cut = -HUGE_VAL;      // keep_worst's cut of worst
  // An all-zero candidate, per tensor (0 out, 1 den): its worst score, its largest rule-3 ratio, a reference not 0.
  double zero_score[2] = {0, 0}, zero_ratio[2] = {0, 0};
  bool nonzero[2] = {false, false};
  void keep(const Element& e, size_t k) { keep_worst(worst, cut, e, k); }
};

std::string where(const Element& e) {
  return "batch " + std::to_string(e.b) + " head " + std::to_string(e.h) + " token " + std::to_string(e.t) +
         (e.c < 0 ? " den" : " column " + std::to_string(e.c));
}

std::string fmt(double x, int digits = 4) {
  std::ostringstream os;
  os.precision(digits);
  os << x;
  return os.str();
}

// What to test where den ⊕ ε lies within its error bound of 0.
constexpr const char* kAwayFromPole =
    "test on inputs whose den is far from 0, as a feature map makes it (hla gen --case ...,dist=positive)";

// Why elements went unscored, the most frequent cause first, each with what to do instead.
std::string unscored_causes(size_t pole, size_t range, size_t under, DType out, Precision prec) {
  std::vector<std::pair<size_t, std::string>> c;
  if (pole) c.emplace_back(pole, std::to_string(pole) + " depend on a den ⊕ ε within its error bound of 0: " + kAwayFromPole);
  if (range)
    c.emplace_back(range, std::to_string(range) + " have a reference beyond " + to_string(out) + "'s largest finite value " +
                              fmt(limits(out).max_finite, 6) + ": store them in a wider dtype, or test at a smaller scale or normalized");
  if (under)
    c.emplace_back(under,
                   std::to_string(under) + " underflow (u·M below " + to_string(prec) + "'s smallest normal): test at a larger scale");
  std::stable_sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s;
  for (const auto& [n, why] : c) s += (s.empty() ? "" : "; ") + why;
  return s;
}

}  // namespace

double ratio_limit(size_t scored) {
  return std::max(kRatioLimit, 3.25 * kRatioLimit * std::pow(64.0 / static_cast<double>(std::max<size_t>(scored, 1)), 0.25));
}

std::string declare_class(FormClass c, Interface i) {
  const std::string name = to_string(c);
  switch (i) {
    case Interface::cli:
      return "--form-class " + name;
    case Interface::python:
      return "form_class=\"" + name + "\"";
    case Interface::cabi:
      return "hla_impl_info.form_class = " + std::string(c == FormClass::masked             ? "HLA_CLASS_MASKED"
                                                         : c == FormClass::state_difference ? "HLA_CLASS_STATE_DIFFERENCE"
                                                         : c.width == 0                     ? "HLA_CLASS_FLAT"
                                                                        : "HLA_CLASS_FLAT_CHUNKS(" + std::to_string(c.width) + ")");
    case Interface::cpp:
      break;
  }
  return "CheckOptions::form_class = FormClass::" +
         (c.is_flat() ? "flat(" + (c.width ? std::to_string(c.width) : std::string()) + ")" : name);
}

namespace {
BatchProblem with_finite_inputs(BatchProblem p) {
  for (auto* x : {&p.q, &p.k, &p.v, &p.state})
    for (double& e : *x)
      if (!std::isfinite(e)) e = 0;
  return p;
}

// What every scoring pass of one check shares: the problem, the reference, the
// class's magnitudes, the precision's u and smallest normal, the depth bound K,
// and the layouts of the out and den maps (score_map.hpp).
struct Scoring {
  const BatchProblem& p;
  const Reference& ref;
  Mags mag;
  double u, tiny, K;
  MapLayout out_layout, den_layout;
  bool den_map;  // the candidate has den: it gets a map too
  // e's score into its head's row of the out or the den map.
  void gather(MapAcc& out, MapAcc& den, const Element& e) const {
    const Index row = e.b * p.heads + e.h;
    MapAcc& a = e.c < 0 ? den : out;
    if (!a.started()) a.start(e.c < 0 ? den_layout : out_layout, row, 1);
    a.add(row, e.t, e.score);
  }
};

// Throws InputError when the candidate's or the reference's shapes do not match the problem.
void check_shapes(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand) {
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  if (cand.out.size() != no)
    throw InputError("candidate out holds " + std::to_string(cand.out.size()) + " values, expected " + std::to_string(no) +
                     " = batch·heads·n·dv");
  if (!cand.den.empty() && cand.den.size() != nd)
    throw InputError("candidate den holds " + std::to_string(cand.den.size()) + " values, expected " + std::to_string(nd));
  if (ref.out.size() != no || ref.den.size() != nd) throw InputError("reference does not match the problem's shape");
}

// One of our orders' worst score under magnitudes m; with `map_bar` (the
// worst of the orders mapped so far), its out and den maps become ours_* of
// r.maps when it is the worst of them (or the first).
double order_worst(const Scoring& s, Mags m, const CandidateOutputs& c, double* map_bar, Report& r) {
  const bool maps = map_bar != nullptr;
  struct OrderTally {
    double worst = 0;
    MapAcc out, den;
  };
  std::vector<OrderTally> t = score_all<OrderTally>(s.p, s.ref, m, c, s.u, s.tiny, s.K, [&](OrderTally& w, const Element& e) {
    if (e.skip != Skip::none) return;
    w.worst = std::max(w.worst, e.score);
    if (maps && (e.c >= 0 || s.den_map)) s.gather(w.out, w.den, e);
  });
  double worst = 0;
  for (const OrderTally& w : t) worst = std::max(worst, w.worst);
  if (maps && (worst > *map_bar || r.maps[0].ours_blocks.empty())) {
    *map_bar = worst;
    for (size_t i = 0; i < r.maps.size(); ++i) {
      r.maps[i].ours_blocks.clear();
      for (OrderTally& w : t) {
        MapAcc& a = i == 0 ? w.out : w.den;
        if (!a.started()) continue;
        a.flush();
        merge_map(r.maps[i], a, true);
      }
    }
  }
  return worst;
}

// CheckOptions::complete_baseline false: rule 3 holds for every element of
// the candidate once our orders' bar makes its worst score's ratio ≤ the
// limit (a higher bar or floor only lowers each ratio, division being
// monotone), when no other rule of the outputs fails.
struct EnoughBar {
  double worst, limit;
  bool reached(double bar) const { return worst / std::max(bar, kMinYardstick) <= limit; }
};
std::optional<EnoughBar> enough_bar(const Scoring& s, const CandidateOutputs& cand, const CheckOptions& opt) {
  if (opt.complete_baseline || opt.exact_tier) return std::nullopt;
  struct Worst {
    double score = 0;
    size_t scored = 0;
  };
  EnoughBar e{0, 0};
  size_t scored = 0;
  for (const Worst& w : score_all<Worst>(s.p, s.ref, s.mag, cand, s.u, s.tiny, s.K, [](Worst&w, const Element&x) {
         if (x.skip != Skip::none) return;
         ++w.scored;
         w.score = std::isfinite(x.score) && std::isfinite(w.score) ? std::max(w.score, x.score) : HUGE_VAL;
       }))
    e.worst = std::max(e.worst, w.score), scored += w.scored;
  if (scored == 0 || !(e.worst <= s.K + 1)) return std::nullopt;  // rule 1 or 2 fails, or nothing to judge
  e.limit = ratio_limit(scored);
  return e;
}

// Decay in log space along the sequence (last in the forms) errs with |b_t|,
// tens of times our other orders at production lengths: it is consulted only
// when their bar does not already give rule 3 (an order more only raises the
// bar, so the verdict is the same), and the ratio stays against the sharper
// orders. With complete_baseline off the test is `enough` itself (the loop
// reaches those orders only when it was not reached); else formed when first asked.
class LogNeed {
 public:
  LogNeed(const Scoring& s, const CandidateOutputs& cand, const CheckOptions& opt, const std::optional<EnoughBar>& enough)
      : s_(s), cand_(cand), opt_(opt) {
    if (!opt.complete_baseline && !opt.exact_tier) bar_ = enough;
  }
  bool operator()(double bar_so_far) {
    if (!bar_) {
      CheckOptions partial = opt_;
      partial.complete_baseline = false, partial.exact_tier = false;
      bar_ = enough_bar(s_, cand_, partial);
    }
    return *bar_ && !(*bar_)->reached(bar_so_far);
  }

 private:
  const Scoring& s_;
  const CandidateOutputs& cand_;
  const CheckOptions& opt_;
  std::optional<std::optional<EnoughBar>> bar_;
};

// Rule 3's bar: the worst score of our honest orders (baseline_forms) in the
// candidate's precision, and which order, into r (their maps into r.maps);
// they stop once the bar is `enough`.
// `record`: also score each order under the state-difference magnitudes into
// the memo, for the class hint's second judgement, which replays them.
void score_baseline(const Scoring& s, const CandidateOutputs& cand, const CheckOptions& opt, BaselineMemo* memo, bool record,
                    std::optional<EnoughBar> enough, Report& r) {
  const BatchProblem& p = s.p;
  const Reference& ref = s.ref;
  const bool replay = memo && memo->mode == BaselineMemo::Mode::replay;
  // The maps show the worst of our orders with decay by powers of γ: one
  // with log-space decay joins rule 3's bar but, its error growing along a
  // sequence by nature, would hide such growth from the diagnosis.
  double map_bar = -1;
  auto worst_under = [&](Mags m, const CandidateOutputs& c, bool maps) { return order_worst(s, m, c, maps ? &map_bar : nullptr, r); };
  // NaN/Inf inputs reach only the elements that depend on them, which are not
  // scored; with those inputs set to 0 every order of ours (also the ones that
  // mask by multiplying) gives the scored elements exactly as before.
  std::optional<BatchProblem> zeroed, reversed;
  const BatchProblem& finite = p.all_finite() ? p : zeroed.emplace(with_finite_inputs(p));
  const bool large = fast_baseline_wanted(finite);
  const std::vector<BaselineForm> forms = baseline_forms(finite, opt.form_class);
  // A flat class without a flat order of ours (a long head): our nested
  // orders' worst times the class's path ratio (flat_path_ratio) sets the bar.
  const bool scaled = opt.form_class.is_flat() && std::none_of(forms.begin(), forms.end(), [](const BaselineForm& f) {
                        return f.form == Form::literal || f.form == Form::chunked_pairs;
                      });
  // Orders that compute the same values: chunk widths at or beyond the longest
  // sequence (one chunk each) give those of the smallest such width.
  const Index longest = longest_sequence(finite);
  auto key_of = [&](const BaselineForm& f) {
    BaselineForm k = f;
    if (is_chunked(k.form) && k.chunk >= longest) k.chunk = std::max<Index>(longest, 1);
    return k.name();
  };
  std::map<std::string, double> same;  // key -> worst score of an order already evaluated
  LogNeed log_needed(s, cand, opt, enough);
  size_t forms_done = 0;
  for (const BaselineForm& f : forms) {
    if (opt.progress) opt.progress("baseline", static_cast<double>(forms_done++), static_cast<double>(forms.size()));
    if (f.log_along != engine::LogAlong::none && !log_needed(r.baseline_max_score)) continue;
    double worst = 0;
    const std::string key = key_of(f);
    if (const auto it = same.find(key); it != same.end()) {
      worst = it->second;
    } else if (replay && memo->sd_worst.count(key)) {
      worst = same[key] = memo->sd_worst.at(key);
    } else {
      const BatchProblem& fp = !f.reversed_features ? finite : reversed ? *reversed : reversed.emplace(with_reversed_features(finite));
      // A tensor-core precision's chunked orders round their products' operands on the fast engine only.
      const bool tc = tensor_core(r.precision) && is_chunked(f.form);
      const CandidateOutputs c =
          (large || tc || fp.has_state() || f.log_along != engine::LogAlong::none) && fast_baseline_applies(fp, f, true)
              ? fast_ours(fp, r.precision, f)
              : ours(fp, orders_precision(r.precision), f.form, f.chunk, DType::f64, f.log_decay);  // the library's forms: plain f32
      if (memo) ++memo->evaluated;
      const double bar = map_bar;
      worst = same[key] = worst_under(s.mag, c, !f.log_decay);
      if (map_bar != bar) r.maps[0].ours_form = f.name();
      if (record && !(enough && enough->reached(std::max(r.baseline_max_score, worst))))
        memo->sd_worst[key] = worst_under(mags_of(ref, FormClass::state_difference), c, false);
    }
    if (worst > r.baseline_max_score) {
      r.baseline_max_score = worst;
      r.baseline_worst_form = f.name();
    }
    if (enough && enough->reached(r.baseline_max_score)) break;  // rule 3 holds: a PASS needs no more
  }
  if (scaled) {
    const double k = r.path_ratio = flat_path_ratio(p.opt, longest, p.d, opt.form_class);
    r.baseline_max_score *= k;
    r.baseline_worst_form +=
        " x " + fmt(k) + " (" + to_string(opt.form_class) + "'s longest path over the nested one: no flat order of ours at this size)";
  }
  if (opt.progress) opt.progress("baseline", static_cast<double>(forms.size()), static_cast<double>(forms.size()));
}

// A head's tally added to the whole's: counts summed, worst elements gathered
// (the caller keeps the k worst), the larger rule-3 ratio (a NaN one wins);
// true when it took this head's.
bool add_head(Tally& to, const Tally& a) {
  to.elements += a.elements, to.scored += a.scored, to.nonfinite += a.nonfinite, to.over_bound += a.over_bound;
  to.out_of_range += a.out_of_range, to.underflow += a.underflow, to.exact_mismatches += a.exact_mismatches;
  to.max_score = std::max(to.max_score, a.max_score);
  to.worst.insert(to.worst.end(), a.worst.begin(), a.worst.end());
  if (!(a.baseline_ratio > to.baseline_ratio || (std::isnan(a.baseline_ratio) && !std::isnan(to.baseline_ratio)))) return false;
  to.baseline_ratio = a.baseline_ratio;
  to.ratio_element = a.ratio_element;
  return true;
}

// The score histogram's rows (bins: 0, (0,1], (1,2], (2,4], …, (2^19, 2^20], > 2^20), then the non-finite and unscored counts.
void fill_histogram(const std::vector<size_t>& bins, Report& r) {
  r.histogram.emplace_back("0", bins[0]);
  r.histogram.emplace_back("(0, 1]", bins[1]);
  for (size_t i = 2; i < 22; ++i)
    r.histogram.emplace_back("(" + fmt(std::ldexp(1.0, static_cast<int>(i) - 2)) + ", " + fmt(std::ldexp(1.0, static_cast<int>(i) - 1)) + "]", bins[i]);
  r.histogram.emplace_back("> 1.049e+06", bins[22]);
  r.histogram.emplace_back("non-finite", r.nonfinite);
  r.histogram.emplace_back("non-finite at a pole (not scored)", r.at_pole);
  r.histogram.emplace_back("reference non-finite (not scored)", r.reference_nonfinite);
  r.histogram.emplace_back("beyond the output dtype's range (not scored)", r.out_of_range);
  r.histogram.emplace_back("underflow regime (not scored)", r.underflow);
}

// The candidate's outputs, against the baseline's worst score: r's counts,
// worst elements, largest rule-3 ratio, histogram and maps. Returns the
// vacuous tensors (out, den): an all-zero one would pass them, their reference not all 0.
std::vector<std::string> tally_outputs(const Scoring& s, const CandidateOutputs& cand, const CheckOptions& opt, Report& r) {
  std::vector<HeadTally> tallies = score_all<HeadTally>(s.p, s.ref, s.mag, cand, r.u, s.tiny, s.K, [&](HeadTally& a, const Element& e) {
    ++a.elements;
    switch (e.skip) {
      case Skip::none: break;
      case Skip::at_pole: ++a.at_pole; break;
      case Skip::reference_nonfinite: ++a.reference_nonfinite; return;
      case Skip::out_of_range: ++a.out_of_range; return;
      case Skip::underflow: ++a.underflow; break;
    }
    if (opt.exact_tier && !(e.candidate == e.reference)) ++a.exact_mismatches;
    if (e.skip != Skip::none) return;
    ++a.scored;
    if (!std::isfinite(e.candidate)) ++a.nonfinite;
    else ++a.bins[score_bin(e.score)];
    if (e.score > r.bound) ++a.over_bound;
    a.max_score = std::max(a.max_score, e.score);
    a.keep(e, opt.worst);
    if (e.c >= 0 || s.den_map) s.gather(a.out_map, a.den_map, e);
    // Rule 3 per element: its score against the worst of our orders, or against
    // kFloorRoundings roundings of its own value when that is larger.
    const double floor = kFloorRoundings * (std::isfinite(e.unit) ? e.unit : 0);
    const double ratio = e.score == 0 ? 0 : e.score / rule3_yardstick(r.baseline_max_score, e.unit);
    if (ratio > a.baseline_ratio || (std::isnan(ratio) && !std::isnan(a.baseline_ratio))) {
      a.baseline_ratio = ratio;
      a.floor = floor;
      a.ratio_element = e;
    }
    // An all-zero candidate here: |ref| / (u·M), normalized o = 0: the residual |num| / (u·M_num).
    const int x = e.c < 0 ? 1 : 0;
    const size_t i = x ? s.p.den_index(e.b, e.h, e.t) : s.p.out_index(e.b, e.h, e.t, e.c);
    const double zref = x ? s.ref.den[i] : s.p.opt.normalize ? s.ref.num[i] : s.ref.out[i], zmag = x ? s.mag.den[i] : s.mag.num[i];
    const double z = zero_score(zref, zmag, r.u);
    a.nonzero[x] = a.nonzero[x] || zref != 0;
    a.zero_score[x] = std::max(a.zero_score[x], z);
    if (z > 0) a.zero_ratio[x] = std::max(a.zero_ratio[x], z / rule3_yardstick(r.baseline_max_score, std::fabs(zref) / zmag));
  });
  for (HeadTally& a : tallies)
    for (size_t i = 0; i < r.maps.size(); ++i)
      if (MapAcc& m = i == 0 ? a.out_map : a.den_map; m.started()) m.flush(), merge_map(r.maps[i], m, false);
  std::vector<size_t> bins(23, 0);
  for (const HeadTally& a : tallies) {
    if (add_head(r, a)) r.noise_floor = a.floor;
    r.at_pole += a.at_pole, r.reference_nonfinite += a.reference_nonfinite;
    for (size_t i = 0; i < bins.size(); ++i) bins[i] += a.bins[i];
  }
  r.worst = worst_of(std::move(r.worst), opt.worst);
  fill_histogram(bins, r);
  std::vector<std::string> vacuous;
  for (int x = 0; x < 2 && !opt.exact_tier; ++x) {
    double z = 0, ratio = 0;
    bool nonzero = false;
    for (const HeadTally& a : tallies) z = std::max(z, a.zero_score[x]), ratio = std::max(ratio, a.zero_ratio[x]), nonzero |= a.nonzero[x];
    if (nonzero && z <= r.bound && ratio <= ratio_limit(r.scored)) vacuous.push_back(x ? "den" : "out");
  }
  return vacuous;
}

// Rules 1–3 and the exact tier on the outputs: r's reasons, and whether each of its maps fails.
void output_reasons(Report& r) {
  if (r.nonfinite) r.reasons.push_back(std::to_string(r.nonfinite) + " non-finite values where the reference is finite");
  if (r.over_bound)
    r.reasons.push_back(std::to_string(r.over_bound) + " elements exceed the a priori bound " + fmt(r.bound) + " u·magnitude");
  r.ratio_limit = ratio_limit(r.scored);
  if (!(r.baseline_ratio <= r.ratio_limit))
    r.reasons.push_back("score " + fmt(r.ratio_element.score) + " at " + where(r.ratio_element) + " is " + fmt(r.baseline_ratio) +
                        "x the larger of the worst of our honest evaluation orders in " + to_string(r.precision) + " (" +
                        fmt(r.baseline_max_score) + (r.baseline_worst_form.empty() ? "" : " by " + r.baseline_worst_form) +
                        ") and the element's floor (" + fmt(r.noise_floor) + "); limit " + fmt(r.ratio_limit) + "x for " +
                        std::to_string(r.scored) + " scored elements");
  if (r.exact_mismatches)
    r.reasons.push_back(std::to_string(r.exact_mismatches) + " elements differ from the exact reference (exact tier demands bit equality)");
  for (ScoreMap& m : r.maps) {
    m.ours_form = r.maps[0].ours_form;
    m.limit = r.ratio_limit * std::max(r.baseline_max_score, 1.0);
    m.bound = r.bound;
    m.fails = !r.reasons.empty() && map_worst(m) > std::min(m.limit, m.bound);
  }
}

// The verdict, once the outputs are judged: the gradients' rows and reasons
// (SPEC §9), INCONCLUSIVE when too little was scored, PASS on no reason.
void decide_verdict(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt, BaselineMemo* memo,
                    std::vector<std::string> vacuous, Report& r) {
  check_gradients(p, ref, cand, opt, r, memo);
  check_final_state(p, ref, cand, opt, r);
  // A tensor an all-zero candidate would pass tells nothing: never a PASS on it, never instead of a FAIL.
  for (const auto* v : {&r.gradients, &r.states})
    for (const GradientRow& g : *v)
      if (g.checked && g.vacuous) vacuous.push_back(g.name);
  if (r.reasons.empty())
    for (const std::string& t : vacuous) {
      r.inconclusive = true;
      r.reasons.push_back(t + ": an all-zero " + t + " would pass: the bound of its class (" + to_string(opt.form_class) + ", " +
                          to_string(r.precision) + ") exceeds every value: too little was checked; test in a higher precision" +
                          (opt.form_class == FormClass::masked ? "" : " or declare masked"));
    }
  // A gradient or state part with too little scored is the verdict's only reason when nothing else fails
  // (a state's entries that depend on NaN/Inf inputs, its only unscored kind, are not counted).
  for (const auto* v : {&r.gradients, &r.states})
    for (const GradientRow& g : *v) {
      const size_t counted = g.elements - (v == &r.states ? g.ill_conditioned : 0), left = counted - g.scored;
      if (g.checked && counted > 0 && static_cast<double>(left) > kMaxUnscoredFraction * static_cast<double>(counted) &&
          r.reasons.empty()) {
        r.inconclusive = true;
        // Mostly near a pole of 1/(den ⊕ ε) (Gaussian q, k make den change sign): say so, and what to test instead.
        const bool pole = v == &r.gradients && !r.gradients_ill_tokens.empty() && 2 * g.ill_conditioned > left;
        r.reasons.push_back(
            g.name + ": " + std::to_string(left) + " of its " + std::to_string(counted) + " elements are not scored" +
            (pole ? " because they depend on a den ⊕ ε within its error bound of 0 (the tokens are listed below), where "
                    "a normalized gradient cannot be bounded: too little was checked; " +
                        std::string(kAwayFromPole) + ", or in a higher precision"
                  : ": too little was checked. Of them, " +
                        unscored_causes(v == &r.states ? 0 : g.ill_conditioned, g.out_of_range, g.underflow, g.dtype, r.precision)));
      }
    }
  // Never a PASS on nothing: a verdict needs scored elements.
  const size_t considered = r.elements - r.reference_nonfinite, unscored = r.at_pole + r.out_of_range + r.underflow;
  if (r.reasons.empty() && (r.scored == 0 || static_cast<double>(unscored) > kMaxUnscoredFraction * static_cast<double>(considered))) {
    r.inconclusive = true;
    const std::string causes = unscored_causes(r.at_pole, r.out_of_range, r.underflow, cand.out_dtype, r.precision);
    r.reasons.push_back(r.scored == 0 ? "no element was scored (" + std::to_string(r.elements) +
                                            " elements: " + std::to_string(r.reference_nonfinite) + " depend on NaN/Inf inputs" +
                                            (causes.empty() ? "" : "; " + causes) + "): nothing was checked"
                                      : std::to_string(unscored) + " of the " + std::to_string(considered) +
                                            " elements that do not depend on NaN/Inf inputs are not scored, more than " +
                                            fmt(100 * kMaxUnscoredFraction) + "%: too little was checked. Of them, " + causes);
  }
  r.pass = r.reasons.empty();
}

// A failing report's follow-ups: the class hint, the dumped case, the diagnosis.
void explain_failure(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt,
                     BaselineMemo* memo, Report& r) {
  if (r.pass || r.inconclusive) return;
  // A masked candidate that fails only the numeric rules: would another class
  // explain it — cancellation of unmasked partial sums (state_difference), or
  // terms added one by one into one accumulator (flat)?
  if (opt.form_class == FormClass::masked && r.exact_mismatches == 0 && r.nonfinite == 0) {
    std::vector<std::pair<FormClass, const char*>> others;
    if (has_state_difference_magnitude(p.opt))
      others.push_back({FormClass::state_difference, "a kernel that subtracts unmasked partial sums, S*C - G"});
    // la1's nested sums are already flat (one sum per output): no other class there.
    if (info(p.opt.variant).forms.has(Form::literal) && order_of(p.opt.variant) >= 2)
      others.push_back({FormClass::flat(),
                        "a kernel that adds the terms of the sum one by one into one accumulator, a literal loop or "
                        "pair by pair inside chunks (flat:W for chunks of width W)"});
    // Of the classes that pass it, the one whose rule 3 fits best (the smallest
    // ratio to our orders of that class): a literal loop passes as
    // state_difference too, but far closer to the flat orders.
    double best = HUGE_VAL;
    const char* best_why = nullptr;
    for (const auto& [cls, why] : others) {
      CheckOptions o = opt;
      o.form_class = cls;
      o.dump_on_failure.clear();
      o.diagnose = false;
      o.complete_baseline = true;  // which class fits best compares their ratios
      BaselineMemo none;
      // The memo holds our orders' scores under the state-difference magnitudes only.
      const bool sd = cls == FormClass::state_difference;
      if (memo && sd) memo->mode = BaselineMemo::Mode::replay;
      const Report x = check(p, ref, cand, o, memo && sd ? memo : &none);
      // Only against our own flat orders: the path-scaled bar of a long head is no evidence of a flat sum.
      if (!x.pass || !(x.baseline_ratio < best) || x.path_ratio != 1) continue;
      best = x.baseline_ratio, best_why = why;
      r.passing_class = cls;
    }
    if (r.passing_class) {
      r.passing_ratio = best;
      r.state_difference_would_pass = *r.passing_class == FormClass::state_difference;
      r.reasons.push_back("hint: judged as " + declare_class(*r.passing_class, opt.interface) + " (" + best_why +
                          ") it passes; declare that class if it is what the kernel computes");
    }
  }
  if (!opt.dump_on_failure.empty()) {
    FixtureMeta meta;
    meta.case_name = opt.dump_on_failure;
    meta.exact_tier = opt.exact_tier;
    dump_case(opt.dump_on_failure, make_fixture(p, ref, meta), cand);
    r.dumped = opt.dump_on_failure + ".safetensors";
  }
  r.hints = diagnose(p, r);
  if (opt.diagnose) r.diagnosis = differential_diagnosis(p, ref, cand, r, opt.continuation_splits, opt.diagnosis_work);
}

}  // namespace

Report check(const BatchProblem& p, const Reference& given, const CandidateOutputs& cand, const CheckOptions& opt) {
  BaselineMemo memo;
  return check(p, given, cand, opt, &memo);
}

Report check(const BatchProblem& p, const Reference& given, const CandidateOutputs& cand, const CheckOptions& opt, BaselineMemo* memo) {
  // A hand-built Reference may lack num and the state-difference magnitudes.
  std::optional<Reference> completed;
  if (!is_complete(given) && given.out.size() == given.mag_num.size() && given.den.size() == given.mag_den.size())
    complete_reference(p, completed.emplace(given));
  const Reference& ref = completed ? *completed : given;
  check_shapes(p, ref, cand);

  Report r;
  r.precision = opt.precision.value_or(precision_of(cand.out_dtype));
  r.u = unit_roundoff(r.precision);
  const double K = depth_bound(p.opt, longest_sequence(p), p.d, opt.form_class);
  r.bound = K + 1;
  r.exact_tier = opt.exact_tier;
  r.form_class = opt.form_class;
  // Where the scores lie: the out and den maps, each head's row gathered apart (score_map.hpp).
  const Scoring s{p, ref, mags_of(ref, opt.form_class), r.u, info(r.precision).smallest_normal(), K,
                  map_layout(p, "out", p.batch * p.heads, p.heads, p.heads / p.kv_heads, p.n, true),
                  map_layout(p, "den", p.batch * p.heads, p.heads, p.heads / p.kv_heads, p.n, true), !cand.den.empty()};
  r.maps = {s.out_layout.proto};
  if (s.den_map) r.maps.push_back(s.den_layout.proto);
  // The class hint may judge again with the state-difference magnitudes: score
  // each order under those too now (cheap next to evaluating it), and take
  // them from the memo then.
  const bool replay = memo && memo->mode == BaselineMemo::Mode::replay;
  const bool record = memo && !replay && opt.form_class == FormClass::masked && has_state_difference_magnitude(p.opt);
  score_baseline(s, cand, opt, memo, record, enough_bar(s, cand, opt), r);
  std::vector<std::string> vacuous = tally_outputs(s, cand, opt, r);
  output_reasons(r);
  decide_verdict(p, ref, cand, opt, memo && (record || replay) ? memo : nullptr, std::move(vacuous), r);
  explain_failure(p, ref, cand, opt, memo, r);
  return r;
}

Report check(const BatchProblem& p, const CandidateOutputs& cand, const CheckOptions& opt) {
  return check(p, compute_reference(p), cand, opt);
}

namespace {
// The diagnosis lines of a report's text.
std::string diagnosis_text(const std::vector<Diagnosis>& ds) {
  std::string s;
  for (const Diagnosis& d : ds)
    s += "  diagnosis: matches " + d.id + " on " + fmt(100 * d.fraction) + "% of " + d.part + ": " + d.what + "; fix: " + d.fix + "\n";
  return s;
}

// The report's lines of gradient or final-state rows (no_rule3: why rule 3 did not judge a row).
void print_rows(std::ostream& os, const std::vector<GradientRow>& rows, const char* no_rule3) {
  for (const GradientRow& g : rows) {
    if (!g.checked) {
      os << "    " << g.name << ": not checked (the candidate has no " << g.name << ")\n";
      continue;
    }
    os << "    " << g.name << ": " << (g.fails() ? "FAIL" : "ok") << ", elements " << g.elements << ": scored " << g.scored
       << ", non-finite " << g.nonfinite << ", over bound " << g.over_bound;
    if (g.ill_conditioned) os << ", ill-conditioned (not scored) " << g.ill_conditioned;
    if (g.out_of_range) os << ", beyond the dtype's range " << g.out_of_range;
    if (g.underflow) os << ", in the underflow regime " << g.underflow;
    os << "; worst score " << fmt(g.max_score);
    if (g.exact_tier) os << "; exact tier: " << g.exact_mismatches << " differ";
    if (g.baseline_applied)
      os << "; ours worst " << fmt(g.baseline_max_score) << (g.baseline_worst_form.empty() ? "" : " (" + g.baseline_worst_form + ")")
         << ", ratio " << fmt(g.baseline_ratio) << " (limit " << fmt(g.ratio_limit) << ")";
    else os << "; rule 3 not applied (" << no_rule3 << ")";
    os << "\n";
    if (g.worst.empty() || g.max_score == 0) continue;
    const bool st = g.name.rfind("dstate.", 0) == 0 || g.name.rfind("state.", 0) == 0;  // b: the sequence, t: the row
    os << "      worst elements of " << g.name
       << (st ? ":\n          seq head   row column      candidate      reference      magnitude     score\n"
              : ":\n        batch head token column      candidate      reference      magnitude     score\n");
    for (size_t i = 0; i < std::min<size_t>(g.worst.size(), 5); ++i) {
      const Element& e = g.worst[i];
      char line[200];
      std::snprintf(line, sizeof line, "        %5ld %4ld %5ld %6ld %14.7g %14.7g %14.7g %9.4g\n", static_cast<long>(e.b),
                    static_cast<long>(e.h), static_cast<long>(e.t), static_cast<long>(e.c), e.candidate, e.reference, e.magnitude, e.score);
      os << line;
    }
  }
}
}  // namespace

std::string Report::text() const {
  std::ostringstream os;
  os << verdict() << "\n";
  for (const auto& why : reasons) os << "  reason: " << why << "\n";
  if (!hints.empty()) os << "  hints (from where the error lies; the verdict does not depend on them):\n";
  for (const auto& h : hints) os << "    hint: " << h << "\n";
  os << diagnosis_text(diagnosis);
  os << "  precision " << to_string(precision) << " (u = " << fmt(u) << "); scores are |candidate - reference| / (u * magnitude)\n"
     << "  form class " << to_string(form_class)
     << (form_class == FormClass::state_difference ? " (unmasked-order magnitude)" : " (masked magnitude)")
     << "; normalized outputs are scored by the residual |out*(den+eps) - num| / (u*(M_num + |out|*(M_den+eps)))\n"
     << "  bound K+1 = " << fmt(bound) << ", floor " << fmt(noise_floor) << "\n"
     << "  elements " << elements << ": scored " << scored << ", non-finite at a pole " << at_pole << ", non-finite " << nonfinite
     << ", over bound " << over_bound;
  if (reference_nonfinite) os << ", depending on NaN/Inf inputs " << reference_nonfinite;
  if (out_of_range) os << ", beyond the output dtype's range " << out_of_range;
  if (underflow) os << ", in the underflow regime " << underflow;
  os << "\n"
     << "  worst score " << fmt(max_score) << "; baseline worst " << fmt(baseline_max_score)
     << (baseline_worst_form.empty() ? "" : " (" + baseline_worst_form + ")") << "; ratio " << fmt(baseline_ratio) << " (limit "
     << fmt(ratio_limit) << ")\n";
  if (exact_tier) os << "  exact tier: " << exact_mismatches << " elements differ from the exact reference\n";
  if (!dumped.empty()) {
    const std::string stem = dumped.substr(0, dumped.size() - std::string(".safetensors").size());
    os << "  failing case written: hla check " << dumped << " " << stem << ".candidate.safetensors --precision " << to_string(precision)
       << (form_class == FormClass::masked ? "" : " --form-class " + to_string(form_class)) << "\n";
  }
  if (!worst.empty()) {
    os << "  worst elements:\n    " << "batch head token column      candidate      reference      magnitude     score\n";
    for (const auto& e : worst) {
      char line[200];
      std::snprintf(line, sizeof line, "    %5ld %4ld %5ld %6s %14.7g %14.7g %14.7g %9.4g\n", static_cast<long>(e.b),
                    static_cast<long>(e.h), static_cast<long>(e.t), e.c < 0 ? "den" : std::to_string(e.c).c_str(),
                    e.candidate, e.reference, e.magnitude, e.score);
      os << line;
    }
  }
  os << "  score histogram:\n";
  for (const auto& [name, count] : histogram)
    if (count) os << "    " << name << ": " << count << "\n";
  bool any_checked = false;
  for (const GradientRow& g : gradients) any_checked = any_checked || g.checked;
  if (any_checked) {
    os << "  gradients (SPEC §9): scores are |candidate - reference| / (u * M), M the gradient's magnitude"
       << " (where normalized: M* = (K_b M + K_q M_kappa)/K_g, each token's upstream weighed by the conditioning of its den + eps); bound "
          "K_g+1 = "
       << fmt(gradient_bound) << "\n";
    print_rows(os, gradients, "this variant has no backward form of ours in the engine");
  }
  if (!states.empty()) {
    os << "  final state (SPEC §8): scores are |candidate - reference| / (u * M), M the part's magnitude in the class; bound K+1 = "
       << fmt(bound) << "\n";
    print_rows(os, states, "no subtracting order of ours for this part");
  }
  if (!gradients_note.empty()) os << "  " << gradients_note << "\n";
  if (!gradients_ill_tokens.empty()) os << "  " << gradients_ill_tokens << "\n";
  return os.str();
}

static nlohmann::json diagnosis_json(const std::vector<Diagnosis>& ds) {
  nlohmann::json j = nlohmann::json::array();
  for (const Diagnosis& d : ds) j.push_back({{"id", d.id}, {"what", d.what}, {"fix", d.fix}, {"part", d.part}, {"fraction", d.fraction}});
  return j;
}

nlohmann::json Report::json() const {
  auto num = [](double x) -> nlohmann::json { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf")); };
  nlohmann::json w = nlohmann::json::array();
  for (const auto& e : worst)
    w.push_back({{"batch", e.b}, {"head", e.h}, {"token", e.t}, {"column", e.c < 0 ? nlohmann::json("den") : nlohmann::json(e.c)},
                 {"candidate", num(e.candidate)}, {"reference", num(e.reference)}, {"magnitude", num(e.magnitude)}, {"score", num(e.score)}});
  nlohmann::json h = nlohmann::json::array();
  for (const auto& [name, count] : histogram) h.push_back({{"bin", name}, {"count", count}});
  nlohmann::json grads = nlohmann::json::array();
  auto row_json = [&](const GradientRow& g) -> nlohmann::json {
    nlohmann::json gw = nlohmann::json::array();
    const bool st = g.name.rfind("dstate.", 0) == 0 || g.name.rfind("state.", 0) == 0;
    for (const auto& e : g.worst)
      gw.push_back({{st ? "sequence" : "batch", e.b}, {"head", e.h}, {st ? "row" : "token", e.t},
                    {"column", e.c < 0 ? nlohmann::json(nullptr) : nlohmann::json(e.c)}, {"candidate", num(e.candidate)},
                    {"reference", num(e.reference)}, {"magnitude", num(e.magnitude)}, {"score", num(e.score)}});
    return {{"name", g.name},
            {"checked", g.checked},
            {"pass", g.checked && !g.fails()},
            {"elements", g.elements},
            {"scored", g.scored},
            {"nonfinite", g.nonfinite},
            {"over_bound", g.over_bound},
            {"ill_conditioned", g.ill_conditioned},
            {"out_of_range", g.out_of_range},
            {"underflow", g.underflow},
            {"max_score", num(g.max_score)},
            {"worst", gw},
            {"baseline_applied", g.baseline_applied},
            {"baseline_max_score", num(g.baseline_max_score)},
            {"baseline_worst_form", g.baseline_worst_form},
            {"baseline_ratio", num(g.baseline_ratio)},
            {"ratio_limit", g.ratio_limit},
            {"over_ratio", g.over_ratio},
            {"exact_tier", g.exact_tier},
            {"exact_mismatches", g.exact_mismatches}};
  };
  nlohmann::json states_json = nlohmann::json::array();
  for (const GradientRow& g : gradients) grads.push_back(row_json(g));
  for (const GradientRow& g : states) states_json.push_back(row_json(g));
  return {{"gradients", grads},
          {"states", states_json},
          {"gradient_bound", gradient_bound},
          {"gradients_note", gradients_note},
          {"gradients_ill_tokens", gradients_ill_tokens},
          {"pass", pass},
          {"verdict", verdict()},
          {"hints", hints},
          {"diagnosis", diagnosis_json(diagnosis)},
          {"inconclusive", inconclusive},
          {"reasons", reasons},
          {"precision", to_string(precision)},
          {"u", u},
          {"bound", bound},
          {"noise_floor", noise_floor},
          {"max_score", num(max_score)},
          {"baseline_max_score", num(baseline_max_score)},
          {"baseline_ratio", num(baseline_ratio)},
          {"ratio_limit", ratio_limit},
          {"path_ratio", path_ratio},
          {"elements", elements},
          {"scored", scored},
          {"at_pole", at_pole},
          {"form_class", to_string(form_class)},
          {"baseline_worst_form", baseline_worst_form},
          {"state_difference_would_pass", state_difference_would_pass},
          {"reference_nonfinite", reference_nonfinite},
          {"out_of_range", out_of_range},
          {"underflow", underflow},
          {"nonfinite", nonfinite},
          {"over_bound", over_bound},
          {"exact_tier", exact_tier},
          {"exact_mismatches", exact_mismatches},
          {"dumped", dumped},
          {"worst", w},
          {"histogram", h}};
}

}  // namespace hla::check
