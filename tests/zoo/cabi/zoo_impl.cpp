// zoo_impl.cpp — the bug zoo's C ABI candidates.
//
// One plain-loop implementation of la1, hla2, ahla and hla3 (SPEC §2–§5) in
// float (inputs, products and accumulation; declared precision "f32"), built
// once per zoo member: ZOO_BUG=<member> selects the member and with it at most
// one deliberate bug. `correct_streaming` (SPEC §3 recurrences),
// `correct_chunked` (SPEC §5 chunk form, width ZOO_CHUNK) and
// `correct_f32_on_half` (the chunk form on bf16/f16/f32 inputs, declaring its
// precision per input dtype) have none. Every bug
// sits behind `if constexpr (bug("<member>"))` with a comment saying what real
// kernels get wrong there. Independent of the project's reference library on
// purpose: a candidate must not borrow the oracle's code.
//
// Trick used throughout: every value row gets a trailing 1 (v' = [v | 1]), so
// the last output column is the denominator (SPEC §1: den is the same sum with
// v_j -> 1) and every d x dv state carries its vector twin (C|m, F|f, P|mK, E|n).

#include "hla_impl.h"
#include "zoo_abi.hpp"
#include "zoo_bits.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string_view>
#include <vector>

#ifndef ZOO_CHUNK
#define ZOO_CHUNK 16
#endif

