// The pass rule (README "The pass rule"):
//  (a) no non-finite candidate value where the reference is finite;
//  (b) every scored element within the a priori bound: |cand − ref| ≤ (K + 1)·u·M
//      (K = depth_bound, +1 for the f64 rounding of the reference, M the
//      element's magnitude; normalized outputs use their conditioned magnitude);
//  (c) the worst score at most twice our own fast form's worst score in the
//      same precision, or twice the noise floor sqrt(K) if that is larger;
//  (d) exact tier: bit equality with the exact reference.
// Normalized elements whose pole lies within the bound are reported, not scored.
#include "hla/check/check.hpp"

#include "hla/bounds.hpp"
#include "hla/check/fixture.hpp"
#include "hla/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace hla::check {
namespace {

Precision precision_of(DType t) {
  switch (t) {
    case DType::f64: return Precision::f64;
    case DType::f32: return Precision::f32;
    case DType::bf16: return Precision::bf16;
    case DType::f16: return Precision::f16;
  }
  return Precision::f32;
}

// Smallest normal number of a compute precision.
double smallest_normal(Precision p) {
  switch (p) {
    case Precision::f64: return std::numeric_limits<double>::min();
    case Precision::f32:
    case Precision::tf32:
    case Precision::bf16: return std::numeric_limits<float>::min();
    case Precision::f16: return std::ldexp(1.0, -14);
  }
  return 0;
}

double max_finite(DType t) {
  switch (t) {
    case DType::f64: return std::numeric_limits<double>::max();
    case DType::f32: return std::numeric_limits<float>::max();
    case DType::bf16: return 3.38953139e38;  // (2 − 2^-7)·2^127
    case DType::f16: return 65504;
  }
  return 0;
}

// Largest error of rounding x to type t: u_t·|x| plus half the smallest subnormal.
double storage_rounding(DType t, double x) {
  switch (t) {
    case DType::f64: return std::ldexp(std::fabs(x), -53) + std::ldexp(1.0, -1075);
    case DType::f32: return std::ldexp(std::fabs(x), -24) + std::ldexp(1.0, -150);
    case DType::bf16: return std::ldexp(std::fabs(x), -8) + std::ldexp(1.0, -134);
    case DType::f16: return std::ldexp(std::fabs(x), -11) + std::ldexp(1.0, -25);
  }
  return 0;
}


Index longest_sequence(const BatchProblem& p) {
  Index m = 0;
  for (const auto& [t0, t1] : p.sequences()) m = std::max(m, t1 - t0);
  return m;
}

// Scores every element of `cand` and calls visit(element); elements that are
// not scored say why in Element::skip.
template <class Visit>
void score_all(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, double u, double tiny, double K,
               Visit&& visit) {
  const Options& o = p.opt;
  const double eps = to_double(o.eps);
  // Storing a result in its output dtype may round it once more: that much
  // (relative u_t, or half the smallest subnormal) is not the kernel's
  // compute error and is taken off before scoring.
  auto judge = [&](Element& e, DType t) {
    if (!std::isfinite(e.reference)) e.skip = Skip::reference_nonfinite;
    else if (std::fabs(e.reference) > max_finite(t)) e.skip = Skip::out_of_range;
    else if (u * e.magnitude < tiny && e.magnitude > 0) e.skip = Skip::underflow;
    if (e.skip != Skip::none) return;
    if (!std::isfinite(e.candidate)) {
      e.score = HUGE_VAL;
      return;
    }
    const double err = std::max(0.0, std::fabs(e.candidate - e.reference) - storage_rounding(t, e.reference));
    e.score = err == 0 ? 0.0 : e.magnitude > 0 ? err / (u * e.magnitude) : HUGE_VAL;
  };
  for (Index b = 0; b < p.batch; ++b)
    for (Index h = 0; h < p.heads; ++h)
      for (Index t = 0; t < p.n; ++t) {
        const size_t di = p.den_index(b, h, t);
        const double den = ref.den[di], magD = ref.mag_den[di];
        for (Index c = 0; c < p.dv; ++c) {
          const size_t i = p.out_index(b, h, t, c);
          Element e{b, h, t, c, cand.out[i], ref.out[i], ref.mag_num[i]};
          if (o.normalize && (ref.flags[i] & kIllConditioned)) {
            e.skip = Skip::ill_conditioned;  // at the pole already for the reference
          } else if (o.normalize && std::isfinite(e.reference)) {
            const double num = ref.out[i] * normalizer(den, eps, o.eps_mode);
            const auto bound = normalized_error_bound(num, den, eps, o.eps_mode, K * u * e.magnitude, K * u * magD);
            const auto mo = normalized_magnitude(num, den, eps, o.eps_mode, e.magnitude, magD);
            if (!bound || !mo) e.skip = Skip::ill_conditioned;
            e.magnitude = mo.value_or(0);
          }
          if (e.skip == Skip::none) judge(e, cand.out_dtype);
          visit(e);
        }
        if (!cand.den.empty()) {
          Element e{b, h, t, -1, cand.den[di], den, magD};
          judge(e, cand.den_dtype);
          visit(e);
        }
      }
}

std::string fmt(double x) {
  std::ostringstream os;
  os.precision(4);
  os << x;
  return os.str();
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
      for (Index c = 0; c < p.dv; ++c)
        out.out[p.out_index(b, h, t, c)] = round_to(out_dtype, static_cast<double>(o.out(t - t0, c)));
    }
  };
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    switch (prec) {
      case Precision::f64: run(double(), b, h, t0, t1); break;
      case Precision::f32:
      case Precision::tf32: run(float(), b, h, t0, t1); break;
      case Precision::bf16: run(bf16(), b, h, t0, t1); break;
      case Precision::f16: run(f16(), b, h, t0, t1); break;
    }
  });
  return out;
}

}  // namespace

