// hla_cuda.hpp — the CUDA HLA forward kernel as a small C++ API on device
// pointers, in the layout of flash-linear-attention (FLA): [B, T, H, D] tensors,
// `scale`, an initial state, the final state on request, and packed
// variable-length batches (cu_seqlens). The C ABI library (libhla_cuda.so,
// include/hla_impl.h) wraps it: it copies host buffers to the device, converts
// the [B, H, n, d] layout and calls forward().
//
// What it computes is SPEC.md of hla-oracle (masked variants only): la1, hla2
// (decay, ridge), ahla, hla3, with den, normalize (add / sign-preserving clamp)
// and scale; grouped heads (query head h reads K/V head h / (H / Hkv)).
// gpu/README.md describes the algorithm, the schedule and the numerics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;  // = cudaStream_t, without the CUDA headers

namespace hla_cuda {

// Codes equal to include/hla_impl.h's (HLA_LA1..., HLA_F32...).
enum class Variant : int32_t { la1 = 0, hla2 = 1, ahla = 2, hla3 = 3 };
enum class DType : int32_t { f32 = 1, bf16 = 2, f16 = 3 };
enum class EpsMode : int32_t { add = 0, clamp = 1 };

// What the tensor-core products carry. f32: every operand that is not an
// input value (a score, a decayed product, a state) is split into three bf16
// parts hi + mid + lo (exact for an f32), inputs into as many parts as their
// dtype needs (bf16 1, f16 2, f32 3), and the part products down to 2^-24 are
// accumulated in f32: the products are those of f32 arithmetic, the declared
// precision is "f32" for every input dtype. bf16: every operand is rounded to
// one bf16 part (declared precision "bf16"): up to 6x fewer MMAs.
enum class Precision : int32_t { f32 = 0, bf16 = 1 };

struct Options {
  Variant variant = Variant::hla2;
  double gamma = 1;      // decay, in (0, 1]
  double lambda = 0;     // ridge (hla2 only), >= 0
  double scale = 1;      // q is multiplied by scale (applied to the outputs as scale^order; see gpu/README.md)
  bool normalize = false;
  EpsMode eps_mode = EpsMode::add;
  double eps = 1e-6;
  Precision precision = Precision::f32;
  // Chunk width (16, 32 or 64; 0: the largest that fits the device's shared
  // memory). Tests set it to exercise several chunks on short sequences.
  int chunk = 0;
};

// Device pointers (host pointers for forward_emulated). Dense row-major:
//   q [B, T, H, D], k [B, T, Hkv, D], v [B, T, Hkv, Dv]   in dtype
//   out [B, T, H, Dv] in dtype, den [B, T, H] f32 (optional)
//   cu_seqlens: nullptr, or num_seqs + 1 int64 offsets 0 = c_0 < ... < c_N = T with B == 1
//   initial_state / final_state: nullptr, or f32 [S, H, state_size()] with S = num_seqs
//   (packed) or B; final_state != nullptr is FLA's output_final_state.
struct Args {
  DType dtype = DType::bf16;
  int64_t B = 1, T = 0, H = 1, Hkv = 1, D = 0, Dv = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* den = nullptr;
  const int64_t* cu_seqlens = nullptr;
  int64_t num_seqs = 0;
  const float* initial_state = nullptr;
  float* final_state = nullptr;
};

// The state of one (sequence, head), in floats, as slots of row-major
// matrices, w = Dv + 1 (the last column is the denominator's twin vector):
//   la1  KV|z [D][w]
//   hla2 S [D][D], C|m [D][w], F|f [D][w]   (F: the corrected state S C - G)
//   ahla P|mK [D][w], E|n [D][w]
//   hla3 S [D][D], P|mK [D][w], F|eta [D][w]
// The moments are those of the unscaled q (scale enters the outputs only).
int64_t state_size(Variant v, int64_t D, int64_t Dv);

// "" when the problem is well formed and supported, else why not. Checks
// shapes and options only (device memory is not read: cu_seqlens is trusted).
std::string validate(const Options& o, const Args& a);

// Bytes of device workspace forward() needs (the padded f32 running states).
size_t workspace_bytes(const Options& o, const Args& a);

// Launches the kernel on `stream` (asynchronous); "" or an error message.
// workspace: workspace_bytes() of device memory, or nullptr (then allocated and
// freed here, which synchronizes the stream). Defined in libhla_cuda only.
std::string forward(const Options& o, const Args& a, void* workspace, CUstream_st* stream);

// Number of CUDA devices, or 0 with the reason in *why. Defined in libhla_cuda only.
int device_count(std::string* why);

// The same computation on the CPU with host pointers: the kernel's own code,
// one thread block after the other, its tensor-core products emulated (the
// same bf16 parts, products summed in double per 16-long block and rounded
// toward zero into the f32 accumulator). For testing without a GPU.
std::string forward_emulated(const Options& o, const Args& a);

// Matrix-product FLOPs of one forward (2·M·N·K summed over the kernel's
// products): `useful` counts each product once, `mma` counts every bf16 part
// product the tensor cores execute. For the benchmark's TFLOP/s. Reads no tensor;
// a.cu_seqlens, if given, must be a host pointer here.
struct Flops {
  double useful = 0, mma = 0;
};
Flops count_flops(const Options& o, const Args& a);

}  // namespace hla_cuda