namespace {

constexpr std::string_view kMember = ZOO_STR(ZOO_BUG);
constexpr std::string_view kMembers[] = {
    "correct_streaming", "correct_chunked", "e1_decay",      "e2_scan",       "e5_chunk",
    "strict_mask",       "wrong_decay_power", "future_leak", "ragged_dropped", "state_not_reset",
    "f16_accum",         "transposed_k",    "ignore_scale",  "clamp_no_sign", "gqa_wrong_group",
    "crash_long",        "hang",            "state_incomplete", "correct_f32_on_half",
};
constexpr bool known_member() {
  for (auto m : kMembers)
    if (m == kMember) return true;
  return false;
}
static_assert(known_member(), "ZOO_BUG names no zoo member");
constexpr bool bug(std::string_view member) { return kMember == member; }

// Members built on the chunked form (SPEC §5); all others stream (SPEC §3).
constexpr bool kChunked = bug("correct_chunked") || bug("correct_f32_on_half") || bug("e2_scan") || bug("e5_chunk") ||
                          bug("strict_mask") || bug("future_leak") || bug("ragged_dropped");
constexpr int64_t kW = ZOO_CHUNK;

// ---------------------------------------------------------------------------
// What each member declares (hla_impl_info): honest, and narrow enough that
// the fuzzer reaches each bug quickly.
constexpr uint32_t var(hla_variant v) { return 1u << v; }
constexpr uint32_t dt(hla_dtype t) { return 1u << t; }
constexpr uint32_t kLow = var(HLA_LA1) | var(HLA_HLA2) | var(HLA_AHLA);
constexpr uint32_t kAllDtypes = dt(HLA_F64) | dt(HLA_F32) | dt(HLA_BF16) | dt(HLA_F16);
constexpr uint32_t kAllFeatures = HLA_FEAT_UNMASKED | HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP | HLA_FEAT_DECAY |
                                  HLA_FEAT_RIDGE | HLA_FEAT_SCALE | HLA_FEAT_GQA | HLA_FEAT_VARLEN |
                                  HLA_FEAT_STATE | HLA_FEAT_DEN;
// Every member handles decay, grouped heads and den correctly (except where that is its bug).
constexpr uint32_t kBase = HLA_FEAT_DECAY | HLA_FEAT_GQA | HLA_FEAT_DEN;

struct Declared {
  uint32_t variants, dtypes, features;
};
constexpr Declared declared() {
  if (bug("correct_streaming")) return {kLow | var(HLA_HLA3), kAllDtypes, kAllFeatures};
  if (bug("correct_chunked")) return {kLow, kAllDtypes, kAllFeatures};
  // The common tensor-core kernel: 16-bit (or f32) inputs, f32 products and accumulators. q·scale
  // stays in f32 (rounding it back to bf16 would perturb q by 2^-8: then only "bf16=bf16" is honest).
  if (bug("correct_f32_on_half")) return {kLow, dt(HLA_F32) | dt(HLA_BF16) | dt(HLA_F16), kAllFeatures};
  if (bug("e1_decay") || bug("e2_scan") || bug("e5_chunk") || bug("wrong_decay_power"))
    return {var(HLA_HLA2), dt(HLA_F32), kBase};
  if (bug("state_not_reset")) return {kLow, dt(HLA_F32), kBase | HLA_FEAT_VARLEN};
  if (bug("f16_accum")) return {kLow, dt(HLA_F32) | dt(HLA_F16), kBase};
  if (bug("ignore_scale")) return {kLow, dt(HLA_F32), kBase | HLA_FEAT_SCALE};
  if (bug("clamp_no_sign")) return {kLow, dt(HLA_F32), kBase | HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP};
  if (bug("gqa_wrong_group")) return {kLow, dt(HLA_F32), kBase | HLA_FEAT_GQA};
  if (bug("state_incomplete")) return {var(HLA_HLA2) | var(HLA_AHLA), dt(HLA_F32), kBase | HLA_FEAT_STATE};
  if (bug("crash_long") || bug("hang")) return {var(HLA_LA1) | var(HLA_HLA2), dt(HLA_F32), kBase};
  return {kLow, dt(HLA_F32), kBase};  // strict_mask, future_leak, ragged_dropped, transposed_k
}

const hla_impl_info kInfo = {
    HLA_IMPL_ABI_VERSION,
    "zoo_" ZOO_STR(ZOO_BUG),
    declared().variants,
    declared().dtypes,
    declared().features,
    4096,
    256,
    256,
    "f32",
    // e1_decay computes hla2 masked as the paper's state difference (S + λI)C − G: its rounding error
    // scales with the unmasked magnitude, so it declares that class (its bug is the decay, not this).
    // The correct chunked members add their intra-chunk terms pair by pair (axpy per
    // term into the output): the class flat:kW, whose bound and orders cover that.
    bug("e1_decay")                                        ? HLA_CLASS_STATE_DIFFERENCE
    : bug("correct_chunked") || bug("correct_f32_on_half") ? HLA_CLASS_FLAT_CHUNKS(kW)
                                                           : HLA_CLASS_MASKED,
    // correct_f32_on_half says per input dtype what it computes in (the same for all: f32).
    bug("correct_f32_on_half") ? "bf16=f32,f16=f32,f32=f32" : nullptr,
};

// ---------------------------------------------------------------------------
// State layout per (batch, head, sequence), in floats stored as doubles.
// Slots: s (d x d), c (d x dv'), f (d x dv'), sq (d x d); dv' = dv + 1.
//   la1:  c = KV|k-sum
//   hla2: s = S, c = C|m, f = F|f   (e1_decay: f = G|h, e2_scan: f = G|h)
//   ahla: c = P|mK, f = E|n
//   hla3: s = S, c = P|mK, f = F|eta, sq = SQ (unmasked only)
struct Layout {
  int64_t s = -1, c = -1, f = -1, sq = -1, size = 0;
};

Layout layout(int32_t v, int64_t d, int64_t w) {  // v: an hla_variant code
  Layout l;
  auto slot = [&](int64_t& at, int64_t count) {
    at = l.size;
    l.size += count;
  };
  switch (v) {
    case HLA_LA1: slot(l.c, d * w); break;
    case HLA_HLA2: slot(l.s, d * d); slot(l.c, d * w); slot(l.f, d * w); break;
    case HLA_AHLA: slot(l.c, d * w); slot(l.f, d * w); break;
    case HLA_HLA3: slot(l.s, d * d); slot(l.c, d * w); slot(l.f, d * w); slot(l.sq, d * d); break;
    default: break;
  }
  return l;
}

// One (batch, head, sequence), decoded to float: q (scaled) and k are L x d,
// v is L x dv' with the trailing 1.
struct Head {
  int64_t L = 0, d = 0, w = 0;
  std::vector<float> q, k, v;
  const float* qr(int64_t t) const { return &q[static_cast<size_t>(t * d)]; }
  const float* kr(int64_t t) const { return &k[static_cast<size_t>(t * d)]; }
  const float* vr(int64_t t) const { return &v[static_cast<size_t>(t * w)]; }
};

struct Op {
  int32_t variant;  // hla_variant
  bool masked;
  double gamma;
  float lambda;
};

// ---------------------------------------------------------------------------
// Small float kernels.

// What a state accumulator keeps of a value.
inline float keep(float x) {
  // BUG f16_accum: the state lives in half precision (kernels that keep
  // running sums in the input dtype to save registers / shared memory), while
  // the library declares "f32". Inputs and products are still float.
  if constexpr (bug("f16_accum")) return zoo::round_to_f16(x);
  else return x;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// M (rows x cols) = g·M + a·bᵀ
void decay_add_outer(float* M, float g, const float* a, const float* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) M[r * cols + c] = keep(g * M[r * cols + c] + a[r] * b[c]);
}

// y (cols) = xᵀ·M   (M rows x cols)
void vecmat(const float* x, const float* M, int64_t rows, int64_t cols, float* y) {
  for (int64_t c = 0; c < cols; ++c) y[c] = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c] += x[r] * M[r * cols + c];
}

