// hla_bench_reference: the production-scale reference at the shapes users run, every
// number a ratio or a measurement of this one run; nothing is asserted.
//   1. the double-double chunked engine vs the same chunked form in double
//      (one head, one thread): cost ratio per variant;
//   2. the double chunked form's rate vs Eigen's dgemm (compiled for this
//      machine) on the form's block shapes, and our bare double GEMM kernel;
//   3. the cost exponent in n (double-double engine, one head, n = 1k … 16k);
//   4. end to end at [B=2, H=8, n=4096, d=dv=128], bf16 inputs: `hla ref` and
//      `hla check` wall time and peak memory (hla2 γ = 99/100 normalized, ahla,
//      hla3), and the certified fraction of the reference on Gaussian inputs.
// Usage: hla_bench_reference [--quick] [--hla PATH] [--skip-e2e] [--work DIR]
//   --quick: smaller shapes (a smoke run); PATH: the hla executable (default:
//   ../tools/hla next to this binary, i.e. build/tools/hla).
#include "hla/fast/engine.hpp"
#include "hla/io/safetensors.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

double eigen_dgemm_rate(long m, long k, long n, double seconds);  // bench_reference_eigen.cpp

using namespace hla;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct HeadInputs {
  std::vector<double> q, k, v;
  Index n, d, dv;
};

HeadInputs gaussian_head(Index n, Index d, Index dv, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  HeadInputs h{std::vector<double>(static_cast<size_t>(n * d)), std::vector<double>(static_cast<size_t>(n * d)),
               std::vector<double>(static_cast<size_t>(n * dv)), n, d, dv};
  for (auto* x : {&h.q, &h.k, &h.v})
    for (double& e : *x) e = round_to(DType::bf16, N(rng));
  return h;
}

template <class S> fast::FastHead<S> head_of(const HeadInputs& in, Variant v) {
  Options o;
  o.variant = v;
  o.gamma = Rational(99, 100);
  auto conv = [](double x) {
    if constexpr (std::is_same_v<S, fast::DD>) return fast::DD{x, 0};
    else return x;
  };
  return fast::make_fast_head<S>(
      o, in.n, in.d, in.dv, [&](Index t, Index c) { return conv(in.q[static_cast<size_t>(t * in.d + c)]); },
      [&](Index t, Index c) { return conv(in.k[static_cast<size_t>(t * in.d + c)]); },
      [&](Index t, Index c) { return conv(in.v[static_cast<size_t>(t * in.dv + c)]); }, 64);
}

// Seconds of one evaluation (the best of `reps`), and the multiply-adds it did.
template <class S> std::pair<double, double> time_engine(const fast::FastHead<S>& h, int reps) {
  double best = 1e300, macs = 0;
  for (int r = 0; r < reps; ++r) {
    const uint64_t m0 = fast::ops::mac_counter().load();
    const auto t0 = Clock::now();
    const fast::HeadResult<S> res = fast::evaluate_head(h);
    best = std::min(best, since(t0));
    macs = static_cast<double>(fast::ops::mac_counter().load() - m0);
    if (!res.finite) std::printf("  (warning: non-finite result)\n");
  }
  return {best, macs};
}

// Runs argv, returns {exit status, wall seconds, peak resident MB, stdout}.
struct Run {
  int status = -1;
  double seconds = 0, cpu = 0, peak_mb = 0;  // wall, user + system CPU (all threads), peak resident
  std::string out;
};
Run run(const std::vector<std::string>& argv) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return {};
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  close(pipefd[1]);
  Run r;
  char buf[4096];
  for (ssize_t got; (got = read(pipefd[0], buf, sizeof buf)) > 0;) r.out.append(buf, static_cast<size_t>(got));
  close(pipefd[0]);
  int status = 0;
  struct rusage ru {};
  wait4(pid, &status, 0, &ru);
  r.seconds = since(t0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.peak_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  r.cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  return r;
}

