// hla_bench_backward: the gradient oracle at the shapes users train at; every
// number is a measurement of this one run, nothing is asserted.
//   1. end to end at [B=2, H=8, n=4096, d=dv=128], bf16 inputs (a positive
//      feature map |q|, |k|; --gaussian: Gaussian), f32 compute, every variant
//      normalized or not (--case TEXT: the cases whose name holds TEXT):
//      reference gradients (dq, dk, dv; the forward reference first) and the
//      check of an honest f32 backward (the engine's at chunk width 32, which
//      is none of our baseline widths), wall time and peak memory per variant
//      and CPU time (each in a child process), the certified fraction, the rows' worst
//      scores and rule-3 ratios;
//   2. sensitivity: one planted error (one element, or one token row of one
//      head) of 4x the honest kernel's worst score in that tensor, flagged or
//      not, and the factor from which rule 3 flags it, at the large shape and
//      at n = 256 (normalized: Gaussian and a positive feature map);
//   3. coverage: the scored fraction of normalized gradients on Gaussian q, k
//      at n = 1024 (f32 and f64 compute) and on a positive feature map (every variant);
//   4. the cost exponent in n of the gradient reference (one head, n = 1k … 16k).
// Usage: hla_bench_backward [--quick] [--only SECTION] [--case TEXT] [--gaussian]   (--quick: small shapes)
#include "hla/check/check.hpp"
#include "hla/check/gradient.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace hla;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Case {
  std::string name;
  Options o;
};

Options opts(Variant v, const char* gamma, bool normalize, EpsMode mode = EpsMode::add) {
  Options o;
  o.variant = v;
  o.gamma = parse_rational(gamma);
  o.normalize = normalize;
  o.eps_mode = mode;
  return o;
}

// A problem of Gaussian inputs rounded to bf16 (|q|, |k| for a positive feature
// map), with upstream do (and dden where normalized) in bf16.
struct Problem {
  BatchProblem p;
  std::vector<double> dout, dden;
};
Problem make(const Options& o, Index B, Index H, Index n, Index d, uint64_t seed, bool positive = false) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  Problem x;
  BatchProblem& p = x.p;
  p.opt = o, p.dtype = DType::bf16, p.batch = B, p.heads = H, p.kv_heads = H, p.n = n, p.d = d, p.dv = d;
  p.resize_buffers();
  for (auto* v : {&p.q, &p.k, &p.v})
    for (double& e : *v) e = round_to(DType::bf16, N(rng));
  if (positive)
    for (auto* v : {&p.q, &p.k})
      for (double& e : *v) e = std::fabs(e);
  x.dout.resize(static_cast<size_t>(B * H * n * d));
  for (double& e : x.dout) e = round_to(DType::bf16, N(rng));
  if (o.normalize) {
    x.dden.resize(static_cast<size_t>(B * H * n));
    for (double& e : x.dden) e = round_to(DType::bf16, N(rng));
  }
  return x;
}

// The honest candidate: the forward reference's outputs rounded to f32, the
// engine's f32 backward at width 32.
engine::CandidateOutputs honest(const Problem& x, const engine::Reference& ref) {
  engine::CandidateOutputs c = engine::fast_ours_gradients(x.p, engine::Precision::f32, x.dout, x.dden, 32);
  c.out = ref.out;
  for (double& e : c.out) e = round_to(DType::f32, e);
  c.out_dtype = DType::f32;
  c.dq_dtype = c.dk_dtype = c.dv_dtype = DType::f32;
  return c;
}

check::CheckOptions f32_options() {
  check::CheckOptions o;
  o.precision = engine::Precision::f32;
  o.require_gradients = true;
  return o;
}

void print_rows(const check::Report& r) {
  for (const auto& g : r.gradients)
    if (g.checked)
      std::printf("      %-4s scored %zu/%zu, worst score %.3g, ours worst %.3g, ratio %.3g (limit %.3g)%s\n", g.name.c_str(), g.scored,
                  g.elements, g.max_score, g.baseline_max_score, g.baseline_ratio, g.ratio_limit, g.fails() ? "  FAIL" : "");
}

