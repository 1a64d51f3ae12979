// zoo_backward.cpp — the bug zoo's backward pass (hla_impl_run_backward, ABI
// 1.3): la1 and masked hla2 forward by the SPEC §3 streaming recurrences and
// backward by their reverse-time adjoints, in double (precision f64).
// Independent of the project's reference library on purpose.
//
// As in zoo_impl.cpp, v' = [v | 1] (w = dv + 1 columns; the last is den), and
// the upstream is Ȳ_t = ∂L/∂[num_t | den_t] = [do | dden], normalized:
// [do/D | dden − ⟨do, num⟩/D²·∂D/∂den], D = den ⊕ ε (∂D/∂den = 1, or 0 where
// the clamp holds D at ±ε: |den| < ε). q̃ = scale·q. Per head and sequence:
//   la1:  P_t = γP_{t−1} + k_t v'_tᵀ, num'_t = q̃_tᵀP_t;  dq̃_t = P_tȲ_t,
//         R_j = γR_{j+1} + q̃_jȲ_jᵀ, dk_j = R_jv'_j, dv'_j = R_jᵀk_j.
//   hla2: S_t = γS_{t−1} + k_tk_tᵀ, b_t = S_tq̃_t, F_t = γ²F_{t−1} + b_tv'_tᵀ,
//         num'_t = q̃_tᵀF_t. L = Σ_j g_jᵀS_jq̃_j with g_j = R_jv'_j and
//         R_j = γ²R_{j+1} + q̃_jȲ_jᵀ; so dq̃_t = F_tȲ_t + S_tg_t,
//         dv'_j = R_jᵀb_j, and with M_i = γM_{i+1} + g_iq̃_iᵀ (the adjoint of S),
//         dk_i = (M_i + M_iᵀ)k_i (k_i appears twice in k_ik_iᵀ).
// dk and dv of a kv head sum over the query heads of its group.
//
// Members (ZOO_BUG): correct_backward; backward_dk_no_cross (dk_i = M_ik_i:
// the k_i dkᵀ half of d(kkᵀ) dropped); backward_decay_power (hla2's R decays
// by γ, not γ²); backward_gqa_unsummed (dk, dv of a group from its last query
// head only); backward_nan_leak (R over chunks of 16 with the causal mask
// applied by multiplying with 0/1: a NaN in do_t reaches rows j > t of its chunk);
// and with a state (ABI 1.4: HLA_FEAT_STATE, hla_impl_run_backward_state; the
// state per (batch, head, sequence) is la1's P, hla2's S then F, each d x w):
// correct_backward_state; backward_state_dropped (the gradient of the initial
// state written as zeros, as a kernel that forgets to hand it back). From a
// state X0 and the upstream X̄_end of the final state, the adjoints of the
// last token add F̄_end (P̄_end) and S̄_end undecayed, and ∂L/∂F0 = ρR_0, ∂L/∂S0 = γM_0.
// The gradient bug classes linear-attention kernel trackers report (each
// commented where it is switched on; the forward is right in all of them):
// backward_varlen_leak (the adjoints not reset at a packed-sequence boundary),
// backward_pad_nan (a padded last chunk's 0/0 upstream reaches real rows),
// backward_dstate_next_seq (sequence i's dstate from sequence i + 1; _packed:
// packed sequences only, batch entries right),
// backward_dq_chunk_carry (dq's carry from the wrong chunk at chunk starts),
// backward_bf16_accum (adjoints kept in bf16 while declaring f32 for bf16).

#include "hla_impl.h"
#include "zoo_abi.hpp"

#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>