void write_inputs(const fs::path& file, Index B, Index H, Index n, Index d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> N;
  io::SafetensorsFile f;
  for (const char* name : {"q", "k", "v"}) {
    std::vector<double> x(static_cast<size_t>(B * H * n * d));
    for (double& e : x) e = round_to(DType::bf16, N(rng));
    f.tensors[name] = io::float_tensor(DType::bf16, {B, H, n, d}, x, name);
  }
  io::write_safetensors(file, f);
}

}  // namespace

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// 1. One head, one thread: the double-double engine against double; returns hla2's double rate (MAC/s).
double engine_vs_double(Index n1, Index d1) {
  // 1 + 2. One head, one thread: dd vs double, and rates.
  std::printf("\n1. double-double chunked engine vs the same chunked form in double (one head n=%ld d=dv=%ld, one thread, best of 2)\n",
              static_cast<long>(n1), static_cast<long>(d1));
  std::printf("   %-6s %10s %10s %8s %14s %14s\n", "", "dd s", "double s", "ratio", "dd GMAC/s", "double GMAC/s");
  const HeadInputs in1 = gaussian_head(n1, d1, d1, 7);
  double double_rate = 0;
  for (Variant v : variants_where(is_kernel_variant)) {
    const auto [tdd, mdd] = time_engine(head_of<fast::DD>(in1, v), 2);
    const auto [td, md] = time_engine(head_of<double>(in1, v), 2);
    if (v == Variant::hla2) double_rate = md / td;
    std::printf("   %-6s %10.3f %10.3f %8.2f %14.3f %14.3f\n", to_string(v).c_str(), tdd, td, tdd / td, mdd / tdd / 1e9, md / td / 1e9);
  }
  return double_rate;
}

// 2. The double chunked form's rate against Eigen's dgemm on the same block shapes.
void double_vs_gemm(double double_rate, Index d1) {
  std::printf("\n2. double chunked form (hla2, GEMM multiply-adds of values and magnitudes per second) vs Eigen dgemm, same block shapes\n");
  const double eig1 = eigen_dgemm_rate(64, d1, d1 + 1, 0.5), eig2 = eigen_dgemm_rate(d1, 64, d1 + 1, 0.5);
  const double eig = std::min(eig1, eig2);
  {
    // Our bare double GEMM kernel on the first shape.
    const Index m = 64, k = d1, nn = fast::padded(d1 + 1);
    std::vector<double> A(static_cast<size_t>(m * k), 0.5), Bm(static_cast<size_t>(k * nn), 0.25), C(static_cast<size_t>(m * nn), 0);
    long reps = 0;
    const auto t0 = Clock::now();
    while (since(t0) < 0.5) {
      for (int r = 0; r < 16; ++r) fast::kernels().gemm_d(m, nn, k, A.data(), k, false, Bm.data(), nn, C.data(), nn, false, false);
      reps += 16;
    }
    const double ours = static_cast<double>(m * k * (d1 + 1)) * static_cast<double>(reps) / since(t0);
    std::printf("   Eigen dgemm (-march=native) 64x%ld·%ldx%ld: %.2f GMAC/s, %ldx64·64x%ld: %.2f GMAC/s\n", static_cast<long>(d1),
                static_cast<long>(d1), static_cast<long>(d1 + 1), eig1 / 1e9, static_cast<long>(d1), static_cast<long>(d1 + 1),
                eig2 / 1e9);
    std::printf("   our double GEMM kernel on the first: %.2f GMAC/s (%.0f%% of Eigen)\n", ours / 1e9, 100 * ours / eig1);
    std::printf("   the whole double chunked form (hla2): %.2f GMAC/s = %.0f%% of Eigen's slower block rate (target >= 50%%)\n",
                double_rate / 1e9, 100 * double_rate / eig);
  }
}

// 3. The cost exponent in n.
void cost_exponent(bool quick) {
  // 3. Cost exponent in n.
  std::printf("\n3. cost exponent in n (double-double engine, hla2, one head d=dv=64, one thread)\n");
  std::vector<double> ln, lt;
  for (Index n = 1024; n <= (quick ? 4096 : 16384); n *= 2) {
    const auto [t, m] = time_engine(head_of<fast::DD>(gaussian_head(n, 64, 64, 11), Variant::hla2), 1);
    std::printf("   n=%6ld  %.3f s  (%.1f us per token)\n", static_cast<long>(n), t, 1e6 * t / static_cast<double>(n));
    ln.push_back(std::log(static_cast<double>(n)));
    lt.push_back(std::log(t));
    (void)m;
  }
  {
    const double mx = std::accumulate(ln.begin(), ln.end(), 0.0) / static_cast<double>(ln.size());
    const double my = std::accumulate(lt.begin(), lt.end(), 0.0) / static_cast<double>(lt.size());
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < ln.size(); ++i) sxy += (ln[i] - mx) * (lt[i] - my), sxx += (ln[i] - mx) * (ln[i] - mx);
    std::printf("   fitted exponent: %.3f (target 1.0 +- 0.1)\n", sxy / sxx);
  }
}