CandidateOutputs ours(const BatchProblem& p, Precision prec, Form f, Index chunk, DType out) {
  return run_ours(p, prec, out, [&](const auto& head) { return evaluate(head, f, chunk); });
}

CandidateOutputs ours_paper(const BatchProblem& p, Precision prec, PaperForm f, Index chunk, DType out) {
  return run_ours(p, prec, out, [&](const auto& head) { return evaluate_paper(head, f, chunk); });
}

std::vector<Form> baseline_forms(const BatchProblem& p) {
  if (!p.all_finite()) return {Form::streaming};
  const auto fs = forms_of(p.opt.variant);
  if (std::find(fs.begin(), fs.end(), Form::chunked_matmul) == fs.end()) return {Form::streaming};
  return {Form::streaming, Form::chunked_matmul};
}

Report check(const BatchProblem& p, const Reference& ref, const CandidateOutputs& cand, const CheckOptions& opt) {
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  if (cand.out.size() != no)
    throw InputError("candidate out holds " + std::to_string(cand.out.size()) + " values, expected " + std::to_string(no) +
                     " = batch·heads·n·dv");
  if (!cand.den.empty() && cand.den.size() != nd)
    throw InputError("candidate den holds " + std::to_string(cand.den.size()) + " values, expected " + std::to_string(nd));
  if (ref.out.size() != no || ref.den.size() != nd) throw InputError("reference does not match the problem's shape");

  Report r;
  r.precision = opt.precision.value_or(precision_of(cand.out_dtype));
  r.u = unit_roundoff(r.precision);
  const double K = depth_bound(p.opt.variant, longest_sequence(p), p.d);
  r.bound = K + 1;
  const double tiny = smallest_normal(r.precision);
  r.noise_floor = std::sqrt(K);
  r.exact_tier = opt.exact_tier;

  // Histogram bins: 0, (0,1], (1,2], (2,4], …, (2^19, 2^20], > 2^20.
  std::vector<size_t> bins(23, 0);
  auto bin = [](double s) {
    if (s == 0) return size_t(0);
    if (s <= 1) return size_t(1);
    if (!(s <= std::ldexp(1.0, 20))) return size_t(22);  // also +inf (error where the magnitude is 0)
    const int e = static_cast<int>(std::ceil(std::log2(s)));
    return static_cast<size_t>(std::min(e + 1, 22));
  };
  std::vector<Element> all;
  score_all(p, ref, cand, r.u, tiny, K, [&](const Element& e) {
    ++r.elements;
    switch (e.skip) {
      case Skip::none: break;
      case Skip::ill_conditioned: ++r.ill_conditioned; break;
      case Skip::reference_nonfinite: ++r.reference_nonfinite; return;
      case Skip::out_of_range: ++r.out_of_range; return;
      case Skip::underflow: ++r.underflow; break;
    }
    if (opt.exact_tier && !(e.candidate == e.reference)) ++r.exact_mismatches;
    if (e.skip != Skip::none) return;
    ++r.scored;
    if (!std::isfinite(e.candidate)) ++r.nonfinite;
    else ++bins[bin(e.score)];
    if (e.score > r.bound) ++r.over_bound;
    r.max_score = std::max(r.max_score, e.score);
    all.push_back(e);
  });
  const size_t k = std::min(opt.worst, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k), all.end(),
                    [](const Element& a, const Element& b) { return a.score > b.score; });
  r.worst.assign(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(k));

  for (Form f : baseline_forms(p))
    score_all(p, ref, ours(p, r.precision, f), r.u, tiny, K, [&](const Element& e) {
      if (e.skip == Skip::none && e.c >= 0) r.baseline_max_score = std::max(r.baseline_max_score, e.score);
    });
  r.baseline_ratio = r.max_score / std::max(r.baseline_max_score, r.noise_floor);

  r.histogram.emplace_back("0", bins[0]);
  r.histogram.emplace_back("(0, 1]", bins[1]);
  for (size_t i = 2; i < 22; ++i)
    r.histogram.emplace_back("(" + fmt(std::ldexp(1.0, static_cast<int>(i) - 2)) + ", " + fmt(std::ldexp(1.0, static_cast<int>(i) - 1)) + "]", bins[i]);
  r.histogram.emplace_back("> 1.049e+06", bins[22]);
  r.histogram.emplace_back("non-finite", r.nonfinite);
  r.histogram.emplace_back("ill-conditioned (not scored)", r.ill_conditioned);
  r.histogram.emplace_back("reference non-finite (not scored)", r.reference_nonfinite);
  r.histogram.emplace_back("beyond the output dtype's range (not scored)", r.out_of_range);
  r.histogram.emplace_back("underflow regime (not scored)", r.underflow);

  if (r.nonfinite) r.reasons.push_back(std::to_string(r.nonfinite) + " non-finite values where the reference is finite");
  if (r.over_bound)
    r.reasons.push_back(std::to_string(r.over_bound) + " elements exceed the a priori bound " + fmt(r.bound) + " u·magnitude");
  if (!(r.baseline_ratio <= 2))
    r.reasons.push_back("worst score " + fmt(r.max_score) + " is " + fmt(r.baseline_ratio) +
                        "x the baseline's (our streaming and chunked forms in " + to_string(r.precision) + ": " +
                        fmt(r.baseline_max_score) + ", noise floor " + fmt(r.noise_floor) + "); limit 2x");
  if (r.exact_mismatches)
    r.reasons.push_back(std::to_string(r.exact_mismatches) + " elements differ from the exact reference (exact tier demands bit equality)");
  r.pass = r.reasons.empty();
  if (!r.pass && !opt.dump_on_failure.empty()) {
    FixtureMeta meta;
    meta.case_name = opt.dump_on_failure;
    meta.exact_tier = opt.exact_tier;
    dump_case(opt.dump_on_failure, make_fixture(p, ref, meta), cand);
    r.dumped = opt.dump_on_failure + ".safetensors";
  }
  return r;
}