namespace {

constexpr std::string_view kMember = ZOO_STR(ZOO_BUG);
static_assert(kMember == "correct_backward" || kMember == "backward_dk_no_cross" || kMember == "backward_decay_power" ||
                  kMember == "backward_gqa_unsummed" || kMember == "backward_nan_leak" || kMember == "correct_backward_state" ||
                  kMember == "backward_state_dropped" || kMember == "backward_varlen_leak" || kMember == "backward_pad_nan" ||
                  kMember == "backward_dstate_next_seq" || kMember == "backward_dstate_next_packed" ||
                  kMember == "backward_dq_chunk_carry" ||
                  kMember == "backward_bf16_accum",
              "ZOO_BUG names no member built from zoo_backward.cpp");
constexpr bool bug(std::string_view b) { return kMember == b; }

constexpr bool kState = bug("correct_backward_state") || bug("backward_state_dropped") || bug("backward_dstate_next_seq") ||
                        bug("backward_dstate_next_packed");
// backward_dstate_next_packed: backward_dstate_next_seq within a batch row's packed sequences only.
constexpr bool kDstateNext = bug("backward_dstate_next_seq") || bug("backward_dstate_next_packed");
// backward_bf16_accum also takes bf16 inputs and declares f32 for them (its bug: it accumulates in bf16).
constexpr bool kBf16 = bug("backward_bf16_accum");
constexpr uint32_t kFeatures = HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP | HLA_FEAT_DECAY | HLA_FEAT_SCALE | HLA_FEAT_GQA | HLA_FEAT_VARLEN |
                               HLA_FEAT_DEN | HLA_FEAT_BACKWARD | (kState ? HLA_FEAT_STATE | HLA_FEAT_BACKWARD_STATE : 0u);
const hla_impl_info kInfo = {
    HLA_IMPL_ABI_VERSION, "zoo_" ZOO_STR(ZOO_BUG), (1u << HLA_LA1) | (1u << HLA_HLA2),
    (1u << HLA_F64) | (1u << HLA_F32) | (kBf16 ? 1u << HLA_BF16 : 0u), kFeatures, 4096, 64, 64, "f64", HLA_CLASS_MASKED,
    kBf16 ? "bf16=f32" : nullptr,
};
constexpr int64_t kChunk = 16;  // the chunk width of backward_nan_leak, _pad_nan, _dq_chunk_carry

using Vec = std::vector<double>;
size_t at(int64_t i) { return static_cast<size_t>(i); }

// M (rows x cols) = g·M + a bᵀ
void decay_add_outer(double* M, double g, const double* a, const double* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) M[r * cols + c] = g * M[r * cols + c] + a[r] * b[c];
}
// y (rows) += M x   (M rows x cols)
void add_matvec(const double* M, const double* x, int64_t rows, int64_t cols, double* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r] += M[r * cols + c] * x[c];
}
// y (cols) += Mᵀ x
void add_matTvec(const double* M, const double* x, int64_t rows, int64_t cols, double* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c] += M[r * cols + c] * x[r];
}

// One sequence of one query head: q (scaled), k (L x d), v (L x w). Forward:
// num (L x w). With Y (L x w, the upstream of num|den): dq (of q̃), dk, dv
// (L x w) accumulated.
struct Head {
  bool hla2;
  double g;
  int64_t L, d, w;
  const Vec &q, &k, &v;
  const double *S0 = nullptr, *F0 = nullptr;  // the initial state (null: zero); la1's P is F
  bool bf16_adjoints = false;                   // backward_bf16_accum on bf16 inputs
};

// backward_bf16_accum: the adjoint states R and M live in a buffer of the input dtype (bf16), so every update is
// rounded to bf16 (8 bits), while the library declares f32 compute for bf16 inputs.
void keep_adjoint(const Head& h, Vec& x) {
  if (h.bf16_adjoints)
    for (double& e : x) e = zoo::bf16_to_float(zoo::float_to_bf16(static_cast<float>(e)));
}

// The state of one (batch, head, sequence): hla2's S (d x d), then F (P for la1; d x w).
int64_t state_size(const hla_problem* p) { return (p->variant == HLA_HLA2 ? p->d * p->d : 0) + p->d * (p->dv + 1); }