// 4. End to end: hla ref + hla check at production shapes.
void end_to_end(bool quick, const std::string& hla, const std::string& work) {
  // 4. End to end.
  const Index B = quick ? 1 : 2, H = quick ? 4 : 8, n = quick ? 1024 : 4096, d = quick ? 64 : 128;
  std::printf("\n4. hla ref + hla check at [B=%ld, H=%ld, n=%ld, d=dv=%ld], bf16 inputs, candidate: our chunked form in f32, "
              "checked with --precision bf16=f32 (%s)\n",
              static_cast<long>(B), static_cast<long>(H), static_cast<long>(n), static_cast<long>(d), hla.c_str());
  fs::create_directories(work);
  const fs::path in = fs::path(work) / "inputs.safetensors";
  write_inputs(in, B, H, n, d, 2026);
  std::printf("   %-34s %9s %9s %9s %11s %10s %12s  %s\n", "variant", "ref s", "check s", "total s", "CPU s", "peak MB", "certified",
              "verdict");
  struct V {
    const char* name;
    std::vector<std::string> opts;
  };
  for (const V& v : {V{"hla2 gamma=99/100 normalize=add", {"--variant", "hla2", "--gamma", "99/100", "--normalize", "add"}},
                     V{"ahla gamma=99/100", {"--variant", "ahla", "--gamma", "99/100"}},
                     V{"hla3 gamma=99/100", {"--variant", "hla3", "--gamma", "99/100"}}}) {
    const fs::path fx = fs::path(work) / "fixture.safetensors", cand = fs::path(work) / "candidate.safetensors";
    std::vector<std::string> ref_argv{hla, "ref", in.string(), "--out", fx.string(), "--no-progress"};
    ref_argv.insert(ref_argv.end(), v.opts.begin(), v.opts.end());
    const Run r = run(ref_argv);
    std::string certified = "?";
    if (const size_t at = r.out.find("rounded ("); at != std::string::npos)
      certified = r.out.substr(at + 9, r.out.find(')', at) - at - 9);
    const Run e = run({hla, "eval", fx.string(), "--form", "chunked_matmul", "--precision", "f32", "--out", cand.string()});
    const Run c = run({hla, "check", fx.string(), cand.string(), "--precision", "bf16=f32", "--no-progress"});
    const std::string verdict = c.status == 0 ? "PASS" : c.status == 1 ? "FAIL" : "exit " + std::to_string(c.status);
    std::printf("   %-34s %9.1f %9.1f %9.1f %5.1f+%5.1f %10.0f %12s  %s%s\n", v.name, r.seconds, c.seconds, r.seconds + c.seconds, r.cpu,
                c.cpu, std::max(r.peak_mb, c.peak_mb), certified.c_str(), verdict.c_str(), r.status || e.status ? " (ref/eval failed)" : "");
    std::fflush(stdout);
  }
  std::printf("   (targets: hla2 and ahla <= 10 s, hla3 <= 60 s, peak <= 4096 MB, certified >= 99.9%%; CPU s: ref + check, all threads;\n"
              "    load average %.2f at the end: wall times on a shared machine exceed the CPU time over the cores)\n", load_average());
}

int main(int argc, char** argv) {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // as the hla tool does (blocks from the heap, reused)
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  bool quick = false, e2e = true;
  std::string hla = (fs::path(argv[0]).parent_path() / "hla").string(), work = (fs::temp_directory_path() / "hla_bench_reference").string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--skip-e2e") e2e = false;
    else if (a == "--hla" && i + 1 < argc) hla = argv[++i];
    else if (a == "--work" && i + 1 < argc) work = argv[++i];
    else {
      std::fprintf(stderr, "usage: hla_bench_reference [--quick] [--skip-e2e] [--hla PATH] [--work DIR]\n");
      return 2;
    }
  }
  std::printf("hla_bench_reference: kernels %s, %u hardware threads, load average %.2f at the start%s\n", fast::kernels().name,
              std::thread::hardware_concurrency(), load_average(), quick ? " (--quick: smaller shapes)" : "");

  const Index d1 = quick ? 64 : 128;
  const double double_rate = engine_vs_double(quick ? 1024 : 4096, d1);
  double_vs_gemm(double_rate, d1);
  cost_exponent(quick);
  if (e2e) end_to_end(quick, hla, work);
  return 0;
}