// Section 1, in a child: one variant end to end.
void end_to_end(const Case& c, Index B, Index H, Index n, Index d, bool positive) {
  const Problem x = make(c.o, B, H, n, d, 1, positive);
  auto t0 = Clock::now();
  engine::Reference ref = engine::compute_reference(x.p);
  const double t_fwd = since(t0);
  t0 = Clock::now();
  ref.grad = engine::compute_gradient_reference(x.p, ref, x.dout, x.dden);
  const double t_grad = since(t0);
  const engine::CandidateOutputs cand = honest(x, ref);
  t0 = Clock::now();
  const check::Report r = check::check(x.p, ref, cand, f32_options());
  const double t_check = since(t0);
  const auto& g = *ref.grad;
  const double total = static_cast<double>(g.dq.size() + g.dk.size() + g.dv.size());
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double cpu =
      static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  std::printf("  %-22s forward ref %6.1f s, gradient ref %6.1f s, check %6.1f s: %6.1f s (CPU %.1f s); certified %.4f%%; %s\n",
              c.name.c_str(), t_fwd, t_grad, t_check, t_fwd + t_grad + t_check, cpu,
              100.0 * (total - static_cast<double>(g.uncertified)) / total, r.verdict().c_str());
  // The certified fraction of the elements that an f32 (f64) candidate's check scores (not ill-conditioned).
  for (const auto& [prec, u] : {std::pair{"f32", 0x1p-24}, {"f64", 0x1p-53}}) {
    const check::GradientYardstick y = check::gradient_yardstick(x.p, ref, g, engine::FormClass::masked, u);
    size_t scored = 0, certified = 0;
    for (const auto& [mstar, flags] : {std::pair{&y.q, &g.dq_flags}, {&y.k, &g.dk_flags}, {&y.v, &g.dv_flags}})
      for (size_t i = 0; i < mstar->size(); ++i)
        if (std::isfinite((*mstar)[i])) ++scored, certified += ((*flags)[i] & engine::kUncertified) == 0;
    std::printf("      of the %zu elements scored in %s, certified %.4f%%\n", scored, prec,
                scored ? 100.0 * static_cast<double>(certified) / static_cast<double>(scored) : 100.0);
    if (u != 0x1p-53) continue;
    // By the element's condition κ = M*/|value| (M*: its f64 magnitude): the certified fraction of those
    // with κ ≤ 2^8, 2^24 (an f32 evaluation can resolve the value itself) and 2^40.
    for (const double kmax : {0x1p8, 0x1p24, 0x1p40}) {
      size_t in = 0, cert = 0;
      for (const auto& [mstar, flags, val] : {std::tuple{&y.q, &g.dq_flags, &g.dq}, {&y.k, &g.dk_flags, &g.dk}, {&y.v, &g.dv_flags, &g.dv}})
        for (size_t i = 0; i < mstar->size(); ++i)
          if (std::isfinite((*mstar)[i]) && (*mstar)[i] <= kmax * std::fabs((*val)[i]))
            ++in, cert += ((*flags)[i] & engine::kUncertified) == 0;
      std::printf("        with condition <= 2^%.0f: %zu elements (%.2f%%), certified %.4f%%\n", std::log2(kmax), in,
                  100.0 * static_cast<double>(in) / total, in ? 100.0 * static_cast<double>(cert) / static_cast<double>(in) : 100.0);
    }
  }
  print_rows(r);
  std::fflush(stdout);
}

// Runs f in a child process; returns its peak resident memory in GB.
template <class F> double in_child(F&& f) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    f();
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  return static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0);
}

