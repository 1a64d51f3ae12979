// cabi.cpp — include/hla_impl.h on top of the C++ API: validates the problem
// against what the library declares, converts the ABI's [B, H, n, d] layout and
// double state to the kernel's FLA layout and f32 state and back, and runs the
// engine (the GPU, or the CPU emulator in libhla_cuda_emu). Built once per
// library; HLA_CUDA_EMULATOR and HLA_CUDA_FAST select the name and precision.
#include "engine.hpp"
#include "hla_cuda.hpp"
#include "hla_impl.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#define HLA_EXPORT __attribute__((visibility("default")))

namespace {

using namespace hla_cuda;

#if defined(HLA_CUDA_FAST)
// One bf16 part per operand: bf16 arithmetic. Not for f16 outputs: a result near f16's largest
// value (65504) computed with bf16's error can round to inf where the exact value does not.
constexpr Precision kPrecision = Precision::bf16;
constexpr const char* kPrecisionName = "bf16";
constexpr const char* kPrecisionByDtype = "bf16=bf16,f32=bf16";
constexpr uint32_t kDtypes = (1u << HLA_F32) | (1u << HLA_BF16);
#define HLA_NAME_PRECISION ", bf16 operands"
#else
constexpr Precision kPrecision = Precision::f32;
constexpr const char* kPrecisionName = "f32";
constexpr const char* kPrecisionByDtype = "bf16=f32,f16=f32,f32=f32";
constexpr uint32_t kDtypes = (1u << HLA_F32) | (1u << HLA_BF16) | (1u << HLA_F16);
#define HLA_NAME_PRECISION ", f32-exact bf16 parts"
#endif
#if defined(HLA_CUDA_EMULATOR)
#define HLA_NAME "hla_cuda_emu (the CUDA kernel's code emulated on the CPU" HLA_NAME_PRECISION ")"
#else
#define HLA_NAME "hla_cuda (CUDA, mma.sync bf16 tensor cores" HLA_NAME_PRECISION ")"
#endif

constexpr uint32_t kFeatures = HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP | HLA_FEAT_DECAY | HLA_FEAT_RIDGE | HLA_FEAT_SCALE |
                               HLA_FEAT_GQA | HLA_FEAT_VARLEN | HLA_FEAT_STATE | HLA_FEAT_DEN;

const hla_impl_info kInfo = {
    HLA_IMPL_ABI_VERSION,
    HLA_NAME,
    (1u << HLA_LA1) | (1u << HLA_HLA2) | (1u << HLA_AHLA) | (1u << HLA_HLA3),
    kDtypes,
    kFeatures,
    0, 256, 256,
    kPrecisionName,
    HLA_CLASS_MASKED,  // chunked form and streaming recurrences: only masked terms are formed
    kPrecisionByDtype,
};

// Why this library cannot run p, or nullptr.
const char* unsupported(const hla_problem* p) {
  if (p->abi_version != HLA_IMPL_ABI_VERSION) return "ABI version mismatch";
  if (p->variant < HLA_LA1 || p->variant > HLA_HLA3_PAPER || !(kInfo.variants >> p->variant & 1u))
    return "variant not supported (la1, hla2, ahla, hla3)";
  if (p->dtype < HLA_F64 || p->dtype > HLA_F16 || !(kInfo.dtypes >> p->dtype & 1u)) return "dtype not supported";
  if (!p->masked) return "unmasked variants not supported";
  if (p->normalize && p->eps_mode != HLA_EPS_ADD && p->eps_mode != HLA_EPS_CLAMP) return "unknown eps_mode";
  if (!(p->gamma > 0 && p->gamma <= 1)) return "gamma must be in (0, 1]";
  if (!(p->lambda >= 0) || (p->lambda > 0 && p->variant != HLA_HLA2)) return "lambda must be 0 (or > 0 for hla2)";
  if (p->batch < 1 || p->heads < 1 || p->kv_heads < 1 || p->n < 0 || p->d < 1 || p->dv < 1) return "bad dimensions";
  if (p->heads % p->kv_heads != 0) return "heads must be a multiple of kv_heads";
  if (p->d > kInfo.max_d || p->dv > kInfo.max_dv) return "d and dv must be at most 256";
  if (p->offsets) {
    if (p->batch != 1 || p->num_offsets < 2 || p->offsets[0] != 0 || p->offsets[p->num_offsets - 1] != p->n)
      return "offsets must run from 0 to n with batch 1";
    for (int64_t s = 0; s + 1 < p->num_offsets; ++s)
      if (p->offsets[s + 1] <= p->offsets[s]) return "offsets must increase strictly";
  }
  if (p->n > 0 && (!p->q || !p->k || !p->v || !p->out)) return "missing q, k, v or out";
  return nullptr;
}

size_t dtype_bytes(int32_t t) { return t == HLA_F32 ? 4 : 2; }

// [B][X][n][c] -> [B][n][X][c] (to_fla) or back, in elements of `es` bytes.
void transpose_heads(const unsigned char* src, unsigned char* dst, int64_t B, int64_t X, int64_t n, int64_t c, size_t es,
                     bool to_fla) {
  const size_t row = static_cast<size_t>(c) * es;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t x = 0; x < X; ++x)
      for (int64_t t = 0; t < n; ++t) {
        const size_t abi = static_cast<size_t>(((b * X + x) * n + t)) * row, fla = static_cast<size_t>(((b * n + t) * X + x)) * row;
        std::memcpy(dst + (to_fla ? fla : abi), src + (to_fla ? abi : fla), row);
      }
}

