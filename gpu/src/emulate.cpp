// emulate.cpp — forward_emulated(): the kernel's code (core.hpp) run block by
// block on the CPU with the tensor-core products emulated; count_flops().
#include "emulate.hpp"
#include "host.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace hla_cuda {
namespace detail {

float mma_accumulate(float acc, double products_sum) {
  const double x = static_cast<double>(acc) + products_sum;
  float f = static_cast<float>(x);
  if (std::isfinite(x) && std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
  return f;
}

namespace {
// Whether [p, p + n) and [q, q + m) (floats) overlap.
bool overlap(const float* p, size_t n, const float* q, size_t m) { return p < q + m && q < p + n; }
size_t extent(const Operand& o, int rows, int cols) {  // floats spanned by a rows x cols operand view
  const int major = o.trans ? cols : rows, minor = o.trans ? rows : cols;
  return static_cast<size_t>(major - 1) * static_cast<size_t>(o.ld) + static_cast<size_t>(minor);
}
}  // namespace

void SerialBackend::gemm(const GemmArgs& g) {
  // The kernel's contract (core.hpp): tile multiples, C never an operand.
  if (g.M % 16 || g.N % 8 || g.K % 16 || g.M <= 0 || g.N <= 0 || g.K <= 0 || g.a.parts < 1 || g.a.parts > 3 ||
      g.b.parts < 1 || g.b.parts > 3) {
    std::fprintf(stderr, "hla_cuda emulator: bad gemm %d x %d x %d (parts %d, %d)\n", g.M, g.N, g.K, g.a.parts, g.b.parts);
    std::abort();
  }
  const size_t c_ext = static_cast<size_t>(g.M - 1) * static_cast<size_t>(g.ldc) + static_cast<size_t>(g.N);
  if (overlap(g.c, c_ext, g.a.p, extent(g.a, g.M, g.K)) || overlap(g.c, c_ext, g.b.p, extent(g.b, g.K, g.N))) {
    std::fprintf(stderr, "hla_cuda emulator: gemm output overlaps an operand\n");
    std::abort();
  }
  const int M = g.M, N = g.N, K = g.K;
  a_parts_.assign(static_cast<size_t>(3) * M * K, 0.0f);
  b_parts_.assign(static_cast<size_t>(3) * K * N, 0.0f);
  float p[3];
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      split(at_a(g.a, m, k), g.a.parts, p);
      for (int i = 0; i < 3; ++i) a_parts_[(static_cast<size_t>(i) * M + m) * K + k] = p[i];
    }
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      split(at_b(g.b, k, n), g.b.parts, p);
      for (int j = 0; j < 3; ++j) b_parts_[(static_cast<size_t>(j) * N + n) * K + k] = p[j];  // stored n-major
    }
  // The order and roundings of ThreadBackend::gemm: per k-block the hi·hi sum
  // alone (C = 0) added to `big` in f32, the other part products chained in `small`.
  auto block_sum = [&](int i, int j, int m, int n, int k0) {
    const float* ar = &a_parts_[(static_cast<size_t>(i) * M + m) * K + k0];
    const float* bc = &b_parts_[(static_cast<size_t>(j) * N + n) * K + k0];
    double s = 0;
    for (int kk = 0; kk < 16; ++kk) s += static_cast<double>(ar[kk]) * static_cast<double>(bc[kk]);
    return s;
  };
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float big = 0.0f, small = 0.0f;
      for (int k0 = 0; k0 < K; k0 += 16) {
        big += mma_accumulate(0.0f, block_sum(0, 0, m, n, k0));
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 3; ++j)
            if (i + j > 0 && i < g.a.parts && j < g.b.parts && keep_pair(i, j)) small = mma_accumulate(small, block_sum(i, j, m, n, k0));
      }
      g.c[m * g.ldc + n] = epilogue(g, m, n, big + small);
    }
}

void CountingBackend::gemm(const GemmArgs& g) {
  const double f = 2.0 * g.M * g.N * g.K;
  int pairs = 0;
  for (int i = 0; i < g.a.parts; ++i)
    for (int j = 0; j < g.b.parts; ++j) pairs += keep_pair(i, j);
  useful += f;
  mma += f * pairs;
}

}  // namespace detail

std::string forward_emulated(const Options& o, const Args& a) {
  if (std::string e = validate(o, a); !e.empty()) return e;
  detail::Params P = detail::make_params(o, a, detail::kSmemSm90);
  if (P.plan.W == 0) return "the head (D, Dv) does not fit the shared memory of a block";
  const int64_t blocks = detail::block_count(a);
  std::vector<float> ws(static_cast<size_t>(blocks) * static_cast<size_t>(P.plan.state));
  // Shared memory is not cleared on a GPU: NaN here, so that reading what no step wrote shows in the outputs.
  std::vector<float> smem(static_cast<size_t>(P.plan.total), std::nanf(""));
  P.ws = ws.data();
  detail::SerialBackend be;
  for (int64_t b = 0; b < blocks; ++b) detail::run_block(be, P, smem.data(), static_cast<int>(b));
  return "";
}

Flops count_flops(const Options& o, const Args& a) {
  Flops f;
  if (!validate(o, a).empty()) return f;
  detail::Params P = detail::make_params(o, a, detail::kSmemSm90);
  if (P.plan.W == 0) return f;
  // Nothing is read or written (for_each does nothing); the buffers only have to exist.
  // The work of a block depends on its sequence only: one head per sequence, times H.
  P.init = nullptr, P.fin = nullptr;
  P.H = 1, P.Hkv = 1;
  std::vector<float> ws(static_cast<size_t>(P.nseq) * static_cast<size_t>(P.plan.state)), smem(static_cast<size_t>(P.plan.total));
  P.ws = ws.data();
  detail::CountingBackend be;
  for (int64_t s = 0; s < P.nseq; ++s) detail::run_block(be, P, smem.data(), static_cast<int>(s));
  be.useful *= static_cast<double>(a.H);
  be.mma *= static_cast<double>(a.H);
  f.useful = be.useful;
  f.mma = be.mma;
  return f;
}

}  // namespace hla_cuda
