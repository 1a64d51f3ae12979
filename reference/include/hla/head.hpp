// The per-head working form of a problem that every algorithm reads.
//
// Values carry one extra column of ones: whatever a form computes for that
// column is the denominator (SPEC §1: "the same sum with every v_j replaced by
// 1"), so each form is written once for numerator and denominator together.
#pragma once

#include "hla/problem.hpp"

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

namespace hla {

// The logic_error of Head::g for a power beyond the table, out of line so that
// g itself inlines into the forms' inner loops (17% of an hla3 fuzz campaign's
// CPU went to the call when it did not).
[[noreturn]] void throw_beyond_decay_bound(Index e, size_t table_size);

// The scalars that decay in log space can take (Head::lcum): floating point.
template <class S>
inline constexpr bool log_decay_scalar =
    std::is_floating_point_v<S> || std::is_same_v<S, f113> || std::is_same_v<S, bf16> || std::is_same_v<S, f16>;

template <class S> struct Head {
  Mat<S> q;  // already multiplied by `scale`
  Mat<S> k;
  Mat<S> v;  // n × (dv + 1); last column all ones
  S gamma;
  S lambda;
  bool masked = true;
  std::vector<S> gpow;  // gpow[e] = γ^e for e ≤ order·(n+1)
  // Decay in log space (empty: powers of γ from gpow): lcum[m] = the sum of m
  // copies of log γ, accumulated in S as `cumsum(log γ)` is in a kernel.
  std::vector<S> lcum;

  Index n() const { return q.rows(); }
  Index d() const { return q.cols(); }
  Index dv1() const { return v.cols(); }
  // γ^e. Checked: a form that needs a power beyond its variant's order·(n+1)
  // (variants.hpp) is a bug in the form or in the table, not a silent read.
  const S& g(Index e) const {
    if (e < 0 || static_cast<size_t>(e) >= gpow.size()) [[unlikely]]
      throw_beyond_decay_bound(e, gpow.size());
    return gpow[static_cast<size_t>(e)];
  }
  // γ^(p·(t − s)) for −1 ≤ s ≤ t (positions in a sequence, or in a chunk, whose
  // cumulative sum starts at its first token): a power from the table, or in
  // log space exp(p·(lcum[t+1] − lcum[s+1])), as kernels that take exp of a
  // cumulative sum of log γ form it (per sequence or per chunk).
  S span(Index t, Index s, Index p = 1) const { return lcum.empty() ? g(p * (t - s)) : from_log(exponent(t, s), p); }
  // The weight γ^(Σ_k (t − s_k)) of a literal term (hla2: s = i, j; hla3: i, u, j):
  // one power, or exp of the sum of the log-space exponents.
  S weight(Index t, std::initializer_list<Index> s) const {
    if (lcum.empty()) {
      Index e = 0;
      for (Index i : s) e += t - i;
      return g(e);
    }
    S x(0);
    for (Index i : s) x += exponent(t, i);
    return from_log(x);
  }

 private:
  // log γ^(t − s) as the cumulative sum holds it, and exp(p·x) (floating-point S only).
  S exponent(Index t, Index s) const { return lcum[static_cast<size_t>(t + 1)] - lcum[static_cast<size_t>(s + 1)]; }
  S from_log(const S& x, Index p = 1) const {
    if constexpr (!log_decay_scalar<S>) {
      throw std::logic_error("log-space decay in exact arithmetic");
    } else {
      using std::exp;
      return S(exp(p == 1 ? x : S(static_cast<double>(p)) * x));
    }
  }
};

// log_decay: decay weights in log space (Head::lcum), as production chunk
// kernels compute them; floating-point S only.
template <class S> Head<S> make_head(const Problem<S>& p, bool log_decay = false) {
  Head<S> h;
  h.q = p.q * from_rational<S>(p.opt.scale);
  h.k = p.k;
  h.v.resize(p.n(), p.dv() + 1);
  h.v.leftCols(p.dv()) = p.v;
  h.v.col(p.dv()).setOnes();
  h.gamma = from_rational<S>(p.opt.gamma);
  h.lambda = from_rational<S>(p.opt.lambda);
  h.masked = p.opt.masked;
  // Order-p weights reach γ^(p·t), chunk carries γ^(p·w) with w ≤ n, streaming γ^p.
  h.gpow.assign(static_cast<size_t>(order_of(p.opt.variant) * (p.n() + 1) + 1), S(1));
  for (size_t e = 1; e < h.gpow.size(); ++e) h.gpow[e] = h.gpow[e - 1] * h.gamma;
  if constexpr (log_decay_scalar<S>) {
    if (log_decay && h.gamma != S(1)) {
      using std::log;
      const S l = S(log(h.gamma));
      h.lcum.assign(static_cast<size_t>(p.n() + 2), S(0));
      for (size_t m = 1; m < h.lcum.size(); ++m) h.lcum[m] = h.lcum[m - 1] + l;
    }
  }
  return h;
}

// Chunk helpers (SPEC §5), local indices 0..L-1 inside a chunk.
// D(t, j) = γ^(p·(t-j)) for j <= t, else 0: decay-weighted causal mask.
template <class S> Mat<S> decay_mask(const Head<S>& h, Index L, Index p = 1) {
  Mat<S> D = Mat<S>::Zero(L, L);
  for (Index t = 0; t < L; ++t)
    for (Index j = 0; j <= t; ++j) D(t, j) = h.span(t, j, p);
  return D;
}
// Causal 0/1 mask, with (t, t) included or (strict) not.
template <class S> Mat<S> causal_mask(Index L, bool strict = false) {
  Mat<S> M = Mat<S>::Zero(L, L);
  for (Index t = 0; t < L; ++t)
    for (Index j = 0; j < (strict ? t : t + 1); ++j) M(t, j) = S(1);
  return M;
}
// γ^(p·(t+1)) for t = 0..L-1: decay from the carry's last token to token t.
template <class S> Vec<S> decay_from_carry(const Head<S>& h, Index L, Index p = 1) {
  Vec<S> r(L);
  for (Index t = 0; t < L; ++t) r(t) = h.span(t, -1, p);
  return r;
}
// γ^(p·(L-1-i)) for i = 0..L-1: decay from token i to the chunk's end.
template <class S> Vec<S> decay_to_end(const Head<S>& h, Index L, Index p = 1) {
  Vec<S> r(L);
  for (Index i = 0; i < L; ++i) r(i) = h.span(L - 1, i, p);
  return r;
}
// γ^L: the decay of a whole chunk of L tokens (its carry's step).
template <class S> S chunk_decay(const Head<S>& h, Index L) { return h.span(L - 1, -1); }

// Calls body(c0, L) for chunks [c0, c0 + L) of width w; the last may be ragged.
template <class F> void for_each_chunk(Index n, Index w, F&& body) {
  for (Index c0 = 0; c0 < n; c0 += w) body(c0, std::min(w, n - c0));
}

// The literal sum (SPEC §2) of the tokens [lo, t] into row t of Y, as a flat
// kernel adds it: every term formed alone (weight · product of dot products
// A(·,·) = q·k) and added, times v_j, one by one into the row, in the order
// V::terms lists them or reversed. Weights take positions relative to lo (a
// chunk's log-space cumulative sum starts there); ridge: hla2's λ terms too.
template <class V, class S>
void add_literal(const Head<S>& h, const Mat<S>& A, Mat<S>& Y, Index t, Index lo, bool reversed, bool ridge = true) {
  std::vector<std::pair<S, Index>> list;
  V::terms(h, A, t, lo, ridge, [&](const S& c, Index j) { list.emplace_back(c, j); });
  if (reversed) std::reverse(list.begin(), list.end());
  for (const auto& [c, j] : list) Y.row(t) += c * h.v.row(j);
}

// The ground truth (SPEC §2): operator V's literal terms (V::terms) grouped by
// j, each group's sum the weight of v_j.
template <class V, class S> Mat<S> grouped_literal(const Head<S>& h) {
  const Mat<S> A = h.q * h.k.transpose();
  Mat<S> Y = Mat<S>::Zero(h.n(), h.dv1());
  for (Index t = 0; t < h.n(); ++t) {
    Index at = -1;
    S c(0);
    V::terms(h, A, t, 0, true, [&](const S& x, Index j) {
      if (j == at) return void(c += x);
      if (at >= 0) Y.row(t) += c * h.v.row(at);
      c = x, at = j;
    });
    if (at >= 0) Y.row(t) += c * h.v.row(at);
  }
  return Y;
}

// The flat forms of operator V: every output's literal terms, one by one.
template <class V, class S> Mat<S> literal_form(const Head<S>& h, bool reversed) {
  const Mat<S> A = h.q * h.k.transpose();
  Mat<S> Y = Mat<S>::Zero(h.n(), h.dv1());
  for (Index t = 0; t < h.n(); ++t) add_literal<V>(h, A, Y, t, 0, reversed);
  return Y;
}

// chunked_pairs: Y holds the chunked form's terms that reach before the chunk
// (carry, cross, ridge); each chunk's intra-chunk terms are added one by one.
template <class V, class S> Mat<S> add_chunk_pairs(const Head<S>& h, Mat<S> Y, Index w) {
  const Mat<S> A = h.q * h.k.transpose();
  for_each_chunk(h.n(), w, [&](Index c0, Index L) {
    for (Index t = c0; t < c0 + L; ++t) add_literal<V>(h, A, Y, t, c0, false, false);
  });
  return Y;
}

}  // namespace hla