// y += s·x
void axpy(float s, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += s * x[i];
}

// ---------------------------------------------------------------------------
// Streaming recurrences (SPEC §3). num is L x dv' (last column: den).
[[maybe_unused]] void stream(const Op& o, const Head& h, float* st, const Layout& l, float* num) {
  const int64_t d = h.d, w = h.w;
  const auto g = static_cast<float>(o.gamma), g2 = static_cast<float>(o.gamma * o.gamma),
             g3 = static_cast<float>(o.gamma * o.gamma * o.gamma);
  float* S = l.s >= 0 ? st + l.s : nullptr;
  float* C = l.c >= 0 ? st + l.c : nullptr;  // C|m, KV|z or P|mK
  float* F = l.f >= 0 ? st + l.f : nullptr;  // F|f, E|n, or G|h (e1_decay)
  float* SQ = l.sq >= 0 ? st + l.sq : nullptr;
  std::vector<float> xd(static_cast<size_t>(d)), yd(static_cast<size_t>(d)), xw(static_cast<size_t>(w));

  for (int64_t t = 0; t < h.L; ++t) {
    const float *q = h.qr(t), *k = h.kr(t), *v = h.vr(t);
    float* out = num + t * w;
    switch (o.variant) {
      case HLA_LA1:  // KV = γKV + k v'ᵀ, num = qᵀKV
        decay_add_outer(C, g, k, v, d, w);
        vecmat(q, C, d, w, out);
        break;

      case HLA_HLA2:
        if (o.masked && bug("e1_decay")) {
          // BUG e1_decay: the paper's Alg. 1 line 6 as printed (SPEC §6 E1),
          // G_t = γG_{t−1} + k_t(k_tᵀC_{t−1}) (h likewise): missing γ² on G and
          // γ on the new term. Kernels that transcribe the paper's pseudo-code
          // for the decayed masked state make it; harmless only at γ = 1.
          vecmat(k, C, d, w, xw.data());  // k_tᵀC_{t−1}
          decay_add_outer(F, g, k, xw.data(), d, w);
          decay_add_outer(S, g, k, k, d, d);
          decay_add_outer(C, g, q, v, d, w);
          vecmat(q, S, d, d, xd.data());  // S symmetric: qᵀS
          axpy(o.lambda, q, xd.data(), d);
          vecmat(xd.data(), C, d, w, out);  // (qᵀS + λqᵀ) C − qᵀG
          vecmat(q, F, d, w, xw.data());
          for (int64_t c = 0; c < w; ++c) out[c] -= xw[c];
          break;
        }
        decay_add_outer(S, g, k, k, d, d);
        decay_add_outer(C, g, q, v, d, w);
        vecmat(q, S, d, d, xd.data());  // S_t q_t
        if (o.masked) {
          // Corrected state F_t = γ²F_{t−1} + (S_tq_t)v'_tᵀ, num = qᵀF + λqᵀC.
          // BUG wrong_decay_power: F decays by γ, not γ² (F carries two decayed
          // indices, i and j; kernels that reuse the first-order decay for it).
          decay_add_outer(F, bug("wrong_decay_power") ? g : g2, xd.data(), v, d, w);
          vecmat(q, F, d, w, out);
          vecmat(q, C, d, w, xw.data());
          axpy(o.lambda, xw.data(), out, w);
        } else {  // num = (qᵀS + λqᵀ) C
          axpy(o.lambda, q, xd.data(), d);
          vecmat(xd.data(), C, d, w, out);
        }
        break;

      case HLA_AHLA:  // P = γP + k v'ᵀ, E = γE + k (qᵀP), num = qᵀE
        decay_add_outer(C, g, k, v, d, w);
        vecmat(q, C, d, w, xw.data());
        decay_add_outer(F, g, k, xw.data(), d, w);
        vecmat(q, F, d, w, out);
        break;

      case HLA_HLA3:
        decay_add_outer(S, g, k, k, d, d);
        decay_add_outer(C, g, k, v, d, w);
        if (o.masked) {  // F = γ³F + (S q)(qᵀP), num = qᵀF
          vecmat(q, S, d, d, xd.data());
          vecmat(q, C, d, w, xw.data());
          decay_add_outer(F, g3, xd.data(), xw.data(), d, w);
          vecmat(q, F, d, w, out);
        } else {  // SQ = γSQ + q qᵀ, num = qᵀ S SQ P
          decay_add_outer(SQ, g, q, q, d, d);
          vecmat(q, S, d, d, xd.data());
          vecmat(xd.data(), SQ, d, d, yd.data());
          vecmat(yd.data(), C, d, w, out);
        }
        break;

      default: break;
    }
  }
}

