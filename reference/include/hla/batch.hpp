// Problems shaped as real kernels take them (SPEC §8): batch × heads × tokens
// × dim, K/V shared by groups of query heads (MQA/GQA), optionally packed
// variable-length sequences. Values are stored as doubles: every f32, bf16 and
// f16 value is exactly a double, so one container holds any input dtype
// exactly as the candidate saw it.
#pragma once

#include "hla/dtype.hpp"
#include "hla/problem.hpp"
#include "hla/state.hpp"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace hla {

// Shape limits (BatchProblem::validate): far above any kernel's shapes, low
// enough that every product of dims fits in 64 bits and work stays tied to data.
inline constexpr Index kMaxBatchHeads = Index{1} << 24;  // batch, heads, kv_heads and batch·heads
inline constexpr Index kMaxTokens = Index{1} << 31;      // n
inline constexpr Index kMaxDim = Index{1} << 16;         // d, dv
inline constexpr Index kMaxElements = Index{1} << 40;    // batch·heads·n·max(d, dv)

struct BatchProblem {
  Options opt;
  DType dtype = DType::f32;  // storage type of q, k, v
  Index batch = 1, heads = 1, kv_heads = 1, n = 0, d = 1, dv = 1;
  std::vector<double> q;  // [batch][heads][n][d]
  std::vector<double> k;  // [batch][kv_heads][n][d]
  std::vector<double> v;  // [batch][kv_heads][n][dv]
  // Packed variable-length sequences (cu_seqlens): empty, or 0 = o_0 < … < o_m = n
  // with batch == 1; each [o_i, o_{i+1}) is an independent sequence.
  std::vector<int64_t> offsets;
  // Optional initial states (SPEC §8, state.hpp): empty (every sequence starts
  // from zero), or per sequence (batch entry, or packed sequence) and query
  // head the members of state_layout(opt, d, dv) in order, each row-major
  // rows × width(): [sequences][heads][state_size]. Exact values of state_dtype.
  std::vector<double> state;
  DType state_dtype = DType::f32;

  // Throws InputError naming the problem: options, dims < 1 or above the
  // limits above, heads not a multiple of kv_heads, buffer sizes, offsets, values not representable in
  // dtype. Non-finite values are allowed only with allow_nonfinite.
  void validate(bool allow_nonfinite = false) const;

  Index kv_head_of(Index h) const { return h / (heads / kv_heads); }
  // Sequences of one batch entry: [begin, end) token ranges.
  std::vector<std::pair<Index, Index>> sequences() const;
  size_t q_index(Index b, Index h, Index t, Index c) const { return static_cast<size_t>(((b * heads + h) * n + t) * d + c); }
  size_t k_index(Index b, Index h, Index t, Index c) const { return static_cast<size_t>(((b * kv_heads + kv_head_of(h)) * n + t) * d + c); }
  size_t v_index(Index b, Index h, Index t, Index c) const { return static_cast<size_t>(((b * kv_heads + kv_head_of(h)) * n + t) * dv + c); }
  size_t out_index(Index b, Index h, Index t, Index c) const { return static_cast<size_t>(((b * heads + h) * n + t) * dv + c); }
  size_t den_index(Index b, Index h, Index t) const { return static_cast<size_t>((b * heads + h) * n + t); }

