// engine_cuda.cpp — the C ABI's engine on the GPU: device buffers for one
// problem, copies in, forward(), copies out. Every CUDA error is returned as a
// message (the harness reports it as an error, not a crash); so is a machine
// without a CUDA device.
#include "engine.hpp"
#include "host.hpp"

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace hla_cuda::detail {
namespace {

std::string cuda_error(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

// Device buffers freed on every path out.
class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    for (void* p : ptrs_) cudaFree(p);
  }
  // A device copy of `bytes` host bytes (nullptr stays nullptr); "" or an error.
  std::string copy_in(const void* host, size_t bytes, void** dev) {
    *dev = nullptr;
    if (!host) return "";
    if (std::string e = alloc(bytes, dev); !e.empty()) return e;
    const cudaError_t e = cudaMemcpy(*dev, host, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? "" : cuda_error("cudaMemcpy to the device", e);
  }
  std::string alloc(size_t bytes, void** dev) {
    const cudaError_t e = cudaMalloc(dev, bytes ? bytes : 1);
    if (e != cudaSuccess) return cuda_error("cudaMalloc", e);
    ptrs_.push_back(*dev);
    return "";
  }

 private:
  std::vector<void*> ptrs_;
};

size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : 2; }

}  // namespace

std::string engine_run(const Options& o, const Args& host) {
  std::string why;
  if (device_count(&why) == 0) return "no CUDA device (" + why + ")";
  if (std::string e = validate(o, host); !e.empty()) return e;
  const size_t es = dtype_bytes(host.dtype);
  const size_t nq = static_cast<size_t>(host.B * host.T * host.H * host.D), nk = static_cast<size_t>(host.B * host.T * host.Hkv * host.D),
               nv = static_cast<size_t>(host.B * host.T * host.Hkv * host.Dv), no = static_cast<size_t>(host.B * host.T * host.H * host.Dv),
               nd = static_cast<size_t>(host.B * host.T * host.H);
  const size_t ns = static_cast<size_t>(block_count(host) * state_size(o.variant, host.D, host.Dv));
  DeviceBuffers buf;
  Args dev = host;
  void *q, *k, *v, *out, *den = nullptr, *cu, *init, *fin = nullptr, *ws;
  std::string e;
  if (e.empty()) e = buf.copy_in(host.q, nq * es, &q);
  if (e.empty()) e = buf.copy_in(host.k, nk * es, &k);
  if (e.empty()) e = buf.copy_in(host.v, nv * es, &v);
  if (e.empty()) e = buf.alloc(no * es, &out);
  if (e.empty() && host.den) e = buf.alloc(nd * sizeof(float), &den);
  if (e.empty()) e = buf.copy_in(host.cu_seqlens, static_cast<size_t>(host.num_seqs + 1) * sizeof(int64_t), &cu);
  if (e.empty()) e = buf.copy_in(host.initial_state, ns * sizeof(float), &init);
  if (e.empty() && host.final_state) e = buf.alloc(ns * sizeof(float), &fin);
  if (e.empty()) e = buf.alloc(workspace_bytes(o, host), &ws);
  if (!e.empty()) return e;
  dev.q = q, dev.k = k, dev.v = v, dev.out = out, dev.den = static_cast<float*>(den);
  dev.cu_seqlens = static_cast<const int64_t*>(cu);
  dev.initial_state = static_cast<const float*>(init), dev.final_state = static_cast<float*>(fin);
  if (e = forward(o, dev, ws, nullptr); !e.empty()) return e;
  cudaError_t c = cudaDeviceSynchronize();
  if (c != cudaSuccess) return cuda_error("hla_forward_kernel", c);
  if ((c = cudaMemcpy(host.out, out, no * es, cudaMemcpyDeviceToHost)) != cudaSuccess) return cuda_error("cudaMemcpy (out)", c);
  if (host.den && (c = cudaMemcpy(host.den, den, nd * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return cuda_error("cudaMemcpy (den)", c);
  if (host.final_state && (c = cudaMemcpy(host.final_state, fin, ns * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
    return cuda_error("cudaMemcpy (state)", c);
  return "";
}

}  // namespace hla_cuda::detail