void forward(const Head& h, Vec& num, Vec* Fs, Vec* Ss, Vec* bs, double* S_end = nullptr, double* F_end = nullptr) {
  const int64_t d = h.d, w = h.w;
  Vec S(at(d * d)), F(at(d * w)), b(at(d));
  if (h.S0) std::copy(h.S0, h.S0 + d * d, S.begin());
  if (h.F0) std::copy(h.F0, h.F0 + d * w, F.begin());
  num.assign(at(h.L * w), 0);
  for (int64_t t = 0; t < h.L; ++t) {
    const double *qt = &h.q[at(t * d)], *kt = &h.k[at(t * d)], *vt = &h.v[at(t * w)];
    if (h.hla2) {
      decay_add_outer(S.data(), h.g, kt, kt, d, d);
      b.assign(at(d), 0);
      add_matvec(S.data(), qt, d, d, b.data());
      decay_add_outer(F.data(), h.g * h.g, b.data(), vt, d, w);
      if (Ss) std::copy(S.begin(), S.end(), Ss->begin() + t * d * d), std::copy(b.begin(), b.end(), bs->begin() + t * d);
    } else {
      decay_add_outer(F.data(), h.g, kt, vt, d, w);  // P
    }
    add_matTvec(F.data(), qt, d, w, &num[at(t * w)]);
    if (Fs) std::copy(F.begin(), F.end(), Fs->begin() + t * d * w);
  }
  if (S_end && h.hla2) std::copy(S.begin(), S.end(), S_end);
  if (F_end) std::copy(F.begin(), F.end(), F_end);
}

// R_j for every j (L x d x w): R_j = ρR_{j+1} + q̃_jȲ_jᵀ, R_{L−1} = R_end + q̃Ȳᵀ (R_end: the final state's upstream; null: zero).
// Y has L rows, or more for backward_pad_nan (its last chunk padded, run()): rows past L have q̃ = 0.
Vec adjoint(const Head& h, const Vec& Y, double rho, const double* R_end) {
  const int64_t d = h.d, w = h.w, dw = d * w, rows = static_cast<int64_t>(Y.size()) / w;
  Vec R(at(h.L * dw));
  if (!bug("backward_nan_leak")) {
    Vec cur(at(dw)), zero(at(d));
    if (R_end) std::copy(R_end, R_end + dw, cur.begin());
    for (int64_t j = rows - 1; j >= 0; --j) {
      const double* qj = j < h.L ? &h.q[at(j * d)] : zero.data();
      decay_add_outer(cur.data(), j == rows - 1 ? 1.0 : rho, qj, &Y[at(j * w)], d, w);  // R_{L−1} = R_end + …
      keep_adjoint(h, cur);
      if (j < h.L) std::copy(cur.begin(), cur.end(), R.begin() + j * dw);
    }
    return R;
  }
  // The leak: per chunk, R_j = ρ^(c1−j)R_{c1} + Σ_{t in chunk} [t ≥ j]·ρ^(t−j)·q̃_tȲ_tᵀ, masked by multiplying.
  constexpr int64_t C = kChunk;
  Vec carry(at(dw));
  for (int64_t c0 = (h.L - 1) / C * C; c0 >= 0; c0 -= C) {
    const int64_t c1 = std::min(h.L, c0 + C);
    for (int64_t j = c0; j < c1; ++j) {
      double* Rj = &R[at(j * dw)];
      for (int64_t x = 0; x < dw; ++x) Rj[x] = std::pow(rho, static_cast<double>(c1 - j)) * carry[at(x)];
      for (int64_t t = c0; t < c1; ++t) {
        const double m = (t >= j ? 1.0 : 0.0) * std::pow(rho, static_cast<double>(std::max<int64_t>(t - j, 0)));
        for (int64_t r = 0; r < d; ++r)
          for (int64_t c = 0; c < w; ++c) Rj[r * w + c] += m * h.q[at(t * d + r)] * Y[at(t * w + c)];
      }
    }
    std::copy(R.begin() + c0 * dw, R.begin() + (c0 + 1) * dw, carry.begin());
  }
  return R;
}