  // Sizes q, k, v (zero-filled) for the current dims.
  void resize_buffers() {
    q.assign(static_cast<size_t>(batch * heads * n * d), 0);
    k.assign(static_cast<size_t>(batch * kv_heads * n * d), 0);
    v.assign(static_cast<size_t>(batch * kv_heads * n * dv), 0);
  }
  // Batch entries bs and query heads hs with kv_heads K/V heads, their initial
  // state with them: new query head i reads the K/V head of hs[i - i % group]
  // (hs lists the heads group by group, each group's heads sharing one K/V head).
  BatchProblem subset(const std::vector<Index>& bs, const std::vector<Index>& hs, Index kv_heads) const;
  // The same selection of anything laid out like `state`, [sequence][head][size]
  // (a state's gradient, its magnitudes or flags); empty stays empty.
  template <class T>
  std::vector<T> state_subset(const std::vector<T>& x, const std::vector<Index>& bs, const std::vector<Index>& hs) const {
    if (x.empty()) return x;
    const size_t size = x.size() / static_cast<size_t>(sequence_count() * heads);
    std::vector<T> out;
    for (Index b : bs)  // b's sequences: itself, or every packed one (one batch entry)
      for (Index seq = offsets.empty() ? b : 0; seq < (offsets.empty() ? b + 1 : sequence_count()); ++seq)
        for (Index h : hs) {
          const auto at = x.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(seq * heads + h) * size);
          out.insert(out.end(), at, at + static_cast<std::ptrdiff_t>(size));
        }
    return out;
  }
  // Number of sequences: batch entries, or packed sequences.
  Index sequence_count() const { return offsets.empty() ? batch : static_cast<Index>(offsets.size()) - 1; }
  // The sequence index of batch entry b's sequence starting at token t0.
  Index sequence_of(Index b, Index t0) const;
  bool has_state() const { return !state.empty(); }
  // Head h's initial state of sequence seq, entry (r, c) of member i: at(i, r, c).
  struct StateView {
    std::vector<StatePart> layout;
    const double* values = nullptr;  // null: no state (zero)
    std::vector<size_t> start;       // offset of each member
    double at(size_t i, Index r, Index c) const {
      return values ? values[start[i] + static_cast<size_t>(r * layout[i].width() + c)] : 0.0;
    }
  };
  StateView state_view(Index seq, Index h) const {
    StateView v;
    v.layout = state_layout(opt, d, dv);
    size_t at = static_cast<size_t>((seq * heads + h) * state_size(v.layout));
    for (const StatePart& m : v.layout) v.start.push_back(at), at += static_cast<size_t>(m.size());
    if (has_state()) v.values = state.data();
    return v;
  }
  // Calls f(seq, h, member, r, c, at) for every entry of the state layout, in
  // order: c a column of the member (its ones column: c = cols), `at` its index
  // in `state` (or in anything laid out like it: a state's gradient).
  template <class F> void for_each_state_entry(F&& f) const {
    for (Index seq = 0; seq < sequence_count(); ++seq)
      for (Index h = 0; h < heads; ++h)
        for_each_state_entry(seq, h, [&](size_t i, Index r, Index c, size_t at) { f(seq, h, i, r, c, at); });
  }
  // The same for sequence seq's head h alone: f(member, r, c, at).
  template <class F> void for_each_state_entry(Index seq, Index h, F&& f) const {
    const StateView X = state_view(seq, h);
    for (size_t i = 0; i < X.layout.size(); ++i)
      for (Index r = 0; r < X.layout[i].rows; ++r)
        for (Index c = 0; c < X.layout[i].width(); ++c) f(i, r, c, X.start[i] + static_cast<size_t>(r * X.layout[i].width() + c));
  }
  // The state of batch entry b's sequence starting at t0, head h; no members when there is none.
  StateView state_of(Index b, Index h, Index t0) const { return has_state() ? state_view(sequence_of(b, t0), h) : StateView{}; }
  // The same as matrices in layout order; zero when has_state() is false.
  template <class S> StateMats<S> head_state(Index seq, Index h) const {
    const StateView v = state_view(seq, h);
    StateMats<S> X;
    for (size_t i = 0; i < v.layout.size(); ++i) {
      Mat<S> m(v.layout[i].rows, v.layout[i].width());
      for (Index r = 0; r < m.rows(); ++r)
        for (Index c = 0; c < m.cols(); ++c) m(r, c) = convert(v.at(i, r, c), S());
      X.push_back(std::move(m));
    }
    return X;
  }
  bool all_finite() const;  // no NaN/Inf in q, k, v or the state
  bool head_finite(Index b, Index h, Index t0, Index t1) const;  // the same, for one head's tokens [t0, t1)
  // Calls f(b, h, t0, t1) for every batch entry, query head and sequence.
  template <class F> void for_each_sequence(F&& f) const {
    const auto seqs = sequences();
    for (Index b = 0; b < batch; ++b)
      for (Index h = 0; h < heads; ++h)
        for (const auto& [t0, t1] : seqs) f(b, h, t0, t1);
  }

  // One head's sequence [t0, t1) as a single-head problem, converted exactly
  // (Rational) or rounded once (other S).
  template <class S> Problem<S> head(Index b, Index h, Index t0, Index t1) const {
    Problem<S> p{opt, Mat<S>(t1 - t0, d), Mat<S>(t1 - t0, d), Mat<S>(t1 - t0, dv)};
    for (Index t = t0; t < t1; ++t) {
      for (Index c = 0; c < d; ++c) {
        p.q(t - t0, c) = convert(q[q_index(b, h, t, c)], S());
        p.k(t - t0, c) = convert(k[k_index(b, h, t, c)], S());
      }
      for (Index c = 0; c < dv; ++c) p.v(t - t0, c) = convert(v[v_index(b, h, t, c)], S());
    }
    return p;
  }

  // A stored value in S: exact (Rational, double, f113) or rounded once (the others).
  template <class S> static S convert(double x, S) {
    if constexpr (std::is_same_v<S, Rational>) return to_rational(x);
    else if constexpr (std::is_same_v<S, double> || std::is_same_v<S, f113>) return S(x);  // exact
    else if constexpr (std::is_same_v<S, float>) return static_cast<float>(x);  // IEEE: rounded once
    else if (!std::isfinite(x)) return S(static_cast<float>(x));
    else return from_rational<S>(to_rational(x));  // one rounding, not double → float → S
  }
};

}  // namespace hla
