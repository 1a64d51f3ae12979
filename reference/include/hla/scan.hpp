// Scan machinery over any associative operator with an identity (SPEC §4,
// paper Thm 4.1 / Remark 4.2). Knows nothing of HLA.
//
// An operator `op` provides
//   typename Op::Summary;
//   Summary op.identity() const;                       // the empty segment
//   Summary op.combine(const Summary& A, const Summary& B) const;  // A then B
#pragma once

#include <cstddef>
#include <stdexcept>
#include <vector>

namespace hla::scan {

template <class Op> using SummaryOf = typename Op::Summary;

// Left fold of a range; the identity for an empty one.
template <class Op, class It> SummaryOf<Op> reduce(const Op& op, It first, It last) {
  SummaryOf<Op> acc = op.identity();
  for (; first != last; ++first) acc = op.combine(acc, *first);
  return acc;
}

// Serial left fold: out[t] = T_0 ⊕ … ⊕ T_t.
template <class Op> std::vector<SummaryOf<Op>> inclusive_fold(const Op& op, const std::vector<SummaryOf<Op>>& tok) {
  std::vector<SummaryOf<Op>> out;
  out.reserve(tok.size());
  SummaryOf<Op> acc = op.identity();
  for (const auto& x : tok) out.push_back(acc = op.combine(acc, x));
  return out;
}

// Exclusive Blelloch scan: out[t] = E ⊕ T_0 ⊕ … ⊕ T_{t-1}. The input is padded
// to a power of two with identities; up-sweep builds subtree sums, down-sweep
// hands each right subtree "prefix ⊕ left sum" (order matters: ⊕ is not
// commutative).
template <class Op> std::vector<SummaryOf<Op>> exclusive_blelloch(const Op& op, const std::vector<SummaryOf<Op>>& tok) {
  const size_t n = tok.size();
  if (n == 0) return {};
  size_t m = 1;
  while (m < n) m *= 2;
  std::vector<SummaryOf<Op>> a(tok);
  a.resize(m, op.identity());
  for (size_t s = 1; s < m; s *= 2)
    for (size_t i = 2 * s - 1; i < m; i += 2 * s) a[i] = op.combine(a[i - s], a[i]);
  a[m - 1] = op.identity();
  for (size_t s = m / 2; s >= 1; s /= 2)
    for (size_t i = 2 * s - 1; i < m; i += 2 * s) {
      SummaryOf<Op> left = a[i - s];
      a[i - s] = a[i];
      a[i] = op.combine(a[i], left);
    }
  a.resize(n);
  return a;
}

// Exclusive Blelloch scan, then local inclusion I_t = P_t ⊕ T_t.
template <class Op> std::vector<SummaryOf<Op>> inclusive_blelloch(const Op& op, const std::vector<SummaryOf<Op>>& tok) {
  std::vector<SummaryOf<Op>> out = exclusive_blelloch(op, tok);
  for (size_t t = 0; t < tok.size(); ++t) out[t] = op.combine(out[t], tok[t]);
  return out;
}

// Two-level form: exclusive Blelloch scans inside chunks of width w (the last
// ragged), an exclusive Blelloch scan over the chunk summaries, then
// I_t = carry(c) ⊕ P_t^local ⊕ T_t.
template <class Op>
std::vector<SummaryOf<Op>> inclusive_chunked(const Op& op, const std::vector<SummaryOf<Op>>& tok, size_t w) {
  if (w < 1) throw std::invalid_argument("chunk width must be >= 1");
  const size_t n = tok.size();
  std::vector<SummaryOf<Op>> local(n, op.identity()), chunk_sum;
  for (size_t c0 = 0; c0 < n; c0 += w) {
    const size_t c1 = std::min(n, c0 + w);
    std::vector<SummaryOf<Op>> part(tok.begin() + c0, tok.begin() + c1);
    std::vector<SummaryOf<Op>> ex = exclusive_blelloch(op, part);
    chunk_sum.push_back(op.combine(ex.back(), part.back()));
    for (size_t t = c0; t < c1; ++t) local[t] = std::move(ex[t - c0]);
  }
  const std::vector<SummaryOf<Op>> carry = exclusive_blelloch(op, chunk_sum);
  for (size_t t = 0; t < n; ++t) local[t] = op.combine(op.combine(carry[t / w], local[t]), tok[t]);
  return local;
}

// Fold under an arbitrary bracketing: repeatedly merge the adjacent pair at
// position picks[i] % (size - 1). Every bracketing arises from some picks.
template <class Op>
SummaryOf<Op> reduce_bracketed(const Op& op, std::vector<SummaryOf<Op>> segs, const std::vector<size_t>& picks) {
  if (segs.empty()) return op.identity();
  size_t i = 0;
  while (segs.size() > 1) {
    const size_t k = (i < picks.size() ? picks[i++] : 0) % (segs.size() - 1);
    segs[k] = op.combine(segs[k], segs[k + 1]);
    segs.erase(segs.begin() + static_cast<std::ptrdiff_t>(k) + 1);
  }
  return segs.front();
}

}  // namespace hla::scan
