/* hla_impl.h — the C ABI through which `hla fuzz` (and any harness) calls an
 * HLA implementation. Public, self-contained, C99 and C++.
 *
 * A library exports two functions:
 *
 *   const hla_impl_info* hla_impl_info_get(void);
 *   int hla_impl_run(const hla_problem* p, char* err, size_t err_len);
 *
 * and, declaring HLA_FEAT_BACKWARD (ABI 1.3), a third: hla_impl_run_backward
 * (gradients; below); declaring HLA_FEAT_BACKWARD_STATE (ABI 1.4), a fourth:
 * hla_impl_run_backward_state (gradients from and of a state).
 *
 * hla_impl_info_get says what the implementation supports; the fuzzer only
 * generates problems inside it. hla_impl_run computes the outputs of one
 * problem and returns 0, or non-zero with a message in err (NUL-terminated,
 * at most err_len bytes). All pointers are HOST pointers: a CUDA library
 * copies inputs to the device and outputs back itself. The fuzzer calls the
 * library in a child process, so a crash or hang is a finding, not a fault of
 * the fuzzer; a library need not be thread-safe.
 *
 * Semantics: SPEC.md of hla-oracle (variants, options, shapes). Tensors are
 * dense row-major:
 *   q   [batch][heads][n][d]        k [batch][kv_heads][n][d]
 *   v   [batch][kv_heads][n][dv]    out [batch][heads][n][dv]
 *   den [batch][heads][n]           (optional output)
 * Query head h uses K/V head h / (heads / kv_heads) (grouped / multi-query).
 * With offsets (packed variable-length batches, batch == 1), sequence s is
 * tokens [offsets[s], offsets[s+1]) and no state crosses sequences.
 * Values of q, k, v, out are stored in `dtype`: F64 double, F32 float, BF16
 * and F16 as uint16_t bit patterns. The fuzzer hands every buffer (q, k, v,
 * offsets, state_in, out, den, state_out) 64-byte aligned, also when n = 0
 * (then a valid pointer to no elements).
 */
#ifndef HLA_IMPL_H
#define HLA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version, major.minor. A library declares HLA_IMPL_ABI_VERSION in
 * hla_impl_info.abi_version; a harness accepts the same major and a minor up to
 * its own. Minor versions only add: fields read only from libraries that
 * declare them, or changes that keep every field's size and offset.
 *   1.0  the first version (declared as abi_version 1 by older headers)
 *   1.1  hla_impl_info.form_class and precision_by_dtype (declared as 2)
 *   1.2  int32_t fields instead of enum-typed ones (the same layout: these
 *        enums are 4-byte ints on the Linux ABIs the fuzzer runs on); the
 *        version encoded as major << 16 | minor (0x10002)
 *   1.3  HLA_FEAT_BACKWARD and hla_impl_run_backward (a harness ignores the bit
 *        in libraries declaring an older version, where it meant nothing)
 *   1.4  HLA_FEAT_BACKWARD_STATE and hla_impl_run_backward_state (likewise)
 * Headers before 1.2 defined HLA_IMPL_ABI_VERSION as 1 or 2: the values below
 * 0x10000 read as 1.(value - 1) (HLA_IMPL_ABI_MAJOR_OF / _MINOR_OF). */
#define HLA_IMPL_ABI_VERSION_MAJOR 1
#define HLA_IMPL_ABI_VERSION_MINOR 4
#define HLA_IMPL_ABI_MAKE_VERSION(major, minor) (((major) << 16) | (minor))
#define HLA_IMPL_ABI_VERSION HLA_IMPL_ABI_MAKE_VERSION(HLA_IMPL_ABI_VERSION_MAJOR, HLA_IMPL_ABI_VERSION_MINOR)
#define HLA_IMPL_ABI_MAJOR_OF(v) ((v) < 0x10000 ? 1 : (v) >> 16)
#define HLA_IMPL_ABI_MINOR_OF(v) ((v) < 0x10000 ? (v) - 1 : (v) & 0xffff)

