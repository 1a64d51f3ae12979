/* honest_cabi.h — the include/hla_impl.h plumbing shared by the honest C kernels.
 *
 * Each kernel file defines its per-head function and its declarations, then
 * includes this header, which supplies the three exported functions:
 *
 *   #define HK_NAME       "flat_fwd"
 *   #define HK_VARIANTS   ((1u << HLA_LA1) | ...)
 *   #define HK_FEATURES   (HLA_FEAT_UNMASKED | ...)   (decay, scale, normalize, den, gqa, varlen are added here)
 *   #define HK_CLASS      HLA_CLASS_FLAT
 *   #define HK_MAX_N      128
 *   static int hk_head(const hk_args* a);            (0, or an error code)
 *
 * Everything a kernel sees is f32: q (already multiplied by scale, rounded to
 * f32, as a user's kernel does), k, v of one (head, sequence), gamma rounded to
 * f32. It writes num[n*dv] and den[n] (f32); normalization and the output
 * conversion to the dtype happen here, in f32. Written from SPEC.md alone. */
#ifndef HONEST_CABI_H
#define HONEST_CABI_H

#include "hla_impl.h"

#include <math.h>
#include <tgmath.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The compute type: float (the kernels as shipped), or double for the f64
 * builds that verify a kernel's algorithm (-DHK_REAL=double: precision f64). */
#ifndef HK_REAL
#define HK_REAL float
#endif
typedef HK_REAL real;
#define HK_IS_F64 (sizeof(real) == 8)

typedef struct {
  int variant; /* hla_variant */
  int masked;
  real gamma;
  int64_t n, d, dv;
  const real *q, *k, *v; /* [n][d], [n][d], [n][dv]; q already scaled */
  real *num, *den;       /* [n][dv], [n] */
} hk_args;

static int hk_head(const hk_args* a);

/* bf16 <-> f32: bf16 is the top half of an f32; rounding to nearest even. */
static float hk_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t hk_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static real hk_load(const void* base, int32_t dtype, int64_t i) {
  if (dtype == HLA_F64) return (real)((const double*)base)[i];
  return dtype == HLA_BF16 ? hk_bf16_to_f32(((const uint16_t*)base)[i]) : ((const float*)base)[i];
}
static void hk_store(void* base, int32_t dtype, int64_t i, real x) {
  if (dtype == HLA_BF16) ((uint16_t*)base)[i] = hk_f32_to_bf16((float)x);
  else if (dtype == HLA_F64) ((double*)base)[i] = (double)x;
  else ((float*)base)[i] = (float)x;
}

const hla_impl_info* hla_impl_info_get(void) {
  static const hla_impl_info info = {
      HLA_IMPL_ABI_VERSION,
      HK_NAME,
      HK_VARIANTS,
      HK_IS_F64 ? (1u << HLA_F64) : (1u << HLA_F32) | (1u << HLA_BF16),
      HK_FEATURES | HLA_FEAT_DECAY | HLA_FEAT_SCALE | HLA_FEAT_NORMALIZE | HLA_FEAT_DEN | HLA_FEAT_GQA | HLA_FEAT_VARLEN,
      HK_MAX_N,
      64,
      64,
      HK_IS_F64 ? "f64" : "f32",
      HK_CLASS,
      HK_IS_F64 ? "f64=f64" : "bf16=f32,f32=f32",
  };
  return &info;
}

int64_t hla_impl_state_size(const hla_problem* p) {
  (void)p;
  return 0;
}

int hla_impl_run(const hla_problem* p, char* err, size_t err_len) {
  if (p->eps_mode != HLA_EPS_ADD || p->lambda != 0 || p->state_in || p->state_out) {
    snprintf(err, err_len, "%s: clamp, ridge and state are not supported", HK_NAME);
    return 1;
  }
  if (HK_IS_F64 ? p->dtype != HLA_F64 : p->dtype != HLA_F32 && p->dtype != HLA_BF16) {
    snprintf(err, err_len, "%s: dtype %d not supported", HK_NAME, (int)p->dtype);
    return 1;
  }
  const int64_t B = p->batch, H = p->heads, Hkv = p->kv_heads, N = p->n, d = p->d, dv = p->dv;
  const int64_t seqs = p->offsets ? p->num_offsets - 1 : 1;
  const real scale = (real)p->scale, eps = (real)p->eps;
  real* buf = (real*)malloc(sizeof(real) * (size_t)(N * (2 * d + 2 * dv + 1) + 1));
  if (!buf) {
    snprintf(err, err_len, "%s: out of memory", HK_NAME);
    return 1;
  }
  int rc = 0;
  for (int64_t b = 0; b < B && !rc; ++b)
    for (int64_t h = 0; h < H && !rc; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t s = 0; s < seqs && !rc; ++s) {
        const int64_t t0 = p->offsets ? p->offsets[s] : 0, t1 = p->offsets ? p->offsets[s + 1] : N, n = t1 - t0;
        real *q = buf, *k = q + n * d, *v = k + n * d, *num = v + n * dv, *den = num + n * dv;
        const int64_t qb = ((b * H + h) * N + t0) * d, kb = ((b * Hkv + hk) * N + t0) * d, vb = ((b * Hkv + hk) * N + t0) * dv;
        for (int64_t i = 0; i < n * d; ++i) {
          q[i] = hk_load(p->q, p->dtype, qb + i) * scale; /* scale multiplies q first (SPEC §1) */
          k[i] = hk_load(p->k, p->dtype, kb + i);
        }
        for (int64_t i = 0; i < n * dv; ++i) v[i] = hk_load(p->v, p->dtype, vb + i);
        hk_args a = {p->variant, p->masked, (real)p->gamma, n, d, dv, q, k, v, num, den};
        rc = hk_head(&a);
        const int64_t ob = ((b * H + h) * N + t0);
        for (int64_t t = 0; t < n; ++t) {
          const real D = den[t] + eps; /* add mode: num / (den + eps) */
          for (int64_t c = 0; c < dv; ++c)
            hk_store(p->out, p->dtype, ob * dv + t * dv + c, p->normalize ? num[t * dv + c] / D : num[t * dv + c]);
          if (p->den) p->den[ob + t] = den[t];
        }
      }
    }
  free(buf);
  if (rc) snprintf(err, err_len, "%s: variant %d (masked %d) not supported", HK_NAME, (int)p->variant, (int)p->masked);
  return rc;
}

/* Dot product of two rows, summed left to right. */
static inline real hk_dot(const real* x, const real* y, int64_t d) {
  real s = 0;
  for (int64_t l = 0; l < d; ++l) s += x[l] * y[l];
  return s;
}

/* A[t][i] = q_t . k_i for all t, i (n*n floats, caller frees). */
static inline real* hk_scores(const hk_args* a, const real* x, const real* y) {
  real* A = (real*)malloc(sizeof(real) * (size_t)(a->n * a->n + 1));
  for (int64_t t = 0; t < a->n; ++t)
    for (int64_t i = 0; i < a->n; ++i) A[t * a->n + i] = hk_dot(x + t * a->d, y + i * a->d, a->d);
  return A;
}

#endif