int fail(char* err, size_t err_len, const std::string& m) {
  if (err && err_len) std::snprintf(err, err_len, "hla_cuda: %s", m.c_str());
  return 1;
}

int run(const hla_problem* p, char* err, size_t err_len) {
  if (const char* why = unsupported(p)) return fail(err, err_len, why);
  const bool packed = p->offsets != nullptr;
  const int64_t nseq = packed ? p->num_offsets - 1 : 1;
  const int64_t S = packed ? nseq : p->batch;  // state blocks per head in the kernel's order [S][H]
  Options o;
  o.variant = static_cast<Variant>(p->variant);
  o.gamma = p->gamma, o.lambda = p->lambda, o.scale = p->scale, o.eps = p->eps;
  o.normalize = p->normalize != 0;
  o.eps_mode = p->eps_mode == HLA_EPS_CLAMP ? EpsMode::clamp : EpsMode::add;
  o.precision = kPrecision;
  const int64_t ss = state_size(o.variant, p->d, p->dv);

  if (p->n == 0) {  // nothing to compute: the state passes through
    if (p->state_out)
      for (int64_t i = 0; i < p->batch * p->heads * nseq * ss; ++i) p->state_out[i] = p->state_in ? p->state_in[i] : 0.0;
    return 0;
  }

  const size_t es = dtype_bytes(p->dtype);
  const int64_t B = p->batch, H = p->heads, Hk = p->kv_heads, n = p->n, d = p->d, dv = p->dv;
  std::vector<unsigned char> q(static_cast<size_t>(B * n * H * d) * es), k(static_cast<size_t>(B * n * Hk * d) * es),
      v(static_cast<size_t>(B * n * Hk * dv) * es), out(static_cast<size_t>(B * n * H * dv) * es);
  transpose_heads(static_cast<const unsigned char*>(p->q), q.data(), B, H, n, d, es, true);
  transpose_heads(static_cast<const unsigned char*>(p->k), k.data(), B, Hk, n, d, es, true);
  transpose_heads(static_cast<const unsigned char*>(p->v), v.data(), B, Hk, n, dv, es, true);
  std::vector<float> den(p->den ? static_cast<size_t>(B * n * H) : 0), init, fin;
  // ABI state order (batch, head, sequence); the kernel's [S][H] (S = sequence, or batch entry).
  auto abi_block = [&](int64_t s, int64_t h) { return packed ? h * nseq + s : s * H + h; };
  if (p->state_in) {
    init.resize(static_cast<size_t>(S * H * ss));
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < ss; ++i)
          init[static_cast<size_t>((s * H + h) * ss + i)] = static_cast<float>(p->state_in[abi_block(s, h) * ss + i]);
  }
  if (p->state_out) fin.resize(static_cast<size_t>(S * H * ss));

  Args a;
  a.dtype = static_cast<DType>(p->dtype);
  a.B = B, a.T = n, a.H = H, a.Hkv = Hk, a.D = d, a.Dv = dv;
  a.q = q.data(), a.k = k.data(), a.v = v.data(), a.out = out.data();
  a.den = p->den ? den.data() : nullptr;
  a.cu_seqlens = p->offsets;
  a.num_seqs = packed ? nseq : 0;
  a.initial_state = p->state_in ? init.data() : nullptr;
  a.final_state = p->state_out ? fin.data() : nullptr;
  if (std::string e = detail::engine_run(o, a); !e.empty()) return fail(err, err_len, e);

  transpose_heads(out.data(), static_cast<unsigned char*>(p->out), B, H, n, dv, es, false);
  if (p->den)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t t = 0; t < n; ++t) p->den[(b * H + h) * n + t] = den[static_cast<size_t>((b * n + t) * H + h)];
  if (p->state_out)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < ss; ++i) p->state_out[abi_block(s, h) * ss + i] = fin[static_cast<size_t>((s * H + h) * ss + i)];
  return 0;
}

}  // namespace

extern "C" {

HLA_EXPORT const hla_impl_info* hla_impl_info_get(void) { return &kInfo; }

HLA_EXPORT int hla_impl_run(const hla_problem* p, char* err, size_t err_len) {
  if (!p) return fail(err, err_len, "null problem");
  try {
    return run(p, err, err_len);
  } catch (const std::exception& e) {  // e.g. std::bad_alloc: an error, not a crash
    return fail(err, err_len, e.what());
  }
}

HLA_EXPORT int64_t hla_impl_state_size(const hla_problem* p) {
  if (!p || p->variant < HLA_LA1 || p->variant > HLA_HLA3 || p->d < 1 || p->dv < 1) return 0;
  return state_size(static_cast<Variant>(p->variant), p->d, p->dv);
}

}  // extern "C"