/* Codes of the int32_t fields variant, dtype, eps_mode and form_class (and the
 * bit positions of hla_impl_info.variants and .dtypes). */
typedef enum { HLA_LA1 = 0, HLA_HLA2 = 1, HLA_AHLA = 2, HLA_HLA3 = 3, HLA_HLA3_PAPER = 4 } hla_variant;
typedef enum { HLA_F64 = 0, HLA_F32 = 1, HLA_BF16 = 2, HLA_F16 = 3 } hla_dtype;
typedef enum { HLA_EPS_ADD = 0, HLA_EPS_CLAMP = 1 } hla_eps_mode;
/* How the kernel accumulates its terms, its evaluation class (docs/pass-rule.md):
 * MASKED forms only masked terms in nested sums (the corrected-state streaming
 * form, the chunked matmul form, scans); STATE_DIFFERENCE subtracts unmasked
 * partial sums (the paper's o_t = q_t^T(S_t C_t - G_t)) and is judged against the
 * magnitude of the terms it forms; FLAT adds every literal term of the definition
 * into one accumulator per output (any order); HLA_CLASS_FLAT_CHUNKS(w) is a
 * chunked kernel (width w, 1 <= w <= 65536) adding its intra-chunk terms one by one. */
typedef enum { HLA_CLASS_MASKED = 0, HLA_CLASS_STATE_DIFFERENCE = 1, HLA_CLASS_FLAT = 2 } hla_form_class;
#define HLA_CLASS_FLAT_CHUNKS(w) ((int32_t)(((w) << 8) | HLA_CLASS_FLAT))

/* Feature bits of hla_impl_info.features. */
#define HLA_FEAT_UNMASKED  (1u << 0) /* masked = 0 (hla2, hla3) */
#define HLA_FEAT_NORMALIZE (1u << 1) /* normalize = 1 with eps_mode ADD */
#define HLA_FEAT_CLAMP     (1u << 2) /* normalize = 1 with eps_mode CLAMP */
#define HLA_FEAT_DECAY     (1u << 3) /* gamma < 1 */
#define HLA_FEAT_RIDGE     (1u << 4) /* lambda > 0 (hla2) */
#define HLA_FEAT_SCALE     (1u << 5) /* scale != 1 */
#define HLA_FEAT_GQA       (1u << 6) /* kv_heads < heads */
#define HLA_FEAT_VARLEN    (1u << 7) /* offsets != NULL */
#define HLA_FEAT_STATE     (1u << 8) /* state_in / state_out */
#define HLA_FEAT_DEN       (1u << 9) /* writes den when p->den != NULL */
#define HLA_FEAT_BACKWARD  (1u << 10) /* exports hla_impl_run_backward (ABI 1.3) */
#define HLA_FEAT_BACKWARD_STATE (1u << 11) /* exports hla_impl_run_backward_state (ABI 1.4; with STATE and BACKWARD) */

typedef struct {
  int32_t abi_version;    /* HLA_IMPL_ABI_VERSION of the header the library is built with */
  const char* name;       /* for reports */
  uint32_t variants;      /* bit (1u << hla_variant) per supported variant */
  uint32_t dtypes;        /* bit (1u << hla_dtype) per supported input/output dtype */
  uint32_t features;      /* HLA_FEAT_* */
  int64_t max_n, max_d, max_dv; /* 0: no limit */
  const char* precision;        /* declared compute precision: "f64", "f32", "tf32", "bf16", "f16", "bf16+f32" or
                                   "f16+f32" (tensor-core: operands rounded, f32 accumulation) */
  /* ABI 1.1 and later only: */
  int32_t form_class;               /* hla_form_class: MASKED (0) unless the kernel subtracts partial sums */
  const char* precision_by_dtype;   /* NULL, or per input dtype, overriding `precision` for the
                                       dtypes it names: "bf16=f32,f16=f32,f32=f32,f64=f64" */
} hla_impl_info;

