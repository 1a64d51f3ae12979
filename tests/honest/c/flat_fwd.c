/* flat_fwd — the literal sums of SPEC §2, natural index order.
 *
 * Style 1: every product term w * a_ti * a_ji * v_j of the definition is added,
 * one by one, into ONE f32 accumulator per output element (and one for den):
 * no partial sums, no factoring. This is how someone transcribes the table of
 * §2 into loops. Its rounding error grows with the number of terms (~t^2/2 for
 * second order, ~t^3/6 for hla3), so it declares the class "flat" (SPEC §7).
 * Decay weights gamma^e come from a table of pow(gamma, e) (f32). */
#define HK_NAME "flat_fwd"
#define HK_VARIANTS ((1u << HLA_LA1) | (1u << HLA_HLA2) | (1u << HLA_AHLA) | (1u << HLA_HLA3))
#define HK_FEATURES HLA_FEAT_UNMASKED
#define HK_CLASS HLA_CLASS_FLAT
#define HK_MAX_N 128
#include "honest_cabi.h"

/* acc[c] += w * x * y * v_j[c] for every column, and the den accumulator. */
#define TERM(w, x, y, j)                                               \
  do {                                                                 \
    const real wxy = (w) * (x) * (y);                                  \
    for (int64_t c = 0; c < dv; ++c) acc[c] += wxy * a->v[(j)*dv + c]; \
    accd += wxy;                                                       \
  } while (0)

static int hk_head(const hk_args* a) {
  const int64_t n = a->n, dv = a->dv;
  if (a->variant == HLA_HLA3_PAPER || (!a->masked && (a->variant == HLA_LA1 || a->variant == HLA_AHLA))) return 1;
  real* A = hk_scores(a, a->q, a->k); /* a_ti = q_t . k_i */
  real* W = (real*)malloc(sizeof(real) * (size_t)(3 * n + 1));
  for (int64_t e = 0; e <= 3 * n; ++e) W[e] = pow(a->gamma, (real)e);
  real* acc = (real*)malloc(sizeof(real) * (size_t)(dv + 1));
#define a_(x, y) A[(x)*n + (y)]
  for (int64_t t = 0; t < n; ++t) {
    real accd = 0;
    for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
    if (a->variant == HLA_LA1) { /* j <= t: gamma^(t-j) a_tj */
      for (int64_t j = 0; j <= t; ++j) TERM(W[t - j], a_(t, j), (real)1, j);
    } else if (a->variant == HLA_HLA2) { /* i <= j <= t (unmasked: i, j <= t): gamma^(2t-i-j) a_ti a_ji */
      for (int64_t i = 0; i <= t; ++i)
        for (int64_t j = a->masked ? i : 0; j <= t; ++j) TERM(W[2 * t - i - j], a_(t, i), a_(j, i), j);
    } else if (a->variant == HLA_AHLA) { /* j <= i <= t: gamma^(t-j) a_ti a_ij */
      for (int64_t i = 0; i <= t; ++i)
        for (int64_t j = 0; j <= i; ++j) TERM(W[t - j], a_(t, i), a_(i, j), j);
    } else { /* hla3: i, j <= u <= t (unmasked: i, u, j <= t): gamma^(3t-i-u-j) a_ti a_ui a_uj */
      for (int64_t u = 0; u <= t; ++u) {
        const int64_t top = a->masked ? u : t;
        for (int64_t i = 0; i <= top; ++i)
          for (int64_t j = 0; j <= top; ++j) TERM(W[3 * t - i - u - j], a_(t, i) * a_(u, i), a_(u, j), j);
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
