/* chunk_pairs32 — the chunked form of SPEC §5, width HK_W (default 32), whose
 * intra-chunk term is added pair by pair.
 *
 * Style 3: tokens in chunks of HK_W. The carry (the state of everything
 * before the chunk) enters through the §5 carry terms, computed in f32; the
 * intra-chunk term is the literal sum of §2 over indices inside the chunk,
 * every product term w * a_ti * a_ji * v_j added one by one into one f32
 * accumulator (as a first, un-tiled version of a chunk kernel does). The carry
 * advances by the streaming recurrence over the chunk's tokens. Up to HK_W^2/2
 * terms (hla3: HK_W^3/6) reach one accumulator, so the class is "flat:HK_W". */
#ifndef HK_W
#define HK_W 32
#endif
#define HK_STR2(x) #x
#define HK_STR(x) HK_STR2(x)
#define HK_NAME "chunk_pairs" HK_STR(HK_W)
#define HK_VARIANTS ((1u << HLA_LA1) | (1u << HLA_HLA2) | (1u << HLA_AHLA) | (1u << HLA_HLA3))
#define HK_FEATURES 0
#define HK_CLASS HLA_CLASS_FLAT_CHUNKS(HK_W)
#define HK_MAX_N 0
#include "honest_cabi.h"
#include "recur_state.h"

#define TERM(w, x, y, j)                                               \
  do {                                                                 \
    const real wxy = (w) * (x) * (y);                                  \
    for (int64_t c = 0; c < dv; ++c) acc[c] += wxy * a->v[(j)*dv + c]; \
    accd += wxy;                                                       \
  } while (0)

/* The literal sum of token t over indices lo..t (the chunk), into acc/accd. */
static void intra(const hk_args* a, const real* A, const real* W, int64_t lo, int64_t t, real* acc, real* accd_out) {
  const int64_t n = a->n, dv = a->dv;
  real accd = 0;
#define a_(x, y) A[(x)*n + (y)]
  if (a->variant == HLA_LA1) {
    for (int64_t j = lo; j <= t; ++j) TERM(W[t - j], a_(t, j), (real)1, j);
  } else if (a->variant == HLA_HLA2) {
    for (int64_t i = lo; i <= t; ++i)
      for (int64_t j = i; j <= t; ++j) TERM(W[2 * t - i - j], a_(t, i), a_(j, i), j);
  } else if (a->variant == HLA_AHLA) {
    for (int64_t i = lo; i <= t; ++i)
      for (int64_t j = lo; j <= i; ++j) TERM(W[t - j], a_(t, i), a_(i, j), j);
  } else {
    for (int64_t u = lo; u <= t; ++u)
      for (int64_t i = lo; i <= u; ++i)
        for (int64_t j = lo; j <= u; ++j) TERM(W[3 * t - i - u - j], a_(t, i) * a_(u, i), a_(u, j), j);
  }
#undef a_
  *accd_out = accd;
}