Report check(const BatchProblem& p, const CandidateOutputs& cand, const CheckOptions& opt) {
  return check(p, compute_reference(p), cand, opt);
}

std::string Report::text() const {
  std::ostringstream os;
  os << (pass ? "PASS" : "FAIL") << "\n";
  for (const auto& why : reasons) os << "  reason: " << why << "\n";
  os << "  precision " << to_string(precision) << " (u = " << fmt(u) << "); scores are |candidate - reference| / (u * magnitude)\n"
     << "  bound K+1 = " << fmt(bound) << ", noise floor sqrt(K) = " << fmt(noise_floor) << "\n"
     << "  elements " << elements << ": scored " << scored << ", ill-conditioned " << ill_conditioned << ", non-finite "
     << nonfinite << ", over bound " << over_bound;
  if (reference_nonfinite) os << ", depending on NaN/Inf inputs " << reference_nonfinite;
  if (out_of_range) os << ", beyond the output dtype's range " << out_of_range;
  if (underflow) os << ", in the underflow regime " << underflow;
  os << "\n"
     << "  worst score " << fmt(max_score) << "; baseline worst " << fmt(baseline_max_score) << "; ratio "
     << fmt(baseline_ratio) << " (limit 2)\n";
  if (exact_tier) os << "  exact tier: " << exact_mismatches << " elements differ from the exact reference\n";
  if (!dumped.empty()) {
    const std::string stem = dumped.substr(0, dumped.size() - std::string(".safetensors").size());
    os << "  failing case written: hla check " << dumped << " " << stem << ".candidate.safetensors --precision "
       << to_string(precision) << "\n";
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
  return os.str();
}

nlohmann::json Report::json() const {
  auto num = [](double x) -> nlohmann::json { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf")); };
  nlohmann::json w = nlohmann::json::array();
  for (const auto& e : worst)
    w.push_back({{"batch", e.b}, {"head", e.h}, {"token", e.t}, {"column", e.c < 0 ? nlohmann::json("den") : nlohmann::json(e.c)},
                 {"candidate", num(e.candidate)}, {"reference", num(e.reference)}, {"magnitude", num(e.magnitude)}, {"score", num(e.score)}});
  nlohmann::json h = nlohmann::json::array();
  for (const auto& [name, count] : histogram) h.push_back({{"bin", name}, {"count", count}});
  return {{"pass", pass}, {"reasons", reasons}, {"precision", to_string(precision)}, {"u", u}, {"bound", bound},
          {"noise_floor", noise_floor}, {"max_score", num(max_score)}, {"baseline_max_score", num(baseline_max_score)},
          {"baseline_ratio", num(baseline_ratio)}, {"elements", elements}, {"scored", scored},
          {"ill_conditioned", ill_conditioned}, {"reference_nonfinite", reference_nonfinite}, {"out_of_range", out_of_range}, {"underflow", underflow}, {"nonfinite", nonfinite}, {"over_bound", over_bound},
          {"exact_tier", exact_tier}, {"exact_mismatches", exact_mismatches}, {"dumped", dumped}, {"worst", w}, {"histogram", h}};
}

}  // namespace hla::check