// ---------------------------------------------------------------------------
// Chunked form (SPEC §5): chunks of kW tokens; the carry A (the state before
// the chunk, same layout as streaming) enters through ρ_t-weighted carry terms,
// the chunk itself through masked intra-chunk sums; then A <- A ⊕ chunk.

// Whether token j of the chunk feeds the output of token t (local indices) —
// the causal mask of the chunk's score matrices. Used for the output terms
// only; the chunk summaries below always sum the complete chunk.
constexpr bool sees(int64_t t, int64_t j) {
  // BUG strict_mask: `<` instead of `≤` (tril with diagonal −1, or an
  // exclusive-scan mask used where the inclusive one belongs): drops i = t and
  // j = t (and i = j) terms.
  if constexpr (bug("strict_mask")) return j < t;
  else return j <= t;
}

// How the mask is applied. Correct: a masked term is never evaluated, so a NaN
// or Inf beyond the mask stays there. Every masked loop reads
// `if (!visit(t, j)) continue;` and weights the term by `mask(t, j)`.
// BUG future_leak: the chunk's full score matrix is computed and the mask is
// applied by multiplying with 0/1 (`S * M`, or `where` on the product after
// the fact): exact for finite inputs, but 0 · NaN = NaN, so a NaN or Inf at
// token j reaches outputs t < j of the same chunk (SPEC §7).
constexpr bool visit(int64_t t, int64_t j) { return bug("future_leak") || sees(t, j); }
constexpr float mask(int64_t t, int64_t j) { return sees(t, j) ? 1.0f : 0.0f; }

