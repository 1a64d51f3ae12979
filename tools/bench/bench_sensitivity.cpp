// Sensitivity of the pass rule: how far above honest rounding error
// must a wrong result be before check() rejects it? Per configuration (n,
// input dtype, compute precision, γ, normalize) it measures
//   1. the worst score of several honest evaluation orders — our streaming,
//      chunked (w = 16, 64, 128) and additive scan forms, and an attention-matrix
//      form written here — and whether check() passes each (a failure is a
//      false alarm); forms that subtract partial sums get their own column;
//   2. δ_min: the smallest error, in score units, that check() rejects when it
//      is added to a few random elements of an honest output (binary search
//      over check() itself);
//   3. whether three planted term-level bugs of the chunk form are caught.
// Run on demand (not a test); everything is measured in this one run. The
// limit is read from the Report (ratio_limit × baseline, and the bound),
// so the program keeps working when the checker's floor changes.
#include "hla/bounds.hpp"
#include "hla/check/check.hpp"
#include "hla/gen/distributions.hpp"
#include "hla/ops/ahla.hpp"
#include "hla/ops/hla2.hpp"
#include "hla/ops/hla3.hpp"
#include "hla/ops/la1.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace hla;
using check::Report;
using engine::CandidateOutputs;
using engine::Precision;

namespace {


double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Calls f(T()) with the scalar type that emulates precision `prec`.
template <class F> auto with_scalar(Precision prec, F&& f) {
  if (prec == Precision::bf16) return f(bf16());
  return f(float());
}

// Rows of a head form (n × (dv+1), last column the denominator) as a
// candidate, normalized in T as the kernel would; stored exactly (f64).
template <class T> CandidateOutputs to_candidate(const BatchProblem& p, const Mat<T>& Y) {
  CandidateOutputs c{std::vector<double>(static_cast<size_t>(p.n * p.dv)), std::vector<double>(static_cast<size_t>(p.n)),
                     DType::f64, DType::f64};
  const T eps = from_rational<T>(p.opt.eps);
  for (Index t = 0; t < p.n; ++t) {
    const T den = Y(t, p.dv);
    const T div = p.opt.normalize ? normalizer(den, eps, p.opt.eps_mode) : T(1);
    c.den[p.den_index(0, 0, t)] = static_cast<double>(den);
    for (Index col = 0; col < p.dv; ++col)
      c.out[p.out_index(0, 0, t, col)] = static_cast<double>(p.opt.normalize ? T(Y(t, col) / div) : Y(t, col));
  }
  return c;
}

template <class T> Head<T> head_of(const BatchProblem& p) { return make_head(p.head<T>(0, 0, 0, p.n)); }

// ---------------------------------------------------------------------------
// An independent honest order: the attention-matrix ("parallel") form
//   num_t = Σ_{j≤t} γ^{p(t−j)} (q_t·x_j) y_j,
// which every masked variant takes with prefix moments (SPEC §2, cost note):
//   la1  p = 1, x = k,            y = v
//   hla2 p = 2, x_j = S_j q_j,    y = v          (S_j = Σ_{i≤j} γ^{j−i} k_ik_iᵀ)
//   ahla p = 1, x = k,            y = la1 output (num_t = Σ_i γ^{t−i} a_ti z_i)
//   hla3 p = 3, x_u = S_u q_u,    y = la1 output (z_u = q_uᵀP_u)
// It only adds terms, but in an order none of our forms uses: row tiles of 64
// queries against all earlier keys (GEMM), or, `reverse`, a plain loop over j
// from t down to 0.
template <class T> Mat<T> attention_sum(const Head<T>& h, Index p, const Mat<T>& X, const Mat<T>& Yv, bool reverse) {
  const Index n = h.n();
  Mat<T> out = Mat<T>::Zero(n, Yv.cols());
  if (reverse) {
    for (Index t = 0; t < n; ++t) {
      RowVec<T> acc = RowVec<T>::Zero(Yv.cols());
      for (Index j = t; j >= 0; --j) acc += T(h.g(p * (t - j)) * h.q.row(t).dot(X.row(j))) * Yv.row(j);
      out.row(t) = acc;
    }
    return out;
  }
  constexpr Index R = 64;
  for (Index r0 = 0; r0 < n; r0 += R) {
    const Index rows = std::min(R, n - r0), cols = r0 + rows;
    Mat<T> A = h.q.middleRows(r0, rows) * X.topRows(cols).transpose();
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) A(i, j) = j <= r0 + i ? T(A(i, j) * h.g(p * (r0 + i - j))) : T(0);
    out.middleRows(r0, rows) = A * Yv.topRows(cols);
  }
  return out;
}

