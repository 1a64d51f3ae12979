// kernel.cu — the device side: the mma.sync context for core.hpp's
// ThreadBackend, the kernel (one block per (sequence, query head)) and
// forward(), which launches it. One kernel for every variant and dtype (a
// runtime switch): one instantiation per architecture keeps the build short.
#include "core.hpp"
#include "host.hpp"

#include <cuda_runtime.h>

#include <string>

namespace hla_cuda {
namespace detail {

struct DeviceCtx {
  __device__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ int nthreads() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() { __syncthreads(); }
  __device__ void atomic_or(int* flag) { atomicOr(flag, 1); }
  // acc (16x8 f32 C/D fragment) += A (16x16 bf16) · B (16x8 bf16); sm_80+.
  __device__ void mma(float* acc, const uint32_t* a, const uint32_t* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__global__ void __launch_bounds__(kThreads) hla_forward_kernel(const __grid_constant__ Params P) {
  extern __shared__ float4 smem4[];
  DeviceCtx ctx;
  ThreadBackend<DeviceCtx> be{ctx};
  run_block(be, P, reinterpret_cast<float*>(smem4), static_cast<int>(blockIdx.x));
}

std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace detail

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = detail::cuda_error("cudaGetDeviceCount", e);
    cudaGetLastError();  // clear it
    return 0;
  }
  if (n == 0 && why) *why = "cudaGetDeviceCount reports 0 devices";
  return n;
}

std::string forward(const Options& o, const Args& a, void* workspace, CUstream_st* stream) {
  using detail::cuda_error;
  if (std::string e = validate(o, a); !e.empty()) return e;
  int dev = 0, major = 0, smem = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return cuda_error("querying the device", e);
  if (major < 8) return "needs a GPU of compute capability 8.0 or newer (bf16 mma.sync), this one has " + std::to_string(major) + ".x";
  detail::Params P = detail::make_params(o, a, static_cast<size_t>(smem));
  if (P.plan.W == 0) return "the head (D, Dv) does not fit the " + std::to_string(smem) + " bytes of shared memory of a block";
  const int64_t blocks = detail::block_count(a);
  if (blocks == 0) return "";
  void* own = nullptr;
  if (!workspace) {
    if ((e = cudaMalloc(&own, workspace_bytes(o, a))) != cudaSuccess) return cuda_error("cudaMalloc (workspace)", e);
    workspace = own;
  }
  P.ws = static_cast<float*>(workspace);
  const size_t bytes = static_cast<size_t>(P.plan.total) * sizeof(float);
  e = cudaFuncSetAttribute(detail::hla_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e == cudaSuccess) {
    detail::hla_forward_kernel<<<static_cast<unsigned>(blocks), detail::kThreads, bytes, stream>>>(P);
    e = cudaGetLastError();
  }
  std::string err = e == cudaSuccess ? "" : cuda_error("launching hla_forward_kernel", e);
  if (own) {
    const cudaError_t s = cudaStreamSynchronize(stream);
    if (err.empty() && s != cudaSuccess) err = cuda_error("hla_forward_kernel", s);
    cudaFree(own);
  }
  return err;
}

}  // namespace hla_cuda