// backward_dq_chunk_carry: dq̃_t's term F_tȲ_t by chunks [c0, c0 + C), as a chunked kernel forms it from the
// carry F_{c0−1} into the chunk (F0, or zero, for the first) and the chunk's own tokens (b_i = S_iq̃_i; la1: k_i):
//   F_tȲ_t = ρ^(t−c0+1)·F_{c0−1}Ȳ_t + Σ_{i=c0..t} ρ^(t−i)·b_i⟨v'_i, Ȳ_t⟩,  ρ = γ² (la1: γ).
// The bug: the carry's chunk is computed from t − 1, so the first row of every chunk but the first reads the
// carry into the chunk before it (every other row is right; exact with the index t / C).
void dq_by_chunks(const Head& h, const Vec& Y, const Vec& Fs, const Vec& bs, Vec& dq) {
  const int64_t d = h.d, w = h.w;
  const double rho = h.hla2 ? h.g * h.g : h.g;
  const Vec zero(at(d * w));
  Vec Fy(at(d));
  for (int64_t t = 0; t < h.L; ++t) {
    const int64_t c0 = t / kChunk * kChunk, c = std::max<int64_t>(t - 1, 0) / kChunk;  // the bug: c = t / kChunk
    const double* carry = c == 0 ? (h.F0 ? h.F0 : zero.data()) : &Fs[at((c * kChunk - 1) * d * w)];
    const double* y = &Y[at(t * w)];
    Fy.assign(at(d), 0);
    add_matvec(carry, y, d, w, Fy.data());
    const double a = std::pow(rho, static_cast<double>(t - c0 + 1));
    for (int64_t r = 0; r < d; ++r) dq[at(t * d + r)] += a * Fy[at(r)];
    for (int64_t i = c0; i <= t; ++i) {
      double vy = 0;
      for (int64_t x = 0; x < w; ++x) vy += h.v[at(i * w + x)] * y[x];
      const double* b = h.hla2 ? &bs[at(i * d)] : &h.k[at(i * d)];
      const double f = std::pow(rho, static_cast<double>(t - i)) * vy;
      for (int64_t r = 0; r < d; ++r) dq[at(t * d + r)] += f * b[r];
    }
  }
}

// dX_end: the upstream of the final state (null: zero); dX0: ∂L/∂(the initial state) (null: not wanted),
// both in the state layout (state_size).
void backward(const Head& h, const Vec& Y, Vec& dq, Vec& dk, Vec& dv, const double* dX_end = nullptr, double* dX0 = nullptr) {
  const int64_t d = h.d, w = h.w, L = h.L, dS = h.hla2 ? d * d : 0;
  Vec num, Fs(at(L * d * w)), Ss, bs;
  if (h.hla2) Ss.resize(at(L * d * d)), bs.resize(at(L * d));
  forward(h, num, &Fs, h.hla2 ? &Ss : nullptr, &bs);
  if (bug("backward_dq_chunk_carry")) dq_by_chunks(h, Y, Fs, bs, dq);
  else
    for (int64_t t = 0; t < L; ++t) add_matvec(&Fs[at(t * d * w)], &Y[at(t * w)], d, w, &dq[at(t * d)]);
  const double rho = h.hla2 && !bug("backward_decay_power") ? h.g * h.g : h.g;
  const Vec R = adjoint(h, Y, rho, dX_end ? dX_end + dS : nullptr);
  // ∂L/∂X0 of a state member with adjoint A_0 (A_L = its upstream when L = 0), decayed by c.
  auto initial = [&](double* out, const double* A0, const double* end, int64_t size, double c) {
    for (int64_t x = 0; x < size; ++x) out[x] = bug("backward_state_dropped") ? 0.0 : L > 0 ? c * A0[x] : end ? end[x] : 0.0;
  };
  if (dX0) initial(dX0 + dS, R.data(), dX_end ? dX_end + dS : nullptr, d * w, rho);
  if (!h.hla2) {
    for (int64_t j = 0; j < L; ++j) {
      add_matvec(&R[at(j * d * w)], &h.v[at(j * w)], d, w, &dk[at(j * d)]);
      add_matTvec(&R[at(j * d * w)], &h.k[at(j * d)], d, w, &dv[at(j * w)]);
    }
    return;
  }
  Vec M(at(d * d)), gj(at(d));
  if (dX_end) std::copy(dX_end, dX_end + dS, M.begin());
  for (int64_t j = L - 1; j >= 0; --j) {
    const double* Rj = &R[at(j * d * w)];
    add_matTvec(Rj, &bs[at(j * d)], d, w, &dv[at(j * w)]);
    gj.assign(at(d), 0);
    add_matvec(Rj, &h.v[at(j * w)], d, w, gj.data());
    add_matvec(&Ss[at(j * d * d)], gj.data(), d, d, &dq[at(j * d)]);
    decay_add_outer(M.data(), j == L - 1 ? 1.0 : h.g, gj.data(), &h.q[at(j * d)], d, d);
    keep_adjoint(h, M);
    add_matvec(M.data(), &h.k[at(j * d)], d, d, &dk[at(j * d)]);
    if (!bug("backward_dk_no_cross")) add_matTvec(M.data(), &h.k[at(j * d)], d, d, &dk[at(j * d)]);
  }
  if (dX0) initial(dX0, M.data(), dX_end, dS, h.g);
}

