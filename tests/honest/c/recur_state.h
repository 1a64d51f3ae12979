/* recur_state.h — the streaming states of SPEC §3 in f32 (masked F forms, and
 * the unmasked hla2/hla3 products), one token at a time. Used by recurrent.c
 * (outputs at every token) and chunk_pairs.c (the carry between chunks).
 * Every matrix-vector product is a left-to-right f32 sum. */
#ifndef HONEST_RECUR_STATE_H
#define HONEST_RECUR_STATE_H

typedef struct {
  int64_t d, dv;
  real g;
  real *S, *SQ, *C, *P, *F, *m, *mK, *f; /* S, SQ [d][d]; C, P, F [d][dv]; m, mK, f [d] */
  real *x, *y, *row;                     /* scratch: [d], [d], [dv] */
} rs_state;

static inline void rs_init(rs_state* s, int64_t d, int64_t dv, real g) {
  s->d = d, s->dv = dv, s->g = g;
  real* p = (real*)calloc((size_t)(2 * d * d + 3 * d * dv + 5 * d + dv + 1), sizeof(real));
  s->S = p, s->SQ = p + d * d, s->C = s->SQ + d * d, s->P = s->C + d * dv, s->F = s->P + d * dv;
  s->m = s->F + d * dv, s->mK = s->m + d, s->f = s->mK + d, s->x = s->f + d, s->y = s->x + d, s->row = s->y + d;
}
static inline void rs_free(rs_state* s) { free(s->S); }

/* y = M x for a [d][d] matrix (row r: sum over columns, left to right). */
static inline void rs_matvec(const real* M, const real* x, real* y, int64_t d) {
  for (int64_t r = 0; r < d; ++r) {
    real acc = 0;
    for (int64_t c = 0; c < d; ++c) acc += M[r * d + c] * x[c];
    y[r] = acc;
  }
}
/* row = x^T M for a [d][dv] matrix (each column summed over r, top to bottom). */
static inline void rs_vecmat(const real* x, const real* M, real* row, int64_t d, int64_t dv) {
  for (int64_t c = 0; c < dv; ++c) {
    real acc = 0;
    for (int64_t r = 0; r < d; ++r) acc += x[r] * M[r * dv + c];
    row[c] = acc;
  }
}
static inline real rs_dot(const real* x, const real* y, int64_t d) {
  real acc = 0;
  for (int64_t l = 0; l < d; ++l) acc += x[l] * y[l];
  return acc;
}
/* M = g M + x y^T ([r][c]). */
static inline void rs_decay_add(real* M, real g, const real* x, const real* y, int64_t r, int64_t c) {
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) M[i * c + j] = g * M[i * c + j] + x[i] * y[j];
}
static inline void rs_decay_axpy(real* m, real g, const real* x, real w, int64_t d) {
  for (int64_t i = 0; i < d; ++i) m[i] = g * m[i] + w * x[i];
}

/* Advances the state of `variant` (masked or not) by token (q, k, v). After it,
 * num_t = q^T F and den_t = q . f (la1: F = P, f = mK; hla3 unmasked: see rs_out). */
static inline void rs_step(rs_state* s, int variant, int masked, const real* q, const real* k, const real* v) {
  const int64_t d = s->d, dv = s->dv;
  const real g = s->g, g2 = g * g, g3 = g2 * g;
  if (variant == HLA_LA1) {
    rs_decay_add(s->P, g, k, v, d, dv);
    rs_decay_axpy(s->mK, g, k, (real)1, d);
  } else if (variant == HLA_HLA2) {
    rs_decay_add(s->S, g, k, k, d, d);     /* S_t = g S + k k^T */
    rs_decay_add(s->C, g, q, v, d, dv);    /* C_t = g C + q v^T */
    rs_decay_axpy(s->m, g, q, (real)1, d); /* m_t = g m + q */
    if (masked) {
      rs_matvec(s->S, q, s->x, d);            /* S_t q_t */
      rs_decay_add(s->F, g2, s->x, v, d, dv); /* F_t = g^2 F + (S_t q_t) v_t^T */
      rs_decay_axpy(s->f, g2, s->x, (real)1, d);
    }
  } else if (variant == HLA_AHLA) {
    rs_decay_add(s->P, g, k, v, d, dv); /* P_t = g P + k v^T */
    rs_decay_axpy(s->mK, g, k, (real)1, d);
    rs_vecmat(q, s->P, s->row, d, dv);       /* q_t^T P_t */
    rs_decay_add(s->F, g, k, s->row, d, dv); /* E_t = g E + k (q^T P_t) */
    rs_decay_axpy(s->f, g, k, rs_dot(q, s->mK, d), d);
  } else { /* hla3 */
    rs_decay_add(s->S, g, k, k, d, d);
    rs_decay_add(s->P, g, k, v, d, dv);
    rs_decay_axpy(s->mK, g, k, (real)1, d);
    if (masked) {
      rs_matvec(s->S, q, s->x, d);                 /* S_t q_t */
      rs_vecmat(q, s->P, s->row, d, dv);           /* q_t^T P_t */
      rs_decay_add(s->F, g3, s->x, s->row, d, dv); /* F_t = g^3 F + (S q)(q^T P) */
      rs_decay_axpy(s->f, g3, s->x, rs_dot(q, s->mK, d), d);
    } else {
      rs_decay_add(s->SQ, g, q, q, d, d); /* SQ_t = g SQ + q q^T */
    }
  }
}

/* num (dv) and *den of token q from the state after its own step. */
static inline void rs_out(rs_state* s, int variant, int masked, const real* q, real* num, real* den) {
  const int64_t d = s->d, dv = s->dv;
  if (variant == HLA_LA1) {
    rs_vecmat(q, s->P, num, d, dv);
    *den = rs_dot(q, s->mK, d);
  } else if (!masked && variant == HLA_HLA2) { /* (q^T S) C, (q^T S) m */
    rs_matvec(s->S, q, s->x, d);
    rs_vecmat(s->x, s->C, num, d, dv);
    *den = rs_dot(s->x, s->m, d);
  } else if (!masked) { /* hla3 unmasked: q^T S SQ P */
    rs_matvec(s->S, q, s->x, d);
    rs_matvec(s->SQ, s->x, s->y, d);
    rs_vecmat(s->y, s->P, num, d, dv);
    *den = rs_dot(s->y, s->mK, d);
  } else {
    rs_vecmat(q, s->F, num, d, dv);
    *den = rs_dot(q, s->f, d);
  }
}

#endif
