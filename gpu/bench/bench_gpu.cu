// hla_bench_gpu: forward time, TFLOP/s and GB/s of the CUDA kernel for hla2,
// ahla and hla3 at n in {1k, 4k, 16k}, d = dv = 128, bf16 inputs, next to a
// cuBLAS bf16 GEMM (f32 accumulation) with the same matrix-product FLOPs, run
// in the same process.
//
//   hla_bench_gpu [--B 8] [--H 16] [--d 128] [--n 1024,4096,16384] [--variants hla2,ahla,hla3]
//                 [--gamma 1] [--reps 5] [--precision f32,bf16]
//
// FLOPs: 2·M·N·K summed over the kernel's matrix products (count_flops), each
// product once ("useful"); the tensor cores execute more in precision f32
// (bf16 parts: up to 6 part products), reported as "mma". TFLOP/s = useful
// FLOPs / time; GB/s = bytes of q, k, v and out / time (the state stays in L2
// and is not counted). The GEMM: M = N = 4096, K chosen so that 2·M·N·K equals
// the kernel's useful FLOPs (rounded to a multiple of 64).
#include "hla_cuda.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

#define CUDA_OK(x)                                                                             \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define CUBLAS_OK(x)                                                                   \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #x, static_cast<int>(s_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// Deterministic values in [-scale, scale) (a hash of the index).
__global__ void fill_bf16(__nv_bfloat16* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    x[i] = __float2bfloat16((static_cast<float>(h) * 2.3283064e-10f * 2.0f - 1.0f) * scale);
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

template <class F> float time_ms(F&& f, int reps) {
  f();  // warm-up (also the first launch's setup)
  CUDA_OK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  CUDA_OK(cudaEventRecord(a));
  for (int r = 0; r < reps; ++r) f();
  CUDA_OK(cudaEventRecord(b));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  return ms / static_cast<float>(reps);
}

struct BenchArgs {
  int64_t B = 8, H = 16, d = 128;
  std::vector<int64_t> ns{1024, 4096, 16384};
  std::vector<std::string> variants{"hla2", "ahla", "hla3"}, precisions{"f32", "bf16"};
  double gamma = 1;
  int reps = 5;
};

// The options; false (after a message) on an unknown one.
bool parse_args(int argc, char** argv, BenchArgs& a) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--B") a.B = std::atoll(v.c_str());
    else if (k == "--H") a.H = std::atoll(v.c_str());
    else if (k == "--d") a.d = std::atoll(v.c_str());
    else if (k == "--gamma") a.gamma = std::atof(v.c_str());
    else if (k == "--reps") a.reps = std::atoi(v.c_str());
    else if (k == "--variants") a.variants = split(v);
    else if (k == "--precision") a.precisions = split(v);
    else if (k == "--n") {
      a.ns.clear();
      for (const auto& x : split(v)) a.ns.push_back(std::atoll(x.c_str()));
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return false;
    }
  }
  return true;
}

