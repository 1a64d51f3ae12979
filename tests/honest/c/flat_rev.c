/* flat_rev — the literal sums of SPEC §2, every index loop run backwards.
 *
 * Style 2: as flat_fwd, every product term added one by one into ONE f32
 * accumulator per output element, but starting from the newest token (j = t
 * down to 0): the order someone picks to add the heavily weighted recent terms
 * first. A different order of the same flat sum, so the class is "flat". The
 * weight gamma^e is built by repeated multiplication in f32 (no powf). */
#define HK_NAME "flat_rev"
#define HK_VARIANTS ((1u << HLA_LA1) | (1u << HLA_HLA2) | (1u << HLA_AHLA) | (1u << HLA_HLA3))
#define HK_FEATURES HLA_FEAT_UNMASKED
#define HK_CLASS HLA_CLASS_FLAT
#define HK_MAX_N 128
#include "honest_cabi.h"

#define TERM(w, x, y, j)                                               \
  do {                                                                 \
    const real wxy = (w) * (x) * (y);                                  \
    for (int64_t c = 0; c < dv; ++c) acc[c] += wxy * a->v[(j)*dv + c]; \
    accd += wxy;                                                       \
  } while (0)

static int hk_head(const hk_args* a) {
  const int64_t n = a->n, dv = a->dv;
  if (a->variant == HLA_HLA3_PAPER || (!a->masked && (a->variant == HLA_LA1 || a->variant == HLA_AHLA))) return 1;
  real* A = hk_scores(a, a->q, a->k);
  real* W = (real*)malloc(sizeof(real) * (size_t)(3 * n + 1)); /* W[e] = gamma^e, multiplied up in f32 */
  W[0] = (real)1;
  for (int64_t e = 1; e <= 3 * n; ++e) W[e] = W[e - 1] * a->gamma;
  real* acc = (real*)malloc(sizeof(real) * (size_t)(dv + 1));
#define a_(x, y) A[(x)*n + (y)]
  for (int64_t t = n - 1; t >= 0; --t) {
    real accd = 0;
    for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
    if (a->variant == HLA_LA1) {
      for (int64_t j = t; j >= 0; --j) TERM(W[t - j], a_(t, j), (real)1, j);
    } else if (a->variant == HLA_HLA2) {
      for (int64_t j = t; j >= 0; --j)
        for (int64_t i = a->masked ? j : t; i >= 0; --i) TERM(W[2 * t - i - j], a_(t, i), a_(j, i), j);
    } else if (a->variant == HLA_AHLA) {
      for (int64_t j = t; j >= 0; --j)
        for (int64_t i = t; i >= j; --i) TERM(W[t - j], a_(t, i), a_(i, j), j);
    } else {
      for (int64_t u = t; u >= 0; --u) {
        const int64_t top = a->masked ? u : t;
        for (int64_t j = top; j >= 0; --j)
          for (int64_t i = top; i >= 0; --i) TERM(W[3 * t - i - u - j], a_(t, i), a_(u, i) * a_(u, j), j);
      }
    }
    for (int64_t c = 0; c < dv; ++c) a->num[t * dv + c] = acc[c];
    a->den[t] = accd;
  }
#undef a_
  free(A);
  free(W);
  free(acc);
  return 0;
}
