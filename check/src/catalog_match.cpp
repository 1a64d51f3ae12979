// Differential diagnosis (catalog.hpp): a failing candidate matches a wrong
// form of the catalog when its error against that form is within the pass
// rule's per-element bound (SPEC §7: rule 2's K + 1, and rule 3's line, the
// smaller) on nearly every scored element, including nearly every element
// whose error against the reference exceeds it. Values of the wrong form are
// in double, a rounding far below any candidate's: its own error is nothing
// next to the bound. The error against a wrong form is measured against the
// larger of the class's and the unmasked-order magnitude (a wrong form may
// sum more than the masked terms), the error against the reference as the check does.
// A precision row's form is the reference judged at a coarser u (bf16, f16)
// than the declared f32: it names a failure only where no mistake row does.
#include "catalog.hpp"

#include "hla/bounds.hpp"
#include "hla/check/gradient.hpp"
#include "hla/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <type_traits>

namespace hla::check {
namespace catalog_match {

// A diagnosis needs this much: of the scored elements, and of the wrong ones.
constexpr double kMatchFraction = 0.9;

struct Count {
  size_t scored = 0, match = 0, wrong = 0, wrong_match = 0;
  double closeness = 0;  // Σ over the wrong elements of min(1, error / bound) against the form (ranks ties)
  void add(double err_ref, double err_form, double unit_ref, double unit_form, double bound) {
    ++scored;
    const bool wrong_here = !(err_ref <= bound * unit_ref), matches = err_form <= bound * unit_form;
    match += matches;
    if (!wrong_here) return;
    ++wrong, wrong_match += matches;
    closeness += std::min(1.0, err_form / (bound * unit_form));
  }
  void add(const Count& o) {
    scored += o.scored, match += o.match, wrong += o.wrong, wrong_match += o.wrong_match, closeness += o.closeness;
  }
};

// |c − x| beyond the rounding of the stored value; a non-finite c matches only the same value.
double error(double c, double x, const DTypeLimits& lim) {
  if (!std::isfinite(c) || !std::isfinite(x)) return (c == x || (std::isnan(c) && std::isnan(x))) ? 0.0 : HUGE_VAL;
  return std::max(0.0, std::fabs(c - x) - lim.rounding_error(x));
}

// Rule 2 and rule 3's bound of one output element, in units of u·magnitude.
double element_bound(const Report& r, double ref, double magnitude) {
  const double unit = magnitude > 0 ? std::fabs(ref) / magnitude : 0;
  return std::max(1.0, std::min(r.bound, r.ratio_limit * rule3_yardstick(r.baseline_max_score, unit)));
}

// The outputs (out, and den where the candidate gives it) against the form's.
Count compare_outputs(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const WrongForm& form, const Report& r) {
  const CandidateOutputs& w = form.values;
  const bool sd = r.form_class == FormClass::state_difference, own = !form.magnitude.out.empty();
  const std::vector<double>& mn = sd ? ref.mag_num_sd : ref.mag_num;
  const std::vector<double>& md = sd ? ref.mag_den_sd : ref.mag_den;
  auto wider = [](const std::vector<double>& a, const std::vector<double>& b, const std::vector<double>& c, size_t i) {
    return std::max({a[i], b.empty() ? 0.0 : b[i], c.empty() ? 0.0 : std::fabs(c[i])});
  };
  const double eps = to_double(p.opt.eps), u = r.u, uf = form.judged_at ? unit_roundoff(*form.judged_at) : u;
  Count n;
  for (size_t i = 0; i < cand.out.size(); ++i) {
    const size_t di = i / static_cast<size_t>(p.dv);
    double m = mn[i], mw = wider(mn, ref.mag_num_sd, form.magnitude.out, i);
    if (p.opt.normalize) {  // the residual's tolerance (SPEC §7) as one on the output
      const double D = std::fabs(normalizer(ref.den[di], eps, p.opt.eps_mode)), c = std::fabs(cand.out[i]);
      const double Dw = own ? std::fabs(normalizer(w.den[di], eps, p.opt.eps_mode)) : D;
      if (!(D > 0) || !(Dw > 0)) continue;
      m = (m + c * (md[di] + eps)) / D, mw = (mw + c * (wider(md, ref.mag_den_sd, form.magnitude.den, di) + eps)) / Dw;
    }
    if (!std::isfinite(ref.out[i]) || !(m > 0) || !std::isfinite(m)) continue;
    const DTypeLimits& lim = limits(cand.out_dtype);
    n.add(error(cand.out[i], ref.out[i], lim), error(cand.out[i], w.out[i], lim), u * m, uf * mw, element_bound(r, ref.out[i], m));
  }
  if (!cand.den.empty() && !w.den.empty())
    for (size_t i = 0; i < cand.den.size(); ++i) {
      const double m = md[i];
      if (!std::isfinite(ref.den[i]) || !(m > 0)) continue;
      const DTypeLimits& lim = limits(cand.den_dtype);
      n.add(error(cand.den[i], ref.den[i], lim), error(cand.den[i], w.den[i], lim), u * m,
            uf * wider(md, ref.mag_den_sd, form.magnitude.den, i), element_bound(r, ref.den[i], m));
    }
  return n;
}

// One gradient tensor: the candidate's, the reference's, the form's values, magnitudes and flags.
struct GradientTensor {
  const std::vector<double>*cand, *ref, *form, *mag;
  const std::vector<uint8_t>* flags;
  DType dtype;
};
std::optional<GradientTensor> tensor(const std::string& name, const CandidateOutputs& c, const GradientReference& g,
                                     const GradientYardstick& y, const CandidateOutputs& w) {
  if (name == "dq") return GradientTensor{&c.dq, &g.dq, &w.dq, &y.q, &g.dq_flags, c.dq_dtype};
  if (name == "dk") return GradientTensor{&c.dk, &g.dk, &w.dk, &y.k, &g.dk_flags, c.dk_dtype};
  if (name == "dv") return GradientTensor{&c.dv, &g.dv, &w.dv, &y.v, &g.dv_flags, c.dv_dtype};
  return std::nullopt;
}

// The failing gradients (dq, dk, dv) against the form's, each element against
// the magnitude the check scores it with (M*: +inf where ill-conditioned, not scored).
Count compare_gradients(const Reference& ref, const GradientYardstick& y, const CandidateOutputs& cand, const WrongForm& form,
                        const Report& r) {
  const CandidateOutputs& w = form.values;
  const double uf = form.judged_at ? unit_roundoff(*form.judged_at) : r.u;
  Count n;
  for (const GradientRow& row : r.gradients) {
    const std::optional<GradientTensor> t = tensor(row.name, cand, *ref.grad, y, w);
    if (!t || !row.checked || t->cand->size() != t->ref->size() || t->form->size() != t->ref->size()) continue;
    const bool flagged = t->flags->size() == t->ref->size();
    if (t->mag->size() != t->ref->size()) continue;
    for (size_t i = 0; i < t->ref->size(); ++i) {
      const double m = (*t->mag)[i], x = (*t->ref)[i], c = (*t->cand)[i];
      if ((flagged && ((*t->flags)[i] & engine::kIllConditioned)) || !std::isfinite(x) || !(m > 0) || !std::isfinite(m)) continue;
      const double rule3 = row.baseline_applied ? row.ratio_limit * row_yardstick(row, std::fabs(x) / m) : r.gradient_bound;
      n.add(error(c, x, limits(t->dtype)), error(c, (*t->form)[i], limits(t->dtype)), r.u * m, uf * m,
            std::max(1.0, std::min(r.gradient_bound, rule3)));
    }
  }
  return n;
}

// The failing final state against the form's (values.final_state), each
// element against its magnitude in the candidate's class (and the form's
// against the larger of both), the bound rule 2's and the loosest rule 3 line
// of the state rows.
Count compare_final_state(const Reference& ref, const CandidateOutputs& cand, const WrongForm& form, const Report& r) {
  const engine::StateReference& s = ref.final_state;
  const std::vector<double>& w = form.values.final_state;
  Count n;
  if (w.size() != s.values.size() || cand.final_state.size() != s.values.size() || s.mag.size() != s.values.size()) return n;
  const bool sd = r.form_class == FormClass::state_difference && s.mag_sd.size() == s.values.size();
  for (size_t i = 0; i < s.values.size(); ++i) {
    const double m = sd ? s.mag_sd[i] : s.mag[i], mw = std::max(s.mag[i], s.mag_sd.empty() ? 0.0 : s.mag_sd[i]);
    if (!std::isfinite(s.values[i]) || !(m > 0) || !std::isfinite(m)) continue;
    double rule3 = 0;  // the loosest rule 3 line of the state rows at this element
    for (const GradientRow& row : r.states)
      if (row.baseline_applied) rule3 = std::max(rule3, row.ratio_limit * row_yardstick(row, std::fabs(s.values[i]) / m));
    const DTypeLimits& lim = limits(cand.final_state_dtype);
    n.add(error(cand.final_state[i], s.values[i], lim), error(cand.final_state[i], w[i], lim), r.u * m, r.u * mw,
          std::max(1.0, rule3 > 0 ? std::min(r.bound, rule3) : r.bound));
  }
  return n;
}

std::string failing_parts(const Report& r, bool gradients) {
  std::string s;
  for (const ScoreMap& m : r.maps) {
    const bool grad = m.name == "dq" || m.name == "dk" || m.name == "dv";
    if (grad == gradients && (grad || m.name == "out" || m.name == "den")) s += (s.empty() ? "" : ",") + m.name;
  }
  return s;
}

// At scale (above `work`, CheckOptions::diagnosis_work) the output rows that
// each head's own inputs decide are evaluated and compared on the first heads
// of batch entry 0 only (whole K/V groups, at least one, about `work`): a
// wrong form costs up to 7 chunk widths of double-precision passes, which on
// every head of [2, 8, 4096, 128] took over 10 minutes (2026-12-06).
// The first heads of p, with the reference's and the candidate's outputs
// there: the leading part of each [B, H, n, ·] array; the initial state of
// each sequence's first heads.
struct FirstHeads {
  BatchProblem p;
  Reference ref;
  CandidateOutputs cand;
};
std::optional<FirstHeads> first_heads(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, double work) {
  const Index group = p.heads / p.kv_heads;
  const double per_group = static_cast<double>(p.n) * static_cast<double>(p.d * (p.d + p.dv)) * static_cast<double>(group);
  if (per_group * static_cast<double>(p.batch * p.kv_heads) <= work) return std::nullopt;  // all within the work
  const Index groups = std::max<Index>(1, static_cast<Index>(work / per_group));
  const Index kv = std::min(groups, p.kv_heads);
  std::vector<Index> hs(static_cast<size_t>(kv * group));
  std::iota(hs.begin(), hs.end(), Index{0});
  FirstHeads f{p.subset({0}, hs, kv), {}, {}};
  const BatchProblem& s = f.p;
  // The leading part of a [B, H, n, ·] array: batch entry 0's first heads.
  auto lead = [](const auto& x, Index count) {
    using V = std::decay_t<decltype(x)>;
    return x.empty() ? x : V(x.begin(), x.begin() + std::min(static_cast<std::ptrdiff_t>(count), static_cast<std::ptrdiff_t>(x.size())));
  };
  auto heads_of = [&](const auto& x) { return p.state_subset(x, {0}, hs); };
  const Index outs = s.heads * p.n * p.dv, dens = s.heads * p.n, qs = s.heads * p.n * p.d, ks = s.kv_heads * p.n * p.d,
              vs = s.kv_heads * p.n * p.dv;
  f.ref.out = lead(ref.out, outs), f.ref.num = lead(ref.num, outs), f.ref.den = lead(ref.den, dens);
  f.ref.mag_num = lead(ref.mag_num, outs), f.ref.mag_den = lead(ref.mag_den, dens);
  f.ref.mag_num_sd = lead(ref.mag_num_sd, outs), f.ref.mag_den_sd = lead(ref.mag_den_sd, dens);
  f.ref.flags = lead(ref.flags, outs), f.ref.den_flags = lead(ref.den_flags, dens);
  f.ref.bits = ref.bits;
  f.cand = cand;
  f.cand.out = lead(cand.out, outs), f.cand.den = lead(cand.den, dens);
  if (ref.grad) {  // dq [B, H, n, d], dk, dv [B, Hkv, n, ·]: their leading parts too
    const GradientReference& g = *ref.grad;
    GradientReference& h = f.ref.grad.emplace();
    h.dout = lead(g.dout, outs), h.dden = lead(g.dden, dens);
    h.dq = lead(g.dq, qs), h.mag_dq = lead(g.mag_dq, qs), h.dq_flags = lead(g.dq_flags, qs);
    h.dk = lead(g.dk, ks), h.mag_dk = lead(g.mag_dk, ks), h.dk_flags = lead(g.dk_flags, ks);
    h.dv = lead(g.dv, vs), h.mag_dv = lead(g.mag_dv, vs), h.dv_flags = lead(g.dv_flags, vs);
    h.dstate = heads_of(g.dstate), h.mag_dstate = heads_of(g.mag_dstate), h.dstate_flags = heads_of(g.dstate_flags);
    h.bits = g.bits;
    f.cand.dq = lead(cand.dq, qs), f.cand.dk = lead(cand.dk, ks), f.cand.dv = lead(cand.dv, vs), f.cand.dstate = heads_of(cand.dstate);
  }
  return f;
}

struct Scored {
  Diagnosis d;
  double closeness = 0;    // mean over the wrong elements (lower: closer)
  bool precision = false;  // a precision row (WrongForm::judged_at): ranked after every mistake row
};

}  // namespace catalog_match

std::vector<Diagnosis> differential_diagnosis(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const Report& r,
                                              const std::vector<Index>& splits, double work) {
  using namespace catalog_match;
  // NaN/Inf inputs reach only elements that are not scored; the forms are evaluated with them as 0.
  std::optional<BatchProblem> zeroed;
  if (!p.all_finite()) {
    zeroed = p;
    for (auto* x : {&zeroed->q, &zeroed->k, &zeroed->v, &zeroed->state})
      for (double& e : *x)
        if (!std::isfinite(e)) e = 0;
  }
  const BatchProblem& fp = zeroed ? *zeroed : p;
  bool outputs_fail = false, gradients_fail = false;
  for (const ScoreMap& m : r.maps) {
    const bool grad = m.name == "dq" || m.name == "dk" || m.name == "dv";
    (grad ? gradients_fail : outputs_fail) = (grad ? gradients_fail : outputs_fail) || m.fails;
  }
  outputs_fail = outputs_fail || r.nonfinite > 0 || r.over_bound > 0 || !(r.baseline_ratio <= r.ratio_limit);
  const bool state_fails = std::any_of(r.states.begin(), r.states.end(), [](const GradientRow& g) { return g.fails(); });
  const std::optional<FirstHeads> first = outputs_fail || gradients_fail ? first_heads(fp, ref, cand, work) : std::nullopt;
  // Gradient rows run on the first heads where those are taken (none reads across K/V groups).
  std::optional<GradientYardstick> yard;
  if (gradients_fail && ref.grad)
    yard = first ? gradient_yardstick(first->p, first->ref, *first->ref.grad, r.form_class, r.u)
                 : gradient_yardstick(p, ref, *ref.grad, r.form_class, r.u);
  const std::vector<Mistake>& cat = mistake_catalog();
  std::vector<std::optional<Scored>> best(cat.size());
  // Rows in parallel: each evaluates its forms alone, so the result does not depend on the threads.
  parallel_for(cat.size(), worker_threads(), [&](size_t i) {
    const Mistake& m = cat[i];
    if (m.final_state ? !state_fails : m.gradients ? !yard : !outputs_fail) return;
    if (m.continued && splits.empty()) return;  // a continuation row, on a one-pass check
    // An output or gradient row on the first heads (at scale, unless it reads across heads).
    const bool on_first = first && !m.final_state && !m.continued && !m.across_heads;
    const BatchProblem& ep = on_first ? first->p : fp;
    const Reference& eref = on_first ? first->ref : ref;
    const CandidateOutputs& ecand = on_first ? first->cand : cand;
    if (!m.applies(ep, eref)) return;
    std::vector<WrongForm> forms;
    try {
      forms = m.continued ? m.continued(fp, ref, splits) : m.evaluate(ep, eref);
    } catch (const std::exception&) {
      return;  // a form our engine does not take on p (e.g. an option the wrong variant lacks)
    }
    for (const WrongForm& f : forms) {
      if (!m.gradients && !m.final_state && f.values.out.size() != ecand.out.size()) continue;
      if (f.judged_at && r.precision != Precision::f32) continue;  // a precision row: for a declared f32 only
      const Count n = m.final_state ? compare_final_state(ref, cand, f, r)
                      : m.gradients ? compare_gradients(eref, *yard, ecand, f, r)
                                    : compare_outputs(ep, eref, ecand, f, r);
      if (n.wrong == 0 || n.scored == 0) continue;
      const double fraction = static_cast<double>(n.match) / static_cast<double>(n.scored);
      if (fraction < kMatchFraction || static_cast<double>(n.wrong_match) < kMatchFraction * static_cast<double>(n.wrong)) continue;
      Scored s{{std::string(m.id) + f.suffix, m.what, m.fix, m.final_state ? "state" : failing_parts(r, m.gradients), fraction},
               n.closeness / static_cast<double>(n.wrong),
               f.judged_at.has_value()};
      if (best[i] && s.precision) continue;  // a precision row: its finest matching precision (the first)
      if (!best[i] || s.d.fraction > best[i]->d.fraction || (s.d.fraction == best[i]->d.fraction && s.closeness < best[i]->closeness))
        best[i] = s;
    }
  });
  std::vector<Scored> found;
  for (auto& b : best)
    if (b) found.push_back(*b);
  std::stable_sort(found.begin(), found.end(), [](const Scored& a, const Scored& b) {
    if (a.precision != b.precision) return b.precision;
    return a.d.fraction != b.d.fraction ? a.d.fraction > b.d.fraction : a.closeness < b.closeness;
  });
  std::vector<Diagnosis> out;
  for (auto& s : found) out.push_back(std::move(s.d));
  return out;
}

}  // namespace hla::check