// A bf16 GEMM (f32 accumulation) of about `useful` FLOPs: {ms, TFLOP/s}.
std::pair<float, double> time_gemm(cublasHandle_t blas, double useful, int reps) {
  const int M = 4096, N = 4096;
  const int K = std::max(64, static_cast<int>(std::max(64.0, useful / (2.0 * M * N)) / 64) * 64);
  __nv_bfloat16 *ga, *gb, *gc;
  CUDA_OK(cudaMalloc(&ga, static_cast<size_t>(M) * K * 2));
  CUDA_OK(cudaMalloc(&gb, static_cast<size_t>(K) * N * 2));
  CUDA_OK(cudaMalloc(&gc, static_cast<size_t>(M) * N * 2));
  fill_bf16<<<1024, 256>>>(ga, static_cast<size_t>(M) * K, 4u, 1.0f);
  fill_bf16<<<1024, 256>>>(gb, static_cast<size_t>(K) * N, 5u, 1.0f);
  const float one = 1, zero = 0;
  const float gms = time_ms(
      [&] {
        CUBLAS_OK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, ga, CUDA_R_16BF, M, gb, CUDA_R_16BF, K, &zero, gc,
                               CUDA_R_16BF, M, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      reps);
  CUDA_OK(cudaFree(ga));
  CUDA_OK(cudaFree(gb));
  CUDA_OK(cudaFree(gc));
  return {gms, 2.0 * M * N * K / (gms * 1e-3) / 1e12};
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs ba;
  if (!parse_args(argc, argv, ba)) return 2;
  const int64_t B = ba.B, H = ba.H, d = ba.d;
  const std::vector<int64_t>& ns = ba.ns;
  const double gamma = ba.gamma;
  const int reps = ba.reps;
  std::string why;
  if (hla_cuda::device_count(&why) == 0) {
    std::printf("hla_bench_gpu: no CUDA device (%s)\n", why.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("hla_bench_gpu on %s (sm_%d%d, %d SMs): B=%lld H=%lld d=dv=%lld bf16, gamma %g, %d reps\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(d), gamma,
              reps);
  cublasHandle_t blas;
  CUBLAS_OK(cublasCreate(&blas));

  const int64_t nmax = *std::max_element(ns.begin(), ns.end());
  const size_t elems = static_cast<size_t>(B * nmax * H * d);
  __nv_bfloat16 *q, *k, *v, *out;
  CUDA_OK(cudaMalloc(&q, elems * 2));
  CUDA_OK(cudaMalloc(&k, elems * 2));
  CUDA_OK(cudaMalloc(&v, elems * 2));
  CUDA_OK(cudaMalloc(&out, elems * 2));
  // Scaled so that no sum overflows at n = 16k (q·k ~ d/3 · s², products of three such).
  fill_bf16<<<1024, 256>>>(q, elems, 1u, 0.25f);
  fill_bf16<<<1024, 256>>>(k, elems, 2u, 0.25f);
  fill_bf16<<<1024, 256>>>(v, elems, 3u, 1.0f);
  CUDA_OK(cudaDeviceSynchronize());

  std::printf("%-5s %-4s %6s %10s %9s %9s %9s | %11s %9s %7s\n", "var", "prec", "n", "time ms", "TFLOP/s", "mma TF/s", "GB/s",
              "GEMM TF/s", "GEMM ms", "ratio");
  for (const auto& var : ba.variants)
    for (int64_t n : ns)
      for (const auto& prec : ba.precisions) {
        hla_cuda::Options o;
        o.variant = var == "hla2" ? hla_cuda::Variant::hla2 : var == "ahla" ? hla_cuda::Variant::ahla : var == "hla3" ? hla_cuda::Variant::hla3
                                                                                                                  : hla_cuda::Variant::la1;
        o.gamma = gamma;
        o.precision = prec == "bf16" ? hla_cuda::Precision::bf16 : hla_cuda::Precision::f32;
        hla_cuda::Args a;
        a.dtype = hla_cuda::DType::bf16;
        a.B = B, a.T = n, a.H = H, a.Hkv = H, a.D = d, a.Dv = d;
        a.q = q, a.k = k, a.v = v, a.out = out;
        const hla_cuda::Flops fl = hla_cuda::count_flops(o, a);
        void* ws = nullptr;
        CUDA_OK(cudaMalloc(&ws, hla_cuda::workspace_bytes(o, a)));
        std::string err;
        const float ms = time_ms([&] {
          if (err.empty()) err = hla_cuda::forward(o, a, ws, nullptr);
        }, reps);
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaFree(ws));
        if (!err.empty()) {
          std::printf("%-5s %-4s %6lld  error: %s\n", var.c_str(), prec.c_str(), static_cast<long long>(n), err.c_str());
          continue;
        }
        const double bytes = 4.0 * static_cast<double>(B * n * H * d) * 2;
        const auto [gms, gemm_tflops] = time_gemm(blas, fl.useful, reps);  // the GEMM with the same useful FLOPs
        const double tflops = fl.useful / (ms * 1e-3) / 1e12;
        std::printf("%-5s %-4s %6lld %10.3f %9.2f %9.2f %9.1f | %11.1f %9.3f %6.1f%%\n", var.c_str(), prec.c_str(), static_cast<long long>(n),
                    ms, tflops, fl.mma / (ms * 1e-3) / 1e12, bytes / (ms * 1e-3) / 1e9, gemm_tflops, gms, 100.0 * tflops / gemm_tflops);
      }
  CUBLAS_OK(cublasDestroy(blas));
  CUDA_OK(cudaFree(q));
  CUDA_OK(cudaFree(k));
  CUDA_OK(cudaFree(v));
  CUDA_OK(cudaFree(out));
  return 0;
}