// Section 2: one planted error (one element, or one token row) of 4x the
// honest kernel's worst score in that tensor, in the planted element's own
// score units (|error| = 4·s_h·u·M*), flagged or not; and the smallest factor
// that rule 3 flags there (R(N)·max(our worst, the element's floor) / s_h).
void sensitivity(const Case& c, Index B, Index H, Index n, Index d, bool positive) {
  const Problem x = make(c.o, B, H, n, d, 2, positive);
  engine::Reference ref = engine::compute_reference(x.p);
  ref.grad = engine::compute_gradient_reference(x.p, ref, x.dout, x.dden);
  const engine::CandidateOutputs good = honest(x, ref);
  const check::Report base = check::check(x.p, ref, good, f32_options());
  const check::GradientYardstick y = check::gradient_yardstick(x.p, ref, *ref.grad, engine::FormClass::masked, 0x1p-24);
  std::printf("  %-22s%s n=%-5ld honest: %s\n", c.name.c_str(), positive ? " |q|,|k|" : "", static_cast<long>(n), base.verdict().c_str());
  std::mt19937_64 rng(7);
  const auto& g = *ref.grad;
  struct T {
    const char* name;
    std::vector<double> engine::CandidateOutputs::*cand;
    const std::vector<double>* ref;
    const std::vector<double>* mstar;
    int row;
  };
  for (const T& t : {T{"dq", &engine::CandidateOutputs::dq, &g.dq, &y.q, 0}, T{"dk", &engine::CandidateOutputs::dk, &g.dk, &y.k, 1},
                     T{"dv", &engine::CandidateOutputs::dv, &g.dv, &y.v, 2}}) {
    if (std::none_of(t.mstar->begin(), t.mstar->end(), [](double x) { return std::isfinite(x); })) {
      std::printf("    %s: no element can be scored in f32 (every one ill-conditioned): nothing to plant\n", t.name);
      continue;
    }
    const check::GradientRow& hr = base.gradients[static_cast<size_t>(t.row)];
    const double s_h = hr.max_score;
    for (const bool row : {false, true}) {
      engine::CandidateOutputs bad = good;
      const std::vector<double>& m = *t.mstar;
      size_t at = std::uniform_int_distribution<size_t>(0, m.size() - 1)(rng);
      while (!std::isfinite(m[at])) at = (at + 1) % m.size();
      const size_t r0 = row ? at / static_cast<size_t>(d) * static_cast<size_t>(d) : at, r1 = row ? r0 + static_cast<size_t>(d) : at + 1;
      for (size_t i = r0; i < r1; ++i)
        if (std::isfinite(m[i])) (bad.*t.cand)[i] = (*t.ref)[i] + 4 * s_h * 0x1p-24 * m[i];
      const check::Report r = check::check(x.p, ref, bad, f32_options());
      const auto& gr = r.gradients[static_cast<size_t>(t.row)];
      const double floor = check::kFloorRoundings * std::fabs((*t.ref)[at]) / m[at];
      // Which term of rule 3's bar R(N)·max(our worst, the element's floor, 1/R) binds there.
      const double bar = check::rule3_yardstick(hr.baseline_max_score, std::fabs((*t.ref)[at]) / m[at]);
      const char* binds = bar == hr.baseline_max_score ? "our worst" : bar == floor ? "the floor" : "one rounding";
      std::printf("    %s %-7s 4x the honest worst score %.3g: %s (ratio %.3g, limit %.3g); rule 3 flags from %.3gx (bar: %s)\n", t.name,
                  row ? "one row" : "one elt", s_h, gr.fails() ? "flagged" : "NOT flagged", gr.baseline_ratio, gr.ratio_limit,
                  hr.ratio_limit * bar / s_h, binds);
    }
  }
  std::fflush(stdout);
}

// Section 3: the scored fraction of normalized gradients.
void coverage(const char* name, const Options& o, Index n, Index d, bool positive) {
  const Problem x = make(o, 1, 2, n, d, 3, positive);
  engine::Reference ref = engine::compute_reference(x.p);
  ref.grad = engine::compute_gradient_reference(x.p, ref, x.dout, x.dden);
  engine::CandidateOutputs c = honest(x, ref);
  for (const engine::Precision prec : {engine::Precision::f32, engine::Precision::f64}) {
    check::CheckOptions co = f32_options();
    co.precision = prec;
    const check::Report r = check::check(x.p, ref, c, co);
    size_t scored = 0, all = 0;
    for (const auto& g : r.gradients) scored += g.scored, all += g.elements;
    std::printf("  %-30s %s compute: %.2f%% of dq, dk, dv scored (%zu of %zu)\n", name, engine::to_string(prec).c_str(),
                100.0 * static_cast<double>(scored) / static_cast<double>(all), scored, all);
  }
  std::fflush(stdout);
}

// Section 4: seconds of the gradient reference of one head (forward reference first, not counted).
double one_head(const Options& o, Index n, Index d) {
  const Problem x = make(o, 1, 1, n, d, 4);
  const engine::Reference ref = engine::compute_reference(x.p);
  const auto t0 = Clock::now();
  (void)engine::compute_gradient_reference(x.p, ref, x.dout, x.dden);
  return since(t0);
}

