// zoo_state_difference.cpp — the bug zoo's hla2 in the paper's state-difference
// form: correct, and the kind of kernel whose accuracy is judged
// against the unmasked magnitude (form_class STATE_DIFFERENCE).
//
// What a user who follows the paper writes (Alg. 1, with the decay of the
// masked correction as SPEC §3 corrects erratum E1). Per head:
//   S_t = γS_{t−1} + k_t k_tᵀ,   C_t = γC_{t−1} + q_t v_tᵀ,   m_t = γm_{t−1} + q_t,
//   G_t = γ²G_{t−1} + γ k_t (k_tᵀC_{t−1}),   h_t = γ²h_{t−1} + γ k_t (k_tᵀm_{t−1}),
//   u = q_tᵀS_t + λq_tᵀ,   num_t = u·C_t − q_tᵀG_t,   den_t = u·m_t − q_tᵀh_t.
// Unmasked drops G and h. u·C_t sums every pair (i, j ≤ t) and q_tᵀG_t takes
// the pairs i > j away again, so the result is exact in exact arithmetic but
// its rounding error scales with the unmasked magnitude — an accuracy loss the
// masked forms (zoo_impl.cpp) do not have, hence the declared class.
//
// Built twice: ZOO_BUG=correct_state_difference computes in float (precision
// "f32", like the other zoo members), correct_state_difference_f64 in double
// ("f64"). As in zoo_impl.cpp, every value row gets a trailing 1 (v' = [v | 1])
// so that C|m and G|h are one d × (dv+1) matrix each and the last output column
// is den. Independent of the project's reference library on purpose.

#include "hla_impl.h"
#include "zoo_abi.hpp"

#include <cstdio>
#include <string_view>
#include <type_traits>
#include <vector>


namespace {

constexpr std::string_view kMember = ZOO_STR(ZOO_BUG);
static_assert(kMember == "correct_state_difference" || kMember == "correct_state_difference_f64",
              "ZOO_BUG names no member built from zoo_state_difference.cpp");
constexpr bool kF64 = kMember == "correct_state_difference_f64";
using T = std::conditional_t<kF64, double, float>;  // inputs, states, products, sums, normalization

constexpr uint32_t kAllDtypes = (1u << HLA_F64) | (1u << HLA_F32) | (1u << HLA_BF16) | (1u << HLA_F16);
constexpr uint32_t kFeatures = HLA_FEAT_UNMASKED | HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP | HLA_FEAT_DECAY | HLA_FEAT_RIDGE |
                               HLA_FEAT_SCALE | HLA_FEAT_GQA | HLA_FEAT_VARLEN | HLA_FEAT_STATE | HLA_FEAT_DEN;

const hla_impl_info kInfo = {
    HLA_IMPL_ABI_VERSION, "zoo_" ZOO_STR(ZOO_BUG), 1u << HLA_HLA2, kAllDtypes, kFeatures, 4096, 256, 256,
    kF64 ? "f64" : "f32", HLA_CLASS_STATE_DIFFERENCE, nullptr,
};

// State per (batch, head, sequence), in doubles (exact for float): S (d x d), C|m (d x w), G|h (d x w).
int64_t state_size(int64_t d, int64_t w) { return d * d + 2 * d * w; }

// M (rows x cols) = g·M + s·a bᵀ
void decay_add_outer(T* M, T g, T s, const T* a, const T* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) M[r * cols + c] = g * M[r * cols + c] + s * a[r] * b[c];
}

// y (cols) = xᵀ·M   (M rows x cols)
void vecmat(const T* x, const T* M, int64_t rows, int64_t cols, T* y) {
  for (int64_t c = 0; c < cols; ++c) y[c] = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[c] += x[r] * M[r * cols + c];
}