typedef struct {
  int32_t abi_version;    /* the library's own hla_impl_info.abi_version, as it declared it */
  int32_t variant;        /* hla_variant */
  int32_t masked;         /* 1: causal (default); 0: unmasked (hla2, hla3 only) */
  int32_t normalize;      /* 1: out = num / (den (+) eps) */
  int32_t eps_mode;       /* hla_eps_mode */
  /* Options rounded to double, and exactly as rationals ("7/8", "1/1000000"). */
  double gamma, eps, lambda, scale;
  const char *gamma_exact, *eps_exact, *lambda_exact, *scale_exact;
  int64_t batch, heads, kv_heads, n, d, dv;
  int32_t dtype;          /* hla_dtype: of q, k, v and out */
  const void *q, *k, *v;
  const int64_t* offsets; /* NULL, or num_offsets = sequences + 1 entries, 0 ... n */
  int64_t num_offsets;
  /* Opaque state, hla_impl_state_size(p) doubles per (batch, head, sequence)
   * in that order. state_in NULL: start from zero. state_out NULL: not wanted.
   * Running tokens [0, m) with state_out, then [m, n) with that as state_in,
   * must equal one run over [0, n). Only with HLA_FEAT_STATE. */
  const double* state_in;
  double* state_out;
  void* out;              /* [batch][heads][n][dv] in dtype: always written */
  double* den;            /* [batch][heads][n] or NULL: written when HLA_FEAT_DEN */
} hla_problem;

const hla_impl_info* hla_impl_info_get(void);
int hla_impl_run(const hla_problem* p, char* err, size_t err_len);
/* Only with HLA_FEAT_STATE: doubles of state per (batch, head, sequence). */
int64_t hla_impl_state_size(const hla_problem* p);

/* Only with HLA_FEAT_BACKWARD (ABI 1.3): the gradients (SPEC.md §9) of
 * L = sum_t <dout_t, out_t> + sum_t dden_t * den_t with respect to q (before
 * scale), k and v, for every problem the library declares except hla3_paper
 * (no backward) and problems with an initial state. p is as for hla_impl_run,
 * with out, den, state_in and state_out NULL (the library recomputes what it
 * needs). Buffers, dense row-major, 64-byte aligned:
 *   dout [batch][heads][n][dv] in dtype    dden [batch][heads][n] double, or NULL (zero)
 *   dq   [batch][heads][n][d] in dtype     dk [batch][kv_heads][n][d] in dtype
 *   dv   [batch][kv_heads][n][dv] in dtype (dk, dv summed over each kv group's query heads)
 * Returns 0, or non-zero with a message in err, as hla_impl_run. */
int hla_impl_run_backward(const hla_problem* p, const void* dout, const double* dden, void* dq, void* dk, void* dv,
                          char* err, size_t err_len);

/* Only with HLA_FEAT_BACKWARD_STATE (ABI 1.4): the gradients of a sequence
 * continued from a state, and of that state (SPEC.md §8, §9). As
 * hla_impl_run_backward, but the forward starts from p->state_in (NULL: zero;
 * p->state_out is NULL) and the loss is
 *   L = sum_t <dout_t, out_t> + sum_t dden_t * den_t + <dstate_out, state_out>,
 * dstate_out the upstream gradient of the final state (NULL: zero). Writes
 * dq, dk, dv, and dstate_in = dL/d(state_in) (NULL: not wanted). dstate_out
 * and dstate_in are laid out as state_in: hla_impl_state_size(p) doubles per
 * (batch, head, sequence), the library's own opaque state; a harness only
 * hands back what the library wrote. So running the backward of [m, n) from
 * the state after [0, m), and then the backward of [0, m) with its dstate_in
 * as dstate_out, gives the gradients of one backward over [0, n). */
int hla_impl_run_backward_state(const hla_problem* p, const void* dout, const double* dden, const double* dstate_out, void* dq,
                                void* dk, void* dv, double* dstate_in, char* err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* HLA_IMPL_H */
