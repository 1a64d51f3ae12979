/* A complete candidate for `hla fuzz --lib`: first-order linear attention
 * (variant la1) with decay, grouped heads, packed sequences and den, in
 * float. Build: cc -O2 -shared -fPIC -I include examples/cabi_la1.c -o libmy_la1.so
 * Fuzz:  build/tools/hla fuzz --lib ./libmy_la1.so --max-cases 500 */
#include "hla_impl.h"

#include <stdio.h>
#include <stdlib.h>

static const hla_impl_info info = {
    .abi_version = HLA_IMPL_ABI_VERSION, /* of the header it is built with */
    .name = "example la1 (float, streaming)",
    .variants = 1u << HLA_LA1,
    .dtypes = 1u << HLA_F32,
    .features = HLA_FEAT_DECAY | HLA_FEAT_GQA | HLA_FEAT_VARLEN | HLA_FEAT_DEN,
    .precision = "f32",
    .form_class = HLA_CLASS_MASKED}; /* max_n, max_d, max_dv 0: no limit */

const hla_impl_info* hla_impl_info_get(void) { return &info; }
int64_t hla_impl_state_size(const hla_problem* p) { (void)p; return 0; }

int hla_impl_run(const hla_problem* p, char* err, size_t err_len) {
  if (p->variant != HLA_LA1 || p->dtype != HLA_F32 || p->normalize || p->scale != 1) {
    snprintf(err, err_len, "unsupported problem");
    return 1;
  }
  const float *q = p->q, *k = p->k, *v = p->v;
  float* out = p->out;
  const int64_t n = p->n, d = p->d, dv = p->dv, group = p->heads / p->kv_heads;
  float* P = malloc(sizeof(float) * d * (dv + 1)); /* state: sum of decayed k [v | 1]^T */
  const int64_t nseq = p->offsets ? p->num_offsets - 1 : 1;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads; ++h)
      for (int64_t s = 0; s < nseq; ++s) {
        const int64_t t0 = p->offsets ? p->offsets[s] : 0, t1 = p->offsets ? p->offsets[s + 1] : n;
        const int64_t kh = h / group;
        for (int64_t i = 0; i < d * (dv + 1); ++i) P[i] = 0;
        for (int64_t t = t0; t < t1; ++t) {
          const float* qt = q + ((b * p->heads + h) * n + t) * d;
          const float* kt = k + ((b * p->kv_heads + kh) * n + t) * d;
          const float* vt = v + ((b * p->kv_heads + kh) * n + t) * dv;
          for (int64_t i = 0; i < d; ++i)
            for (int64_t j = 0; j <= dv; ++j)
              P[i * (dv + 1) + j] = (float)p->gamma * P[i * (dv + 1) + j] + kt[i] * (j < dv ? vt[j] : 1.0f);
          for (int64_t j = 0; j <= dv; ++j) {
            float acc = 0;
            for (int64_t i = 0; i < d; ++i) acc += qt[i] * P[i * (dv + 1) + j];
            if (j < dv) out[((b * p->heads + h) * n + t) * dv + j] = acc;
            else if (p->den) p->den[(b * p->heads + h) * n + t] = acc;
          }
        }
      }
  free(P);
  return 0;
}