// One sequence of one head: q (scaled), k are L x d, v is L x w (w = dv + 1, last column 1).
// num (L x w) gets num_t | den_t; st holds S, C|m, G|h and is carried across calls.
void run_head(bool masked, T g, T lambda, const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
              int64_t L, int64_t d, int64_t w, T* st, T* num) {
  T *S = st, *C = st + d * d, *G = C + d * w;
  std::vector<T> kC(static_cast<size_t>(w)), u(static_cast<size_t>(d)), qG(static_cast<size_t>(w));
  for (int64_t t = 0; t < L; ++t) {
    const T *qt = &q[static_cast<size_t>(t * d)], *kt = &k[static_cast<size_t>(t * d)], *vt = &v[static_cast<size_t>(t * w)];
    if (masked) {  // G|h first: it needs C_{t−1}|m_{t−1}
      vecmat(kt, C, d, w, kC.data());
      decay_add_outer(G, g * g, g, kt, kC.data(), d, w);
    }
    decay_add_outer(S, g, T(1), kt, kt, d, d);
    decay_add_outer(C, g, T(1), qt, vt, d, w);
    vecmat(qt, S, d, d, u.data());  // qᵀS (S is symmetric)
    for (int64_t r = 0; r < d; ++r) u[static_cast<size_t>(r)] += lambda * qt[r];
    T* out = num + t * w;
    vecmat(u.data(), C, d, w, out);  // (qᵀS + λqᵀ) C|m
    if (masked) {                    // − qᵀ G|h
      vecmat(qt, G, d, w, qG.data());
      for (int64_t c = 0; c < w; ++c) out[c] -= qG[static_cast<size_t>(c)];
    }
  }
}

int run(const hla_problem* p, char* err, size_t err_len) {
  if (const char* why = zoo::unsupported(p, kInfo)) {
    if (err && err_len) std::snprintf(err, err_len, "%s: %s", kInfo.name, why);
    return 1;
  }
  const int64_t n = p->n, d = p->d, dv = p->dv, w = dv + 1, size = state_size(d, w);
  const int64_t nseq = p->offsets ? p->num_offsets - 1 : 1;
  const auto g = static_cast<T>(p->gamma), lambda = static_cast<T>(p->lambda), scale = static_cast<T>(p->scale);
  std::vector<T> st(static_cast<size_t>(size)), q, k, v, num;
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t h = 0; h < p->heads; ++h) {
      const int64_t hk = h / (p->heads / p->kv_heads);
      for (int64_t s = 0; s < nseq; ++s) {
        const int64_t t0 = p->offsets ? p->offsets[s] : 0, t1 = p->offsets ? p->offsets[s + 1] : n, L = t1 - t0;
        const size_t base = static_cast<size_t>(((b * p->heads + h) * nseq + s) * size);
        for (size_t x = 0; x < st.size(); ++x) st[x] = p->state_in ? static_cast<T>(p->state_in[base + x]) : T(0);
        q.resize(static_cast<size_t>(L * d)), k.resize(static_cast<size_t>(L * d)), v.resize(static_cast<size_t>(L * w));
        for (int64_t t = 0; t < L; ++t) {
          const auto qi = static_cast<size_t>(((b * p->heads + h) * n + t0 + t) * d);
          const auto ki = static_cast<size_t>(((b * p->kv_heads + hk) * n + t0 + t) * d);
          const auto vi = static_cast<size_t>(((b * p->kv_heads + hk) * n + t0 + t) * dv);
          for (int64_t c = 0; c < d; ++c) {
            q[static_cast<size_t>(t * d + c)] = scale * zoo::load<T>(p->q, p->dtype, qi + static_cast<size_t>(c));
            k[static_cast<size_t>(t * d + c)] = zoo::load<T>(p->k, p->dtype, ki + static_cast<size_t>(c));
          }
          for (int64_t c = 0; c < dv; ++c) v[static_cast<size_t>(t * w + c)] = zoo::load<T>(p->v, p->dtype, vi + static_cast<size_t>(c));
          v[static_cast<size_t>(t * w + dv)] = 1;
        }
        num.assign(static_cast<size_t>(L * w), T(0));
        run_head(p->masked != 0, g, lambda, q, k, v, L, d, w, st.data(), num.data());
        for (int64_t t = 0; t < L; ++t) {
          const size_t row = static_cast<size_t>((b * p->heads + h) * n + t0 + t);
          const T den = num[static_cast<size_t>(t * w + dv)];
          for (int64_t c = 0; c < dv; ++c)
            zoo::store(p->out, p->dtype, row * static_cast<size_t>(dv) + static_cast<size_t>(c),
                       zoo::normalize(p, num[static_cast<size_t>(t * w + c)], den));
          if (p->den) p->den[row] = den;
        }
        if (p->state_out)
          for (size_t x = 0; x < st.size(); ++x) p->state_out[base + x] = st[x];
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

ZOO_EXPORT int64_t hla_impl_state_size(const hla_problem* p) { return p ? state_size(p->d, p->dv + 1) : 0; }

}  // extern "C"