// x_j = S_j q_j with S_j the decayed prefix sum of k_ik_iᵀ.
template <class T> Mat<T> prefix_sq(const Head<T>& h) {
  Mat<T> S = Mat<T>::Zero(h.d(), h.d()), X(h.n(), h.d());
  for (Index t = 0; t < h.n(); ++t) {
    S = h.gamma * S + h.k.row(t).transpose() * h.k.row(t);
    X.row(t) = (S * h.q.row(t).transpose()).transpose();
  }
  return X;
}

// Nothing for variants it does not cover (unmasked, hla3_paper) or ridge.
template <class T> std::optional<Mat<T>> attention_form(const Head<T>& h, Variant v, bool reverse) {
  if (!h.masked || h.lambda != T(0)) return std::nullopt;
  switch (v) {
    case Variant::la1: return attention_sum(h, 1, h.k, h.v, reverse);
    case Variant::hla2: return attention_sum(h, 2, prefix_sq(h), h.v, reverse);
    case Variant::ahla: return attention_sum(h, 1, h.k, attention_sum(h, 1, h.k, h.v, reverse), reverse);
    case Variant::hla3: return attention_sum(h, 3, prefix_sq(h), attention_sum(h, 1, h.k, h.v, reverse), reverse);
    case Variant::hla3_paper: break;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Planted term-level bugs: the SPEC §5 chunk form with one term of one chunk
// (`bad`, 0-based) wrong. Nothing where the bug does not exist for the variant.
enum class Bug { decay, cross, mask };
const char* bug_name(Bug b) { return b == Bug::decay ? "decay" : b == Bug::cross ? "cross" : "mask"; }
const char* bug_text(Bug b) {
  switch (b) {
    case Bug::decay: return "carry term of one chunk decayed with the wrong power of rho_t";
    case Bug::cross: return "one carry x chunk (cross) term of one chunk dropped";
    case Bug::mask: return "intra-chunk mask of one chunk excludes the diagonal (j = t)";
  }
  return "?";
}

// D ⊙ (strict causal mask): the one-token mask shift.
template <class T> Mat<T> strict(const Mat<T>& D) { return D.cwiseProduct(causal_mask<T>(D.rows(), true)); }

template <class T> std::optional<Mat<T>> la1_bug(const Head<T>& h, Bug bug, Index w, Index bad) {
  if (bug == Bug::cross) return std::nullopt;  // la1's chunk form has no cross term
  Mat<T> P = Mat<T>::Zero(h.d(), h.dv1()), Y(h.n(), h.dv1());
  Index c = 0;
  for_each_chunk(h.n(), w, [&](Index c0, Index L) {
    const bool here = c++ == bad;
    const auto Q = h.q.middleRows(c0, L), K = h.k.middleRows(c0, L), V = h.v.middleRows(c0, L);
    const Mat<T> D = here && bug == Bug::mask ? strict(decay_mask(h, L)) : decay_mask(h, L);
    const Index pw = here && bug == Bug::decay ? 2 : 1;  // ρ_t² instead of ρ_t
    Y.middleRows(c0, L) = decay_from_carry(h, L, pw).asDiagonal() * (Q * P) + (Q * K.transpose()).cwiseProduct(D) * V;
    P = h.g(L) * P + K.transpose() * decay_to_end(h, L).asDiagonal() * V;
  });
  return Y;
}

template <class T> Mat<T> hla2_bug(const Head<T>& h, Bug bug, Index w, Index bad) {
  hla2::Carry<T> a{Mat<T>::Zero(h.d(), h.d()), Mat<T>::Zero(h.d(), h.dv1()), Mat<T>::Zero(h.d(), h.dv1())};
  Mat<T> Y(h.n(), h.dv1());
  Index c = 0;
  for_each_chunk(h.n(), w, [&](Index c0, Index L) {
    hla2::ChunkTerms<T> r = hla2::chunk_terms(h, a, c0, L);
    if (c++ == bad) {
      const auto Q = h.q.middleRows(c0, L), K = h.k.middleRows(c0, L), V = h.v.middleRows(c0, L);
      const Mat<T> QK = Q * K.transpose(), D = decay_mask(h, L);
      switch (bug) {
        case Bug::decay: r.carry = decay_from_carry(h, L).asDiagonal() * (Q * a.F); break;  // ρ_t, not ρ_t²
        case Bug::cross: r.cross.setZero(); break;
        case Bug::mask: r.intra = (QK.cwiseProduct(D) * QK.cwiseProduct(causal_mask<T>(L)).transpose()).cwiseProduct(strict(D)) * V; break;
      }
    }
    Y.middleRows(c0, L) = r.carry + r.cross + r.intra + r.ridge;
    hla2::advance(h, a, c0, L);
  });
  return Y;
}

template <class T> Mat<T> ahla_bug(const Head<T>& h, Bug bug, Index w, Index bad) {
  Index c = 0;
  return ahla::chunked_with(h, w, [&](ahla::ChunkTerms<T> r, const ahla::Carry<T>& a, Index c0, Index L) -> Mat<T> {
    if (c++ == bad) {
      const auto Q = h.q.middleRows(c0, L), K = h.k.middleRows(c0, L), V = h.v.middleRows(c0, L);
      const Mat<T> Wm = (Q * K.transpose()).cwiseProduct(causal_mask<T>(L));
      switch (bug) {
        case Bug::decay: r.carry = decay_from_carry(h, L, 2).asDiagonal() * (Q * a.E); break;  // ρ_t², not ρ_t
        case Bug::cross: r.cross.setZero(); break;
        case Bug::mask: r.intra = (Wm * Wm).cwiseProduct(strict(decay_mask(h, L))) * V; break;
      }
    }
    return r.carry + r.cross + r.intra;
  });
}

// hla3 masked: hla3::chunked (its term names) with the bug hooks; the cross
// bug drops only ρ_t (G_A ⊙ D_2) Z (the pairs with i in the carry).
template <class T> Mat<T> hla3_bug(const Head<T>& h, Bug bug, Index w, Index bad) {
  const hla3::Op<T> op{h};
  auto carry = op.identity();
  Mat<T> Out(h.n(), h.dv1());
  Index c = 0;
  for_each_chunk(h.n(), w, [&](Index c0, Index L) {
    const bool here = c++ == bad;
    const auto Q = h.q.middleRows(c0, L), K = h.k.middleRows(c0, L), V = h.v.middleRows(c0, L);
    const Mat<T> D1 = decay_mask(h, L), Wd = (Q * K.transpose()).cwiseProduct(D1);
    const Mat<T> U = Wd * K, Z = Wd * V;
    const Vec<T> rho = decay_from_carry(h, L);
    const auto& A = carry;
    const Mat<T> GA = Q * A.S * Q.transpose(), M = Q * U.transpose(), QPA = Q * A.P;
    const Mat<T> D2 = decay_mask(h, L, 2), D3 = here && bug == Bug::mask ? strict(decay_mask(h, L, 3)) : decay_mask(h, L, 3);
    const Mat<T> iA = here && bug == Bug::cross ? Mat<T>(Mat<T>::Zero(L, h.dv1())) : Mat<T>(GA.cwiseProduct(D2) * Z);
    Out.middleRows(c0, L) = decay_from_carry(h, L, here && bug == Bug::decay ? 2 : 3).asDiagonal() * (Q * A.F) +
                            M.cwiseProduct(D3) * Z + rho.asDiagonal() * (iA + M.cwiseProduct(D2) * QPA) +
                            decay_from_carry(h, L, 2).asDiagonal() * (GA.cwiseProduct(D1) * QPA);
    const Vec<T> e1 = decay_to_end(h, L), e2 = decay_to_end(h, L, 2);
    const typename hla3::Op<T>::Summary B{K.transpose() * e1.asDiagonal() * K, K.transpose() * e1.asDiagonal() * V,
                                          Q.transpose() * e1.asDiagonal() * Q, Q.transpose() * e2.asDiagonal() * Z,
                                          U.transpose() * e2.asDiagonal() * Q,
                                          U.transpose() * decay_to_end(h, L, 3).asDiagonal() * Z, h.g(L)};
    carry = op.combine(carry, B);
  });
  return Out;
}

template <class T> std::optional<Mat<T>> buggy_form(const Head<T>& h, Variant v, Bug bug, Index w, Index bad) {
  if (!h.masked || h.lambda != T(0)) return std::nullopt;
  // With γ = 1 every power of ρ_t is 1: the wrong power is no bug.
  if (bug == Bug::decay && h.gamma == T(1)) return std::nullopt;
  switch (v) {
    case Variant::la1: return la1_bug(h, bug, w, bad);
    case Variant::hla2: return hla2_bug(h, bug, w, bad);
    case Variant::ahla: return ahla_bug(h, bug, w, bad);
    case Variant::hla3: return hla3_bug(h, bug, w, bad);
    case Variant::hla3_paper: break;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
struct Args {
  std::vector<Index> ns{64, 256, 1024, 4096, 16384};
  bool quick = false;
  Index max_n = 1 << 30;
  Index d = 64, dv = 64;
  std::string variant = "hla2";
  std::vector<std::string> gammas{"1", "99/100"};
  std::vector<std::string> dtypes{"f32", "bf16"};
  uint64_t seed = 8;
  int perturbed = 3;
  Index max_scan_n = 4096;       // scan forms keep n summaries of O(d²) (memory, time)
  Index max_reverse_n = 1024;    // the reverse-order loop is O(n²) scalar work
  Index max_bf16_gemm_n = 16384;  // emulated bf16 GEMMs are slow (about 20 s at n = 16384)
  std::string json;
};

struct FormResult {
  std::string name;
  double score = 0;
  bool pass = false;
  double seconds = 0;
  Index token = -1, column = -1;  // where the worst score is (column -1: the denominator)
};

struct Row {
  Index n = 0;
  DType dtype = DType::f32;
  Precision prec = Precision::f32;
  std::string gamma;
  bool normalize = false;
  std::vector<FormResult> honest, state_difference;
  std::vector<std::pair<Bug, std::optional<FormResult>>> bugs;
  double u = 0, baseline = 0, floor = 0, bound = 0, limit = 0, ratio = 0;
  double delta_min = 0;
  double scored = 0;  // fraction of output elements the checker scores
  double ref_seconds = 0, seconds = 0;

  const FormResult* worst_honest() const {
    const FormResult* w = nullptr;
    for (const auto& f : honest)
      if (!w || f.score > w->score) w = &f;
    return w;
  }
  size_t false_alarms() const {
    return static_cast<size_t>(std::count_if(honest.begin(), honest.end(), [](const FormResult& f) { return !f.pass; }));
  }
};

BatchProblem make_problem(const Args& a, Index n, DType dtype, const std::string& gamma, bool normalize) {
  BatchProblem p;
  p.opt.variant = parse_variant(a.variant);
  p.opt.gamma = parse_rational(gamma);
  p.opt.normalize = normalize;
  p.opt.eps = Rational(1, 1000000);
  p.dtype = dtype;
  p.n = n, p.d = a.d, p.dv = a.dv;
  p.resize_buffers();
  // Same draw for every dtype, γ and normalize at one n: only the rounding differs.
  gen::Rng rng(gen::derive_seed(a.seed, static_cast<uint64_t>(n)));
  gen::fill(p, gen::Dist::gaussian, rng);
  return p;
}

// The smallest δ (score units) that check() rejects when δ·u·M_e is added to
// each of the picked elements of `base`, pushing each away from the reference
// (its score grows by δ). Brackets around the limit read from the Report, then
// bisects to 1%. NaN when no output element is scored.
double delta_min(const BatchProblem& p, const engine::Reference& ref, const CandidateOutputs& base, const Report& full,
                 const check::CheckOptions& opt, double threshold, int count, uint64_t seed) {
  std::vector<const check::Element*> pool;
  for (const auto& e : full.worst)
    if (e.c >= 0 && e.magnitude > 0 && std::isfinite(e.score)) pool.push_back(&e);
  std::mt19937_64 rng(seed);
  std::shuffle(pool.begin(), pool.end(), rng);
  pool.resize(std::min(pool.size(), static_cast<size_t>(count)));
  double picked_max = 0;
  for (const auto* e : pool) picked_max = std::max(picked_max, e->score);
  auto fails = [&](double delta) {
    CandidateOutputs c = base;
    for (const auto* e : pool) {
      const size_t i = p.out_index(e->b, e->h, e->t, e->c);
      // Normalized outputs are scored by their residual o·D − num against u·magnitude:
      // moving o by x moves the residual by x·|D|.
      const double D = p.opt.normalize ? std::fabs(normalizer(ref.den[p.den_index(e->b, e->h, e->t)], to_double(p.opt.eps), p.opt.eps_mode)) : 1.0;
      c.out[i] += (e->candidate >= e->reference ? 1 : -1) * delta * full.u * e->magnitude / D;
    }
    return !check::check(p, ref, c, opt).pass;
  };
  if (pool.empty()) return NAN;  // nothing scored: no perturbation can be seen
  if (fails(0)) return 0;
  const double guess = std::max(threshold - picked_max, 1e-3);
  double lo = 0, hi = 1.05 * guess;
  if (!fails(0.95 * guess)) lo = 0.95 * guess;
  else hi = 0.95 * guess;
  while (!fails(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > 1e15) return HUGE_VAL;
  }
  while (hi - lo > 0.01 * hi) {
    const double mid = 0.5 * (lo + hi);
    (fails(mid) ? hi : lo) = mid;
  }
  return hi;
}

// Row's scored fraction and delta_min: the smallest planted perturbation of our
// form f (width chunk) that fails, searched against row.limit.
void plant_perturbation(const Args& a, const BatchProblem& p, const engine::Reference& ref, Precision prec, const check::CheckOptions& opt,
                        Form f, Index chunk, const std::string& tag, Row& row) {
  const auto f0 = std::chrono::steady_clock::now();
  const CandidateOutputs base = engine::ours(p, prec, f, chunk);
  check::CheckOptions all = opt;
  all.worst = static_cast<size_t>(p.n * (p.dv + 1));  // every scored element, with the checker's magnitude
  const Report full = check::check(p, ref, base, all);
  row.scored = static_cast<double>(std::count_if(full.worst.begin(), full.worst.end(), [](const check::Element& e) { return e.c >= 0; })) /
               static_cast<double>(p.n * p.dv);
  row.delta_min = delta_min(p, ref, base, full, opt, std::min(row.limit, row.bound), a.perturbed,
                            gen::derive_seed(a.seed, 1000 + static_cast<uint64_t>(p.n)));
  std::fprintf(stderr, "  %s  delta_min %.4g (%.1f s)\n", tag.c_str(), row.delta_min, seconds_since(f0));
}

Row run_row(const Args& a, const BatchProblem& p, const engine::Reference& ref, Precision prec) {
  const auto t0 = std::chrono::steady_clock::now();
  Row row;
  row.n = p.n, row.dtype = p.dtype, row.prec = prec, row.normalize = p.opt.normalize;
  row.gamma = to_string(p.opt.gamma);
  check::CheckOptions opt;
  opt.precision = prec;
  const std::string tag = "n=" + std::to_string(p.n) + " " + to_string(p.dtype) + "/" + to_string(prec) +
                          " gamma=" + row.gamma + (p.opt.normalize ? " norm=add" : " norm=off");

  auto judge = [&](const std::string& name, auto&& make, engine::FormClass cls = engine::FormClass::masked) {
    const auto f0 = std::chrono::steady_clock::now();
    const CandidateOutputs c = make();
    check::CheckOptions o = opt;
    o.form_class = cls;
    const Report r = check::check(p, ref, c, o);
    row.u = r.u, row.baseline = r.baseline_max_score, row.floor = r.noise_floor, row.bound = r.bound, row.ratio = r.ratio_limit;
    FormResult f{name, r.max_score, r.pass, seconds_since(f0)};
    if (!r.worst.empty()) f.token = r.worst.front().t, f.column = r.worst.front().c;
    std::fprintf(stderr, "  %s  %-22s score %9.4g %s (%.1f s)\n", tag.c_str(), name.c_str(), f.score, f.pass ? "pass" : "FAIL",
                 f.seconds);
    return f;
  };

  // Honest orders: our forms that only add terms, then the attention-matrix form.
  const auto forms = forms_of(p.opt.variant);
  auto has = [&](Form f) { return std::find(forms.begin(), forms.end(), f) != forms.end(); };
  struct Named { std::string name; Form form; Index chunk; };
  std::vector<Named> ours{{"streaming", Form::streaming, 64}};
  for (Index w : {16, 64, 128}) ours.push_back({"chunked" + std::to_string(w), Form::chunked_matmul, w});
  if (p.n <= a.max_scan_n) ours.push_back({"blelloch", Form::blelloch, 64});
  ours.push_back({"paper_state", Form::streaming_paper_state, 64});
  for (const auto& f : ours) {
    if (!has(f.form)) continue;
    auto make = [&] { return engine::ours(p, prec, f.form, f.chunk); };
    if (subtracts_partial_sums(p.opt, f.form)) row.state_difference.push_back(judge(f.name, make, engine::FormClass::state_difference));
    else row.honest.push_back(judge(f.name, make));
  }
  const bool slow_gemm = prec == Precision::bf16 && p.n > a.max_bf16_gemm_n;
  for (bool reverse : {false, true}) {
    if (reverse ? p.n > a.max_reverse_n : slow_gemm) continue;
    std::optional<CandidateOutputs> c = with_scalar(prec, [&](auto tag) -> std::optional<CandidateOutputs> {
      using T = decltype(tag);
      const auto Y = attention_form(head_of<T>(p), p.opt.variant, reverse);
      if (!Y) return std::nullopt;
      return to_candidate(p, *Y);
    });
    if (c) row.honest.push_back(judge(reverse ? "attn-reverse" : "attn-tiled", [&] { return *c; }));
  }

  // Planted perturbation of the first honest form's output (streaming).
  // Rule 3's limit where an element's own floor is below the baseline (the usual case at these sizes).
  row.limit = row.ratio * row.baseline;
  plant_perturbation(a, p, ref, prec, opt, ours.front().form, ours.front().chunk, tag, row);

  // Planted bugs, in the last chunk (with at least two chunks, so it has a carry).
  const Index w = std::max<Index>(1, std::min<Index>(64, p.n / 2));
  const Index bad = (p.n + w - 1) / w - 1;
  for (Bug bug : {Bug::decay, Bug::cross, Bug::mask}) {
    std::optional<CandidateOutputs> c = with_scalar(prec, [&](auto tag) -> std::optional<CandidateOutputs> {
      using T = decltype(tag);
      const auto Y = buggy_form(head_of<T>(p), p.opt.variant, bug, w, bad);
      if (!Y) return std::nullopt;
      return to_candidate(p, *Y);
    });
    if (!c) row.bugs.emplace_back(bug, std::nullopt);
    else row.bugs.emplace_back(bug, judge(std::string("bug:") + bug_name(bug), [&] { return *c; }));
  }
  row.seconds = seconds_since(t0);
  return row;
}

std::string g4(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", x);
  return b;
}

void print_header() {
  std::printf("%6s %-9s %-6s %-4s %6s %8s %-12s %5s %8s %7s %7s %8s %8s %-12s %-12s %-12s %-12s %6s\n", "n", "dtype/cmp",
              "gamma", "norm", "scored", "honest", "worst form", "false", "baseline", "floor", "limit", "delta", "d/hon",
              "bug a", "bug b", "bug c", "state-diff", "s");
}

void print_row(const Row& r) {
  const FormResult* w = r.worst_honest();
  auto bug = [&](size_t i) -> std::string {
    if (i >= r.bugs.size() || !r.bugs[i].second) return "-";
    return (r.bugs[i].second->pass ? "MISS " : "yes ") + g4(r.bugs[i].second->score);
  };
  std::string sd = "-";
  if (!r.state_difference.empty()) {
    const auto it = std::max_element(r.state_difference.begin(), r.state_difference.end(),
                                     [](const FormResult& x, const FormResult& y) { return x.score < y.score; });
    sd = g4(it->score) + (std::all_of(r.state_difference.begin(), r.state_difference.end(), [](const FormResult& f) { return f.pass; }) ? " ok" : " FAIL");
  }
  const double hon = w ? w->score : 0;
  const bool nod = std::isnan(r.delta_min);
  std::printf("%6ld %-9s %-6s %-4s %5.3g%% %8s %-12s %5zu %8s %7s %7s %8s %8s %-12s %-12s %-12s %-12s %6.0f\n",
              static_cast<long>(r.n), (to_string(r.dtype) + "/" + to_string(r.prec)).c_str(), r.gamma.c_str(),
              r.normalize ? "add" : "off", 100 * r.scored, g4(hon).c_str(), w ? w->name.c_str() : "-", r.false_alarms(),
              g4(r.baseline).c_str(), g4(r.floor).c_str(), g4(r.limit).c_str(), nod ? "n/a" : g4(r.delta_min).c_str(),
              nod ? "n/a" : hon > 0 ? g4(r.delta_min / hon).c_str() : "inf", bug(0).c_str(),
              bug(1).c_str(), bug(2).c_str(), sd.c_str(), r.seconds + r.ref_seconds);
  std::fflush(stdout);
}

nlohmann::json to_json(const Row& r) {
  auto num = [](double x) -> nlohmann::json {
    return std::isfinite(x) ? nlohmann::json(x) : std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json("inf");
  };
  auto forms = [&](const std::vector<FormResult>& fs) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& f : fs) j.push_back({{"form", f.name}, {"max_score", num(f.score)}, {"pass", f.pass}, {"seconds", f.seconds},
                  {"worst_token", f.token}, {"worst_column", f.column}});
    return j;
  };
  nlohmann::json bugs = nlohmann::json::object();
  for (const auto& [b, f] : r.bugs)
    bugs[bug_name(b)] = f ? nlohmann::json{{"what", bug_text(b)}, {"caught", !f->pass}, {"max_score", num(f->score)}} : nlohmann::json(nullptr);
  const FormResult* w = r.worst_honest();
  return {{"n", r.n}, {"dtype", to_string(r.dtype)}, {"precision", to_string(r.prec)}, {"gamma", r.gamma},
          {"normalize", r.normalize ? "add" : "off"}, {"u", r.u}, {"honest", forms(r.honest)},
          {"state_difference", forms(r.state_difference)}, {"worst_honest", w ? num(w->score) : nlohmann::json(nullptr)},
          {"worst_honest_form", w ? w->name : ""}, {"false_alarms", r.false_alarms()}, {"baseline_max_score", num(r.baseline)},
          {"noise_floor", num(r.floor)}, {"bound", num(r.bound)}, {"scored_fraction", r.scored}, {"limit", num(r.limit)}, {"delta_min", num(r.delta_min)},
          {"delta_over_honest", w && w->score > 0 ? num(r.delta_min / w->score) : nlohmann::json(nullptr)}, {"bugs", bugs},
          {"reference_seconds", r.ref_seconds}, {"seconds", r.seconds}};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"hla_bench_sensitivity: how small an error the pass rule catches, next to the honest forms' own scores"};
  app.add_option("--n", a.ns, "sequence lengths")->delimiter(',');
  app.add_flag("--quick", a.quick, "only n <= 1024");
  app.add_option("--max-n", a.max_n, "skip longer sequences")->check(CLI::PositiveNumber);
  app.add_option("--d", a.d, "head dimension")->check(CLI::PositiveNumber);
  app.add_option("--dv", a.dv, "value dimension")->check(CLI::PositiveNumber);
  app.add_option("--variant", a.variant, "la1 | hla2 | ahla | hla3 (masked)");
  app.add_option("--gamma", a.gammas, "decays (exact rationals)")->delimiter(',');
  app.add_option("--dtype", a.dtypes, "input dtypes: f32 (computed in f32), bf16 (computed in bf16 and in f32)")->delimiter(',');
  app.add_option("--seed", a.seed, "input seed");
  app.add_option("--perturb", a.perturbed, "elements perturbed for delta_min")->check(CLI::PositiveNumber);
  app.add_option("--max-scan-n", a.max_scan_n, "largest n for the scan forms (memory: n summaries)");
  app.add_option("--max-reverse-n", a.max_reverse_n, "largest n for the reverse-order loop");
  app.add_option("--max-bf16-gemm-n", a.max_bf16_gemm_n, "largest n for the emulated-bf16 attention form");
  app.add_option("--json", a.json, "also write the rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    (void)parse_variant(a.variant);
    for (const auto& g : a.gammas) (void)parse_rational(g);
    for (const auto& t : a.dtypes)
      if (t != "f32" && t != "bf16") throw InputError("--dtype takes f32 or bf16, got '" + t + "'");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  std::vector<Index> ns;
  for (Index n : a.ns)
    if (n >= 1 && n <= a.max_n && (!a.quick || n <= 1024)) ns.push_back(n);

  std::printf("%s masked, d = %ld, dv = %ld, B = H = 1, Gaussian inputs (seed %lu), eps = 1e-6 (add)\n", a.variant.c_str(),
              static_cast<long>(a.d), static_cast<long>(a.dv), static_cast<unsigned long>(a.seed));
  std::printf("scores in units of u * magnitude; limit = ratio_limit(N) x baseline (read from the Report; per element\n"
              "the floor 2|result|/M may be larger; also bound K+1);\n"
              "scored = share of output elements the checker scores (the rest: NaN-dependent, out of range, underflow);\n"
              "delta = smallest added score on %d random scored elements of the streaming output that check() rejects\n"
              "(n/a: nothing scored); d/hon = delta / worst honest score;\n"
              "bugs: a = %s, b = %s, c = %s ('yes' = caught, with the worst score; '-' = no such bug here);\n"
              "state-diff = forms that subtract partial sums (judged as form class state_difference)\n\n",
              a.perturbed, bug_text(Bug::decay), bug_text(Bug::cross), bug_text(Bug::mask));
  print_header();

  nlohmann::json out = nlohmann::json::array();
  const auto start = std::chrono::steady_clock::now();
  size_t false_alarms = 0;
  for (Index n : ns)
    for (const auto& dtype_name : a.dtypes)
      for (const auto& gamma : a.gammas)
        for (bool normalize : {false, true}) {
          const DType dtype = parse_dtype(dtype_name);
          const BatchProblem p = make_problem(a, n, dtype, gamma, normalize);
          const auto r0 = std::chrono::steady_clock::now();
          std::fprintf(stderr, "n=%ld %s gamma=%s norm=%s: reference (binary128)...\n", static_cast<long>(n),
                       to_string(dtype).c_str(), gamma.c_str(), normalize ? "add" : "off");
          const engine::Reference ref = engine::compute_reference(p);
          const double ref_s = seconds_since(r0);
          std::fprintf(stderr, "  reference %.1f s\n", ref_s);
          std::vector<Precision> precs{Precision::f32};
          if (dtype == DType::bf16) precs.insert(precs.begin(), Precision::bf16);
          for (Precision prec : precs) {
            Row row = run_row(a, p, ref, prec);
            row.ref_seconds = prec == precs.front() ? ref_s : 0;  // shared by the rows of one reference
            false_alarms += row.false_alarms();
            for (const auto& f : row.honest)
              if (!f.pass) std::fprintf(stderr, "FALSE ALARM: n=%ld %s/%s gamma=%s %s: %s score %g\n", static_cast<long>(n),
                                        to_string(dtype).c_str(), to_string(prec).c_str(), gamma.c_str(),
                                        normalize ? "add" : "off", f.name.c_str(), f.score);
            print_row(row);
            out.push_back(to_json(row));
            if (!a.json.empty()) std::ofstream(a.json) << out.dump(2) << "\n";  // after every row: partial runs keep theirs
          }
        }
  std::printf("\nfalse alarms (honest forms failing check): %zu; total %.0f s\n", false_alarms, seconds_since(start));
  return 0;
}