// Section 1's cases: every variant with a fast backward, normalized or not.
std::vector<Case> e2e_cases() {
  std::vector<Case> c;
  for (const auto& [name, v] : {std::pair{"la1", Variant::la1}, {"hla2", Variant::hla2}, {"ahla", Variant::ahla}, {"hla3", Variant::hla3}})
    for (const auto& [norm, on, mode] :
         {std::tuple{"none", false, EpsMode::add}, {"add", true, EpsMode::add}, {"clamp", true, EpsMode::clamp}})
      c.push_back({std::string(name) + " g.99 " + norm, opts(v, "99/100", on, mode)});
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, gaussian = false;
  std::string only, select;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--gaussian")) gaussian = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--case") && i + 1 < argc) select = argv[++i];
    else {
      std::fprintf(stderr, "usage: hla_bench_backward [--quick] [--only e2e|sensitivity|coverage|exponent] [--case TEXT] [--gaussian]\n");
      return 2;
    }
  }
  const Index B = quick ? 1 : 2, H = quick ? 2 : 8, n = quick ? 512 : 4096, d = quick ? 64 : 128;
  const std::vector<Case> cases{{"hla2 g.99 add", opts(Variant::hla2, "99/100", true)},
                                {"hla2 g.99 none", opts(Variant::hla2, "99/100", false)},
                                {"ahla g.99 add", opts(Variant::ahla, "99/100", true)},
                                {"hla3 g.99 add", opts(Variant::hla3, "99/100", true)},
                                {"la1 g.99 add", opts(Variant::la1, "99/100", true)}};
  if (only.empty() || only == "e2e") {
    std::printf("1. end to end, [B=%ld, H=%ld, n=%ld, d=dv=%ld], bf16 inputs (%s), an honest f32 backward\n", static_cast<long>(B),
                static_cast<long>(H), static_cast<long>(n), static_cast<long>(d), gaussian ? "Gaussian" : "|q|, |k|");
    for (const Case& c : e2e_cases()) {
      if (c.name.find(select) == std::string::npos) continue;
      const double gb = in_child([&] { end_to_end(c, B, H, n, d, !gaussian); });
      std::printf("      peak memory %.2f GB\n", gb);
    }
  }
  if (only.empty() || only == "sensitivity") {
    std::printf("2. sensitivity: one planted error of 4x the honest kernel's worst score\n");
    for (const Case& c : {cases[0], cases[1]})
      for (const bool positive : {false, true}) {
        if (!c.o.normalize && positive) continue;
        in_child([&] { sensitivity(c, B, H, n, d, positive); });
        in_child([&] { sensitivity(c, 1, 2, 256, d, positive); });
      }
  }
  if (only.empty() || only == "coverage") {
    std::printf("3. coverage of normalized gradients, n = 1024, d = %ld\n", static_cast<long>(d));
    in_child([&] { coverage("hla2 g.99 add, Gaussian q, k", cases[0].o, 1024, d, false); });
    in_child([&] { coverage("hla2 g1 add, Gaussian q, k", opts(Variant::hla2, "1", true), 1024, d, false); });
    for (const Case& c : e2e_cases())
      if (c.o.normalize) in_child([&] { coverage((c.name + ", |q|, |k|").c_str(), c.o, 1024, d, true); });
  }
  if (only.empty() || only == "exponent") {
    std::printf("4. cost exponent of the gradient reference in n (one head, d = %ld, hla2 g.99 add)\n", static_cast<long>(d));
    std::vector<double> ns, ts;
    for (Index m = 1024; m <= (quick ? 4096 : 16384); m *= 2) {
      const double t = one_head(cases[0].o, m, d);
      ns.push_back(std::log(static_cast<double>(m))), ts.push_back(std::log(t));
      std::printf("  n=%-6ld %7.2f s\n", static_cast<long>(m), t);
    }
    double mx = 0, my = 0, sxy = 0, sxx = 0;
    for (size_t i = 0; i < ns.size(); ++i) mx += ns[i] / static_cast<double>(ns.size()), my += ts[i] / static_cast<double>(ns.size());
    for (size_t i = 0; i < ns.size(); ++i) sxy += (ns[i] - mx) * (ts[i] - my), sxx += (ns[i] - mx) * (ns[i] - mx);
    std::printf("  exponent (least squares, log t vs log n): %.3f\n", sxy / sxx);
  }
  return 0;
}