[[maybe_unused]] void chunked(const Op& o, const Head& h, float* st, const Layout& l, float* num) {
  const int64_t d = h.d, w = h.w, L = h.L;
  // γ^e for e in [0, 2kW + 2]. Negative e occurs only in terms future_leak evaluates beyond the
  // mask, whose weight is then multiplied by 0: 1 there keeps finite inputs exact for any γ.
  std::vector<float> powers(static_cast<size_t>(2 * kW + 3));
  for (int64_t e = 0; e <= 2 * kW + 2; ++e)
    powers[static_cast<size_t>(e)] = static_cast<float>(std::pow(o.gamma, static_cast<double>(e)));
  auto pw = [&](int64_t e) { return e < 0 ? 1.0f : powers[static_cast<size_t>(e)]; };

  float* S = l.s >= 0 ? st + l.s : nullptr;
  float* C = l.c >= 0 ? st + l.c : nullptr;
  float* F = l.f >= 0 ? st + l.f : nullptr;
  const auto dw = static_cast<size_t>(d * w), dd = static_cast<size_t>(d * d);
  std::vector<float> FA(dw), SC(dw), SB(dd), CB(dw), FB(dw), tmp(dw), xd(static_cast<size_t>(d)),
      xw(static_cast<size_t>(w));

  // BUG ragged_dropped: the grid covers n / w full chunks (integer division,
  // the classic `n // BLOCK` launch grid): a ragged last chunk is never
  // computed and its outputs stay zero.
  const int64_t end = bug("ragged_dropped") ? L / kW * kW : L;

  for (int64_t c0 = 0; c0 < end; c0 += kW) {
    const int64_t len = std::min(kW, L - c0);
    auto q = [&](int64_t t) { return h.qr(c0 + t); };
    auto k = [&](int64_t t) { return h.kr(c0 + t); };
    auto v = [&](int64_t t) { return h.vr(c0 + t); };
    // a[t][i] = q_t · k_i for all pairs of the chunk; which of them enter an output: visit / mask.
    std::vector<float> a(static_cast<size_t>(len * len));
    for (int64_t t = 0; t < len; ++t)
      for (int64_t i = 0; i < len; ++i) a[static_cast<size_t>(t * len + i)] = dot(q(t), k(i), d);
    auto A = [&](int64_t t, int64_t i) { return a[static_cast<size_t>(t * len + i)]; };
    const float rho = pw(len);

    if (o.variant == HLA_LA1) {
      for (int64_t t = 0; t < len; ++t) {
        float* out = num + (c0 + t) * w;
        vecmat(q(t), C, d, w, out);  // ρ_t qᵀKV_A, ρ_t = γ^{t+1}
        for (int64_t c = 0; c < w; ++c) out[c] *= pw(t + 1);
        for (int64_t j = 0; j < len; ++j)
          if (visit(t, j)) axpy(mask(t, j) * pw(t - j) * A(t, j), v(j), out, w);
      }
      for (size_t x = 0; x < dw; ++x) C[x] *= rho;  // KV <- ρ KV_A + Σ_j γ^{T−j} k_j v'_jᵀ
      for (int64_t j = 0; j < len; ++j)
        for (int64_t r = 0; r < d; ++r) axpy(pw(len - 1 - j) * k(j)[r], v(j), C + r * w, w);
      continue;
    }

    if (o.variant == HLA_HLA2) {
      // Carry F_A: the state slot holds F_A (e2_scan: G_A, F_A = S_A C_A − G_A).
      if (o.masked) {
        for (size_t x = 0; x < dw; ++x) FA[x] = F[x];
        if (bug("e2_scan")) {
          for (int64_t r = 0; r < d; ++r) {
            vecmat(S + r * d, C, d, w, xw.data());  // row r of S_A C_A (S symmetric)
            for (int64_t c = 0; c < w; ++c) FA[static_cast<size_t>(r * w + c)] = xw[c] - F[r * w + c];
          }
        }
      } else {
        for (int64_t r = 0; r < d; ++r) vecmat(S + r * d, C, d, w, SC.data() + r * w);  // S_A C_A
      }

      for (int64_t t = 0; t < len; ++t) {
        float* out = num + (c0 + t) * w;
        const float rt = pw(t + 1);
        vecmat(q(t), o.masked ? FA.data() : SC.data(), d, w, out);  // ρ_t² qᵀF_A  (unmasked: qᵀS_A C_A)
        for (int64_t c = 0; c < w; ++c) out[c] *= pw(2 * t + 2);
        vecmat(q(t), S, d, d, xd.data());  // u = qᵀS_A
        // BUG e5_chunk: the paper's Fig. 1C chunk form (SPEC §6 E5) has no
        // carry × chunk term ρ_t (qᵀS_A) C_{B,≤t}: pairs with the key in an
        // earlier chunk and the value in this one are lost from chunk 2 on.
        if (!(o.masked && bug("e5_chunk")))
          for (int64_t j = 0; j < len; ++j)
            if (visit(t, j)) axpy(mask(t, j) * rt * pw(t - j) * dot(xd.data(), q(j), d), v(j), out, w);
        if (!o.masked) {  // ρ_t (qᵀS_{B,≤t}) C_A
          for (int64_t r = 0; r < d; ++r) xd[r] = 0;
          for (int64_t i = 0; i < len; ++i)
            if (visit(t, i)) axpy(mask(t, i) * pw(t - i) * A(t, i), k(i), xd.data(), d);
          vecmat(xd.data(), C, d, w, xw.data());
          axpy(rt, xw.data(), out, w);
        }
        // Intra-chunk: Σ_j γ^{t−j} [Σ_i γ^{t−i} a_ti a_ji] v'_j over i ≤ j ≤ t (masked), i, j ≤ t (unmasked).
        for (int64_t j = 0; j < len; ++j) {
          if (!visit(t, j)) continue;
          float coef = 0;
          for (int64_t i = 0; i < len; ++i) {
            const int64_t before = o.masked ? j : t;  // i ≤ j (masked), i ≤ t (unmasked)
            if (visit(before, i)) coef += mask(before, i) * pw(2 * t - i - j) * A(t, i) * A(j, i);
          }
          axpy(mask(t, j) * coef, v(j), out, w);
        }
        if (o.lambda != 0) {  // λ qᵀ(ρ_t C_A + C_{B,≤t})
          vecmat(q(t), C, d, w, xw.data());
          for (int64_t c = 0; c < w; ++c) xw[c] *= rt;
          for (int64_t j = 0; j < len; ++j)
            if (visit(t, j)) axpy(mask(t, j) * pw(t - j) * dot(q(t), q(j), d), v(j), xw.data(), w);
          axpy(o.lambda, xw.data(), out, w);
        }
      }

      // Carry: A <- A ⊕ B (SPEC §4), with F = S C − G:  F = ρ²F_A + ρ S_A C_B + F_B.
      std::fill(SB.begin(), SB.end(), 0.0f);
      std::fill(CB.begin(), CB.end(), 0.0f);
      std::fill(FB.begin(), FB.end(), 0.0f);
      const int64_t T = len - 1;
      for (int64_t i = 0; i < len; ++i) {
        for (int64_t r = 0; r < d; ++r) {
          axpy(pw(T - i) * k(i)[r], k(i), SB.data() + r * d, d);
          axpy(pw(T - i) * q(i)[r], v(i), CB.data() + r * w, w);
        }
      }
      if (o.masked) {
        // FB = Σ_{i≤j} γ^{2T−i−j} (q_j·k_i) k_i v'_jᵀ; e2_scan keeps G_B = the i > j pairs instead.
        for (int64_t i = 0; i < len; ++i)
          for (int64_t j = 0; j < len; ++j) {
            if (bug("e2_scan") ? !(i > j) : !(i <= j)) continue;
            const float s = pw(2 * T - i - j) * A(j, i);
            for (int64_t r = 0; r < d; ++r) axpy(s * k(i)[r], v(j), FB.data() + r * w, w);
          }
        if (bug("e2_scan")) {
          // BUG e2_scan: the paper's decay-aware masked concatenation (SPEC §6
          // E2), G = ρ_B G_A + G_B + S_B(ρ_B C_A): ρ_B instead of ρ_B² on G_A.
          // Kernels that combine chunk summaries with the printed operator;
          // wrong once a carry with G ≠ 0 is combined again (3rd chunk on).
          for (int64_t r = 0; r < d; ++r) vecmat(SB.data() + r * d, C, d, w, tmp.data() + r * w);  // S_B C_A
          for (size_t x = 0; x < dw; ++x) F[x] = rho * F[x] + FB[x] + rho * tmp[x];
        } else {
          for (int64_t r = 0; r < d; ++r) vecmat(S + r * d, CB.data(), d, w, tmp.data() + r * w);  // S_A C_B
          for (size_t x = 0; x < dw; ++x) F[x] = rho * rho * F[x] + rho * tmp[x] + FB[x];
        }
      }
      for (size_t x = 0; x < dd; ++x) S[x] = rho * S[x] + SB[x];
      for (size_t x = 0; x < dw; ++x) C[x] = rho * C[x] + CB[x];
      continue;
    }

    if (o.variant == HLA_AHLA) {
      // qP_i = q_iᵀ P_A for the chunk's tokens (the routed carry R_{B,≤t} P_A).
      std::vector<float> qP(static_cast<size_t>(len * w));
      for (int64_t i = 0; i < len; ++i) vecmat(q(i), C, d, w, qP.data() + i * w);
      for (int64_t t = 0; t < len; ++t) {
        float* out = num + (c0 + t) * w;
        const float rt = pw(t + 1);
        vecmat(q(t), F, d, w, out);  // ρ_t qᵀE_A
        for (int64_t c = 0; c < w; ++c) out[c] *= rt;
        for (int64_t i = 0; i < len; ++i) {
          if (!visit(t, i)) continue;
          axpy(mask(t, i) * rt * A(t, i), qP.data() + i * w, out, w);  // ρ_t a_ti q_iᵀP_A
          for (int64_t j = 0; j < len; ++j)
            if (visit(i, j)) axpy(mask(t, i) * mask(i, j) * pw(t - j) * A(t, i) * A(i, j), v(j), out, w);
        }
      }
      // Carry: E = ρE_A + E_B + ρ R_B P_A, P = ρP_A + P_B.
      std::fill(FB.begin(), FB.end(), 0.0f);
      std::fill(CB.begin(), CB.end(), 0.0f);
      const int64_t T = len - 1;
      for (int64_t i = 0; i < len; ++i) {
        for (int64_t r = 0; r < d; ++r) {
          axpy(pw(T - i) * k(i)[r], v(i), CB.data() + r * w, w);  // P_B
          axpy(rho * k(i)[r], qP.data() + i * w, FB.data() + r * w, w);  // ρ R_B P_A
        }
        for (int64_t j = 0; j <= i; ++j) {  // E_B
          const float s = pw(T - j) * A(i, j);
          for (int64_t r = 0; r < d; ++r) axpy(s * k(i)[r], v(j), FB.data() + r * w, w);
        }
      }
      for (size_t x = 0; x < dw; ++x) F[x] = rho * F[x] + FB[x];
      for (size_t x = 0; x < dw; ++x) C[x] = rho * C[x] + CB[x];
      continue;
    }
  }
}