static int hk_head(const hk_args* a) {
  const int64_t n = a->n, d = a->d, dv = a->dv, w = HK_W;
  if (!a->masked || a->variant == HLA_HLA3_PAPER) return 1;
  real* A = hk_scores(a, a->q, a->k);
  real* W = (real*)malloc(sizeof(real) * (size_t)(3 * n + 3 * w + 1)); /* gamma^e */
  for (int64_t e = 0; e <= 3 * n + 3 * w; ++e) W[e] = pow(a->gamma, (real)e);
  /* per token u of the chunk: S_A q_u, S_{B,<=u} q_u (d); q_u^T P_A, q_u^T P_{B,<=u} (dv); q_u.mK_A, q_u.mK_{B,<=u} */
  real* SAq = (real*)calloc((size_t)(2 * w * d + 2 * w * dv + 2 * w + 2 * dv + 2), sizeof(real));
  real *SBq = SAq + w * d, *qPA = SBq + w * d, *qPB = qPA + w * dv, *qmA = qPB + w * dv, *qmB = qmA + w;
  real *acc = qmB + w, *car = acc + dv;
  rs_state s, loc; /* s: the carry; loc: the chunk's own prefix states (hla3) */
  rs_init(&s, d, dv, a->gamma);
  rs_init(&loc, d, dv, a->gamma);
  for (int64_t lo = 0; lo < n; lo += w) {
    const int64_t hi = lo + w < n ? lo + w : n;
    memset(loc.S, 0, sizeof(real) * (size_t)(d * d + d * dv) * 2); /* loc.S, SQ, C, P reset */
    memset(loc.mK, 0, sizeof(real) * (size_t)d);
    for (int64_t u = lo; u < hi; ++u) {
      const real* q = a->q + u * d;
      const int64_t r = u - lo;
      rs_matvec(s.S, q, SAq + r * d, d);
      rs_vecmat(q, s.P, qPA + r * dv, d, dv);
      qmA[r] = rs_dot(q, s.mK, d);
      if (a->variant == HLA_HLA3) { /* the chunk-local prefixes S_{B,<=u}, P_{B,<=u}, mK_{B,<=u} */
        rs_decay_add(loc.S, a->gamma, a->k + u * d, a->k + u * d, d, d);
        rs_decay_add(loc.P, a->gamma, a->k + u * d, a->v + u * dv, d, dv);
        rs_decay_axpy(loc.mK, a->gamma, a->k + u * d, (real)1, d);
        rs_matvec(loc.S, q, SBq + r * d, d);
        rs_vecmat(q, loc.P, qPB + r * dv, d, dv);
        qmB[r] = rs_dot(q, loc.mK, d);
      }
    }
    for (int64_t t = lo; t < hi; ++t) {
      const real* q = a->q + t * d;
      const real rho = W[t - lo + 1]; /* gamma^(t - T_A), T_A = lo - 1 */
      real card;
      for (int64_t c = 0; c < dv; ++c) acc[c] = 0;
      real accd;
      intra(a, A, W, lo, t, acc, &accd);
      if (a->variant == HLA_LA1) { /* rho q^T P_A */
        rs_vecmat(q, s.P, car, d, dv);
        for (int64_t c = 0; c < dv; ++c) car[c] *= rho;
        card = rho * rs_dot(q, s.mK, d);
      } else if (a->variant == HLA_HLA2) { /* rho^2 q^T F_A + sum_j rho gamma^(t-j) (q_t^T S_A q_j) v_j */
        rs_vecmat(q, s.F, car, d, dv);
        card = rho * rho * rs_dot(q, s.f, d);
        for (int64_t c = 0; c < dv; ++c) car[c] *= rho * rho;
        for (int64_t j = lo; j <= t; ++j) {
          const real wj = rho * W[t - j] * rs_dot(q, SAq + (j - lo) * d, d);
          for (int64_t c = 0; c < dv; ++c) car[c] += wj * a->v[j * dv + c];
          card += wj;
        }
      } else if (a->variant == HLA_AHLA) { /* rho q^T E_A + rho sum_{i<=t} (q_t.k_i)(q_i^T P_A) */
        rs_vecmat(q, s.F, car, d, dv);
        card = rs_dot(q, s.f, d);
        for (int64_t i = lo; i <= t; ++i) {
          const real ai = A[t * n + i];
          for (int64_t c = 0; c < dv; ++c) car[c] += ai * qPA[(i - lo) * dv + c];
          card += ai * qmA[i - lo];
        }
        for (int64_t c = 0; c < dv; ++c) car[c] *= rho;
        card *= rho;
      } else { /* hla3: r^3 q^T F_A + the three cross terms of the §4 operator (u in the chunk) */
        rs_vecmat(q, s.F, car, d, dv);
        const real r3 = rho * rho * rho;
        for (int64_t c = 0; c < dv; ++c) car[c] *= r3;
        card = r3 * rs_dot(q, s.f, d);
        for (int64_t u = lo; u <= t; ++u) {
          const int64_t r = u - lo;
          const real sa = rs_dot(q, SAq + r * d, d), sb = rs_dot(q, SBq + r * d, d);
          const real w2 = W[2 * (t - u)] * rho, w4 = rho * rho * W[t - u];
          for (int64_t c = 0; c < dv; ++c) /* i in A, j in B;  i in B, j in A;  i, j in A */
            car[c] += w2 * sa * qPB[r * dv + c] + w2 * sb * qPA[r * dv + c] + w4 * sa * qPA[r * dv + c];
          card += w2 * sa * qmB[r] + w2 * sb * qmA[r] + w4 * sa * qmA[r];
        }
      }
      for (int64_t c = 0; c < dv; ++c) a->num[t * dv + c] = car[c] + acc[c];
      a->den[t] = card + accd;
    }
    for (int64_t t = lo; t < hi; ++t) rs_step(&s, a->variant, 1, a->q + t * d, a->k + t * d, a->v + t * dv);
  }
  rs_free(&s);
  rs_free(&loc);
  free(SAq);
  free(A);
  free(W);
  return 0;
}
