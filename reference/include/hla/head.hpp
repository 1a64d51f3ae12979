// The per-head working form of a problem that every algorithm reads.
//
// Values carry one extra column of ones: whatever a form computes for that
// column is the denominator (SPEC §1: "the same sum with every v_j replaced by
// 1"), so each form is written once for numerator and denominator together.
#pragma once

#include "hla/problem.hpp"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace hla {

// The logic_error of Head::g for a power beyond the table, out of line so that
// g itself inlines into the forms' inner loops (17% of an hla3 fuzz campaign's
// CPU went to the call when it did not).
[[noreturn]] void throw_beyond_decay_bound(Index e, size_t table_size);

template <class S> struct Head {
  Mat<S> q;  // already multiplied by `scale`
  Mat<S> k;
  Mat<S> v;  // n × (dv + 1); last column all ones
  S gamma;
  S lambda;
  bool masked = true;
  std::vector<S> gpow;  // gpow[e] = γ^e for e ≤ order·(n+1)

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
};

template <class S> Head<S> make_head(const Problem<S>& p) {
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
  return h;
}

// Chunk helpers (SPEC §5), local indices 0..L-1 inside a chunk.
// D(t, j) = γ^(p·(t-j)) for j <= t, else 0: decay-weighted causal mask.
template <class S> Mat<S> decay_mask(const Head<S>& h, Index L, Index p = 1) {
  Mat<S> D = Mat<S>::Zero(L, L);
  for (Index t = 0; t < L; ++t)
    for (Index j = 0; j <= t; ++j) D(t, j) = h.g(p * (t - j));
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
  for (Index t = 0; t < L; ++t) r(t) = h.g(p * (t + 1));
  return r;
}
// γ^(p·(L-1-i)) for i = 0..L-1: decay from token i to the chunk's end.
template <class S> Vec<S> decay_to_end(const Head<S>& h, Index L, Index p = 1) {
  Vec<S> r(L);
  for (Index i = 0; i < L; ++i) r(i) = h.g(p * (L - 1 - i));
  return r;
}

// Calls body(c0, L) for chunks [c0, c0 + L) of width w; the last may be ragged.
template <class F> void for_each_chunk(Index n, Index w, F&& body) {
  for (Index c0 = 0; c0 < n; c0 += w) body(c0, std::min(w, n - c0));
}

}  // namespace hla