// ---------------------------------------------------------------------------
// Outputs (inputs, outputs and validation: zoo_abi.hpp).

double normalized(const hla_problem* p, double num, double den) {
  // BUG clamp_no_sign: clamps with max(den, ε) (the usual "avoid division by
  // zero" guard), which replaces every negative den by ε; the sign-preserving
  // clamp is sign(den)·max(|den|, ε) (SPEC §1).
  if (bug("clamp_no_sign") && p->normalize && p->eps_mode == HLA_EPS_CLAMP) return num / std::max(den, p->eps);
  return zoo::normalize(p, num, den);
}

Head gather(const hla_problem* p, int64_t b, int64_t h, int64_t hk, int64_t t0, int64_t t1) {
  Head x;
  x.L = t1 - t0;
  x.d = p->d;
  x.w = p->dv + 1;
  const auto d = p->d, dv = p->dv, n = p->n;
  // q·scale is kept in float (correct_f32_on_half relies on it: bf16/f16 inputs, f32 compute).
  // BUG ignore_scale: q is used unscaled (the scale argument is accepted but
  // never applied, e.g. a kernel that assumes the caller pre-scaled q).
  const auto scale = bug("ignore_scale") ? 1.0f : static_cast<float>(p->scale);
  x.q.resize(static_cast<size_t>(x.L * d));
  x.k.resize(static_cast<size_t>(x.L * d));
  x.v.resize(static_cast<size_t>(x.L * x.w));
  for (int64_t t = 0; t < x.L; ++t) {
    for (int64_t c = 0; c < d; ++c) {
      x.q[static_cast<size_t>(t * d + c)] =
          scale * zoo::load<float>(p->q, p->dtype, static_cast<size_t>(((b * p->heads + h) * n + t0 + t) * d + c));
      // BUG transposed_k: K read as if laid out [B, Hkv, d, n] (a layout
      // mix-up between a kernel that wants Kᵀ and a caller that passes K).
      const auto ki = bug("transposed_k") ? ((b * p->kv_heads + hk) * d + c) * n + t0 + t
                                          : ((b * p->kv_heads + hk) * n + t0 + t) * d + c;
      x.k[static_cast<size_t>(t * d + c)] = zoo::load<float>(p->k, p->dtype, static_cast<size_t>(ki));
    }
    for (int64_t c = 0; c < dv; ++c)
      x.v[static_cast<size_t>(t * x.w + c)] =
          zoo::load<float>(p->v, p->dtype, static_cast<size_t>(((b * p->kv_heads + hk) * n + t0 + t) * dv + c));
    x.v[static_cast<size_t>(t * x.w + dv)] = 1.0f;
  }
  return x;
}

