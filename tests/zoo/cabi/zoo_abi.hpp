// The C ABI plumbing every zoo library needs and none has a bug in: decoding
// inputs from the problem's dtype, encoding outputs, the sign-preserving
// normalization, and refusing problems outside what the library declares.
// Shared by zoo_impl.cpp and zoo_state_difference.cpp so that the members
// differ only in how they compute.
#pragma once

#include "hla_impl.h"
#include "zoo_bits.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

// Every zoo source is compiled once per member, named by ZOO_BUG.
#ifndef ZOO_BUG
#error "build with -DZOO_BUG=<member name>"
#endif
#define ZOO_STR2(x) #x
#define ZOO_STR(x) ZOO_STR2(x)
#define ZOO_EXPORT __attribute__((visibility("default")))

namespace zoo {

// Element i of a q/k/v buffer as T. BF16 and F16 widen to float exactly; F64 rounds when T is float.
template <class T> T load(const void* base, int32_t t, size_t i) {  // t: an hla_dtype code
  switch (t) {
    case HLA_F64: return static_cast<T>(static_cast<const double*>(base)[i]);
    case HLA_F32: return static_cast<const float*>(base)[i];
    case HLA_BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case HLA_F16: return f16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return NAN;
}

inline void store(void* base, int32_t t, size_t i, double x) {
  switch (t) {
    case HLA_F64: static_cast<double*>(base)[i] = x; break;
    case HLA_F32: static_cast<float*>(base)[i] = static_cast<float>(x); break;
    case HLA_BF16: static_cast<uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(x)); break;
    case HLA_F16: static_cast<uint16_t*>(base)[i] = float_to_f16(static_cast<float>(x)); break;
  }
}

// num / (den ⊕ ε) (SPEC §1): den + ε, or the sign-preserving clamp sign(den)·max(|den|, ε).
template <class T> T normalize(const hla_problem* p, T num, T den) {
  if (!p->normalize) return num;
  const auto eps = static_cast<T>(p->eps);
  if (p->eps_mode == HLA_EPS_ADD) return num / (den + eps);
  return num / ((den < 0 ? T(-1) : T(1)) * std::max(std::abs(den), eps));
}

// Why a library declaring `in` cannot run this problem, or nullptr.
inline const char* unsupported(const hla_problem* p, const hla_impl_info& in) {
  if (p->abi_version != HLA_IMPL_ABI_VERSION) return "ABI version mismatch";
  if (p->variant < 0 || p->variant > HLA_HLA3_PAPER || !(in.variants >> p->variant & 1u)) return "variant not supported";
  if (p->dtype < 0 || p->dtype > HLA_F16 || !(in.dtypes >> p->dtype & 1u)) return "dtype not supported";
  auto need = [&](uint32_t f) { return (in.features & f) == f; };
  if (!p->masked && (p->variant == HLA_LA1 || p->variant == HLA_AHLA)) return "this variant has no unmasked form";
  if (!p->masked && !need(HLA_FEAT_UNMASKED)) return "unmasked not supported";
  if (p->normalize && p->eps_mode == HLA_EPS_ADD && !need(HLA_FEAT_NORMALIZE)) return "normalize (add) not supported";
  if (p->normalize && p->eps_mode == HLA_EPS_CLAMP && !need(HLA_FEAT_CLAMP)) return "normalize (clamp) not supported";
  if (!(p->gamma > 0 && p->gamma <= 1)) return "gamma must be in (0, 1]";
  if (p->gamma < 1 && !need(HLA_FEAT_DECAY)) return "decay not supported";
  if (p->lambda < 0 || (p->lambda > 0 && p->variant != HLA_HLA2)) return "lambda must be 0 (or > 0 for hla2)";
  if (p->lambda > 0 && !need(HLA_FEAT_RIDGE)) return "ridge not supported";
  if (p->scale != 1 && !need(HLA_FEAT_SCALE)) return "scale not supported";
  if (p->batch < 1 || p->heads < 1 || p->kv_heads < 1 || p->n < 0 || p->d < 1 || p->dv < 1) return "bad dimensions";
  if (p->heads % p->kv_heads != 0) return "heads must be a multiple of kv_heads";
  if (p->kv_heads < p->heads && !need(HLA_FEAT_GQA)) return "grouped heads not supported";
  if ((in.max_n && p->n > in.max_n) || (in.max_d && p->d > in.max_d) || (in.max_dv && p->dv > in.max_dv))
    return "problem larger than max_n / max_d / max_dv";
  if (p->offsets && !need(HLA_FEAT_VARLEN)) return "packed sequences not supported";
  if ((p->state_in || p->state_out) && !need(HLA_FEAT_STATE)) return "state in/out not supported";
  if (p->offsets) {
    if (p->batch != 1 || p->num_offsets < 2 || p->offsets[0] != 0 || p->offsets[p->num_offsets - 1] != p->n)
      return "offsets must run from 0 to n with batch 1";
    for (int64_t s = 0; s + 1 < p->num_offsets; ++s)
      if (p->offsets[s + 1] <= p->offsets[s]) return "offsets must increase strictly";
  }
  if (p->n > 0 && (!p->q || !p->k || !p->v || !p->out)) return "missing q, k, v or out";
  // The harness promises 64-byte aligned buffers (hla_impl.h): every zoo run checks it.
  for (const void* b : {p->q, p->k, p->v, static_cast<const void*>(p->offsets), static_cast<const void*>(p->state_in),
                        static_cast<const void*>(p->out), static_cast<const void*>(p->den), static_cast<const void*>(p->state_out)})
    if (reinterpret_cast<uintptr_t>(b) % 64 != 0) return "a buffer handed over is not 64-byte aligned (hla_impl.h promises it)";
  return nullptr;
}

}  // namespace zoo
