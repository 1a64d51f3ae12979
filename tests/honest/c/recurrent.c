/* recurrent_c — the streaming recurrences of SPEC §3 in f32.
 *
 * Style 6: O(1) state per head, updated token by token, output read from the
 * state (the corrected-state F forms for hla2/hla3, Alg. 2 for ahla). Only
 * masked terms are ever formed, in nested prefix sums: class "masked". */
#define HK_NAME "recurrent_c"
#define HK_VARIANTS ((1u << HLA_LA1) | (1u << HLA_HLA2) | (1u << HLA_AHLA) | (1u << HLA_HLA3))
#define HK_FEATURES HLA_FEAT_UNMASKED
#define HK_CLASS HLA_CLASS_MASKED
#define HK_MAX_N 0
#include "honest_cabi.h"
#include "recur_state.h"

static int hk_head(const hk_args* a) {
  if (a->variant == HLA_HLA3_PAPER || (!a->masked && (a->variant == HLA_LA1 || a->variant == HLA_AHLA))) return 1;
  rs_state s;
  rs_init(&s, a->d, a->dv, a->gamma);
  for (int64_t t = 0; t < a->n; ++t) {
    const real* q = a->q + t * a->d;
    rs_step(&s, a->variant, a->masked, q, a->k + t * a->d, a->v + t * a->dv);
    rs_out(&s, a->variant, a->masked, q, a->num + t * a->dv, a->den + t);
  }
  rs_free(&s);
  return 0;
}