int run(const hla_problem* p, char* err, size_t err_len) {
  if (const char* why = zoo::unsupported(p, kInfo)) {
    if (err && err_len) std::snprintf(err, err_len, "%s: %s", kInfo.name, why);
    return 1;
  }
  if constexpr (bug("crash_long")) {
    // BUG crash_long: a fixed-size scratch buffer (40 tokens) indexed without
    // a bound check; here the overflow is made certain: a write through null.
    if (p->n > 40) {
      int* volatile scratch = nullptr;
      *scratch = 1;
    }
  }
  if constexpr (bug("hang")) {
    // BUG hang: a loop whose exit condition is never met for n % 7 == 0 (a
    // tile scheduler that waits for a tile which is never launched).
    if (p->n > 0 && p->n % 7 == 0)
      for (;;) {
        timespec ts{1, 0};
        nanosleep(&ts, nullptr);
      }
  }

  const Op op{p->variant, p->masked != 0, p->gamma, static_cast<float>(p->lambda)};
  const int64_t w = p->dv + 1, n = p->n;
  const Layout lay = layout(p->variant, p->d, w);
  const int64_t nseq = p->offsets ? p->num_offsets - 1 : 1;
  std::vector<float> st(static_cast<size_t>(lay.size)), num;

  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads; ++h) {
      // BUG gqa_wrong_group: query head h reads kv head h % kv_heads (heads
      // interleaved) instead of h / (heads / kv_heads) (heads grouped).
      const int64_t hk = bug("gqa_wrong_group") ? h % p->kv_heads : h / (p->heads / p->kv_heads);
      for (int64_t s = 0; s < nseq; ++s) {
        const int64_t t0 = p->offsets ? p->offsets[s] : 0, t1 = p->offsets ? p->offsets[s + 1] : n;
        const size_t base = static_cast<size_t>(((b * p->heads + h) * nseq + s) * lay.size);
        // BUG state_not_reset: packed sequences run as one stream: the state
        // is set up once per head, not at every offset (cu_seqlens ignored
        // by the state-passing loop).
        if (!bug("state_not_reset") || s == 0)
          for (size_t x = 0; x < st.size(); ++x) st[x] = p->state_in ? static_cast<float>(p->state_in[base + x]) : 0.0f;
        const Head hd = gather(p, b, h, hk, t0, t1);
        num.assign(static_cast<size_t>(hd.L * w), 0.0f);
        if constexpr (kChunked) chunked(op, hd, st.data(), lay, num.data());
        else stream(op, hd, st.data(), lay, num.data());
        for (int64_t t = 0; t < hd.L; ++t) {
          const double den = num[static_cast<size_t>(t * w + p->dv)];
          for (int64_t c = 0; c < p->dv; ++c)
            zoo::store(p->out, p->dtype, static_cast<size_t>(((b * p->heads + h) * n + t0 + t) * p->dv + c),
                  normalized(p, num[static_cast<size_t>(t * w + c)], den));
          if (p->den && (kInfo.features & HLA_FEAT_DEN)) p->den[(b * p->heads + h) * n + t0 + t] = den;
        }
        if (p->state_out) {
          for (size_t x = 0; x < st.size(); ++x) p->state_out[base + x] = st[x];
          // BUG state_incomplete: the final state written back holds only the
          // first-order moments; the second-order accumulator (hla2 F|f, ahla
          // E|n) is left out (zeroed), as when a kernel's state-out path
          // predates the corrected state. Continuing from it loses history.
          if (bug("state_incomplete") && lay.f >= 0)
            for (int64_t x = 0; x < p->d * w; ++x) p->state_out[base + static_cast<size_t>(lay.f + x)] = 0.0;
        }
      }
    }
  return 0;
}

}  // namespace

extern "C" {

ZOO_EXPORT const hla_impl_info* hla_impl_info_get(void) { return &kInfo; }

ZOO_EXPORT int hla_impl_run(const hla_problem* p, char* err, size_t err_len) {
  if (!p) {
    if (err && err_len) std::snprintf(err, err_len, "null problem");
    return 1;
  }
  return run(p, err, err_len);
}

ZOO_EXPORT int64_t hla_impl_state_size(const hla_problem* p) {
  return p ? layout(p->variant, p->d, p->dv + 1).size : 0;
}

}  // extern "C"