bool refuse(const hla_problem* p, char* err, size_t err_len, bool backward) {
  hla_problem c = *p;
  alignas(64) static double dummy;
  if (backward) c.out = &dummy, c.den = nullptr;  // the backward gets no output buffers
  const char* why = zoo::unsupported(&c, kInfo);
  if (!why && backward && (p->state_out || (p->state_in && !kState))) why = "no state in a backward call";
  if (why && err && err_len) std::snprintf(err, err_len, "%s: %s", kInfo.name, why);
  return why != nullptr;
}

// The forward (dout == nullptr) or the backward of every head and sequence;
// the state's upstream dX_end and gradient dX0 as in backward() (null: none).
int run(const hla_problem* p, const void* dout, const double* dden, void* dq_out, void* dk_out, void* dv_out,
        const double* dX_end = nullptr, double* dX0 = nullptr) {
  const int64_t n = p->n, d = p->d, dv = p->dv, w = dv + 1, group = p->heads / p->kv_heads;
  const int64_t nseq = p->offsets ? p->num_offsets - 1 : 1, X = state_size(p);
  Vec q, k, v, num, Y, dq, dk, dv_, gk(at(p->batch * p->kv_heads * n * d)), gv(at(p->batch * p->kv_heads * n * dv));
  // backward_dstate_next_seq: each sequence's ∂L/∂X0 into `own` first; the bug hands them out below.
  Vec own, leak;  // leak: backward_varlen_leak's adjoint of the sequence after this one
  double* dX0_own = dX0;
  if (kDstateNext && dX0) own.assign(at(p->batch * p->heads * nseq * X), 0), dX0_own = own.data();
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads; ++h) {
      const int64_t hk = h / group;
      leak.clear();
      for (int64_t s = nseq - 1; s >= 0; --s) {  // last to first, as one reverse pass over the packed row would go
        const int64_t t0 = p->offsets ? p->offsets[s] : 0, L = (p->offsets ? p->offsets[s + 1] : n) - t0;
        q.assign(at(L * d), 0), k.assign(at(L * d), 0), v.assign(at(L * w), 0);
        for (int64_t t = 0; t < L; ++t) {
          const size_t qi = at(((b * p->heads + h) * n + t0 + t) * d), ki = at(((b * p->kv_heads + hk) * n + t0 + t) * d),
                       vi = at(((b * p->kv_heads + hk) * n + t0 + t) * dv);
          for (int64_t c = 0; c < d; ++c)
            q[at(t * d + c)] = p->scale * zoo::load<double>(p->q, p->dtype, qi + at(c)),
                       k[at(t * d + c)] = zoo::load<double>(p->k, p->dtype, ki + at(c));
          for (int64_t c = 0; c < dv; ++c) v[at(t * w + c)] = zoo::load<double>(p->v, p->dtype, vi + at(c));
          v[at(t * w + dv)] = 1;
        }
        // This (batch, head, sequence)'s state, la1: P; hla2: S then F.
        const size_t st = at(((b * p->heads + h) * nseq + s) * X), dS = at(p->variant == HLA_HLA2 ? d * d : 0);
        const double* X0 = p->state_in ? p->state_in + st : nullptr;
        const Head hd{p->variant == HLA_HLA2, p->gamma, L, d, w, q, k, v, X0, X0 ? X0 + dS : nullptr,
                      bug("backward_bf16_accum") && p->dtype == HLA_BF16};
        double* X_end = p->state_out ? p->state_out + st : nullptr;
        forward(hd, num, nullptr, nullptr, nullptr, X_end, X_end ? X_end + dS : nullptr);
        const size_t row0 = at((b * p->heads + h) * n + t0);
        if (!dout) {
          for (int64_t t = 0; t < L; ++t) {
            const double den = num[at(t * w + dv)];
            for (int64_t c = 0; c < dv; ++c)
              zoo::store(p->out, p->dtype, (row0 + at(t)) * at(dv) + at(c), zoo::normalize(p, num[at(t * w + c)], den));
            if (p->den) p->den[row0 + at(t)] = den;
          }
          continue;
        }
        // backward_pad_nan: Ȳ of the sequence padded to a multiple of the chunk, as its chunked reverse pass reads
        // it. A padded row's do, dden and num load as 0 (masked loads) and so does the normalizer D the forward
        // saved per real row, so with normalize its Ȳ = 0/0 = NaN; the pass counts on q̃ = 0 to cancel padded
        // rows (adjoint()), but 0·NaN = NaN, and the NaN runs back through the adjoint to every token.
        const int64_t rows = bug("backward_pad_nan") ? (L + kChunk - 1) / kChunk * kChunk : L;
        Y.assign(at(rows * w), 0);
        for (int64_t t = 0; t < rows; ++t) {
          const bool pad = t >= L;
          double* y = &Y[at(t * w)];
          const double den = pad ? 0 : num[at(t * w + dv)];
          const bool clamp = p->eps_mode == HLA_EPS_CLAMP, held = clamp && std::abs(den) < p->eps;
          const double D = pad ? 0 : clamp ? (den < 0 ? -1.0 : 1.0) * std::max(std::abs(den), p->eps) : den + p->eps;
          double dot = 0;
          for (int64_t c = 0; c < dv && !pad; ++c) {
            const double o = zoo::load<double>(dout, p->dtype, (row0 + at(t)) * at(dv) + at(c));
            y[c] = p->normalize ? o / D : o;
            dot += o * num[at(t * w + c)];
          }
          for (int64_t c = 0; c < dv && pad; ++c) y[c] = p->normalize ? 0 / D : 0;  // do = 0
          y[dv] = (dden && !pad ? dden[row0 + at(t)] : 0) - (p->normalize && !held ? dot / (D * D) : 0);
        }
        dq.assign(at(L * d), 0), dk.assign(at(L * d), 0), dv_.assign(at(L * w), 0);
        const double* up = dX_end ? dX_end + st : nullptr;
        double* d0 = dX0_own ? dX0_own + st : nullptr;
        // backward_varlen_leak: the reverse pass runs over the packed row as one sequence: the adjoints are not
        // reset at the sequence's end, they start from those the sequence after it ends with (∂L/∂X0 of that
        // one: ρR, γM; the forward resets its state right).
        Vec next;
        if (bug("backward_varlen_leak")) {
          if (!leak.empty()) up = leak.data();
          next.assign(at(X), 0), d0 = next.data();
        }
        backward(hd, Y, dq, dk, dv_, up, d0);
        if (bug("backward_varlen_leak")) leak = std::move(next);
        const size_t kv0 = at((b * p->kv_heads + hk) * n + t0);
        const bool overwrite = bug("backward_gqa_unsummed");  // the bug: the group's last query head wins
        for (int64_t t = 0; t < L; ++t) {
          for (int64_t c = 0; c < d; ++c) {
            zoo::store(dq_out, p->dtype, (row0 + at(t)) * at(d) + at(c), p->scale * dq[at(t * d + c)]);
            double& x = gk[(kv0 + at(t)) * at(d) + at(c)];
            x = (overwrite ? 0 : x) + dk[at(t * d + c)];
          }
          for (int64_t c = 0; c < dv; ++c) {
            double& x = gv[(kv0 + at(t)) * at(dv) + at(c)];
            x = (overwrite ? 0 : x) + dv_[at(t * w + c)];
          }
        }
      }
    }
  // backward_dstate_next_seq: sequence i (over batch entries and packed sequences, per head) gets the ∂L/∂X0 of
  // sequence i + 1, the last its own: an off-by-one in the sequence index of the dstate store.
  // backward_dstate_next_packed: the same within each batch row (its packed sequences; a row's last keeps its own).
  const int64_t N = p->batch * nseq;
  for (int64_t i = 0; i < N && !own.empty(); ++i)
    for (int64_t h = 0; h < p->heads; ++h) {
      const int64_t j = bug("backward_dstate_next_packed") ? i / nseq * nseq + std::min(i % nseq + 1, nseq - 1) : std::min(i + 1, N - 1);
      auto slot = [&](int64_t seq) { return at(((seq / nseq * p->heads + h) * nseq + seq % nseq) * X); };
      std::copy(own.begin() + static_cast<std::ptrdiff_t>(slot(j)), own.begin() + static_cast<std::ptrdiff_t>(slot(j) + at(X)),
                dX0 + slot(i));
    }
  if (dout) {
    for (size_t i = 0; i < gk.size(); ++i) zoo::store(dk_out, p->dtype, i, gk[i]);
    for (size_t i = 0; i < gv.size(); ++i) zoo::store(dv_out, p->dtype, i, gv[i]);
  }
  return 0;
}

}  // namespace

extern "C" {

ZOO_EXPORT const hla_impl_info* hla_impl_info_get(void) { return &kInfo; }

ZOO_EXPORT int hla_impl_run(const hla_problem* p, char* err, size_t err_len) {
  if (!p || refuse(p, err, err_len, false)) return 1;
  return run(p, nullptr, nullptr, nullptr, nullptr, nullptr);
}

ZOO_EXPORT int hla_impl_run_backward(const hla_problem* p, const void* dout, const double* dden, void* dq, void* dk, void* dv,
                                     char* err, size_t err_len) {
  if (!p || refuse(p, err, err_len, true)) return 1;
  if (p->n > 0 && (!dout || !dq || !dk || !dv)) {
    if (err && err_len) std::snprintf(err, err_len, "%s: missing dout, dq, dk or dv", kInfo.name);
    return 1;
  }
  return run(p, dout, dden, dq, dk, dv);
}

ZOO_EXPORT int64_t hla_impl_state_size(const hla_problem* p) { return kState && p ? state_size(p) : 0; }

ZOO_EXPORT int hla_impl_run_backward_state(const hla_problem* p, const void* dout, const double* dden, const double* dstate_out,
                                           void* dq, void* dk, void* dv, double* dstate_in, char* err, size_t err_len) {
  if (!kState) {
    if (err && err_len) std::snprintf(err, err_len, "%s: no state", kInfo.name);
    return 1;
  }
  if (!p || refuse(p, err, err_len, true)) return 1;
  if (p->n > 0 && (!dout || !dq || !dk || !dv)) {
    if (err && err_len) std::snprintf(err, err_len, "%s: missing dout, dq, dk or dv", kInfo.name);
    return 1;
  }
  return run(p, dout, dden, dq, dk, dv, dstate_out, dstate_in);
}

}  // extern "C"
