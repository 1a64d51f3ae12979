#include "hla/batch.hpp"
#include "hla/parallel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hla {

std::vector<std::pair<Index, Index>> BatchProblem::sequences() const {
  if (offsets.empty()) return {{0, n}};
  std::vector<std::pair<Index, Index>> s;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) s.emplace_back(offsets[i], offsets[i + 1]);
  return s;
}

Index BatchProblem::sequence_of(Index b, Index t0) const {
  if (offsets.empty()) return b;
  const auto it = std::lower_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(t0));
  return static_cast<Index>(it - offsets.begin());
}

BatchProblem BatchProblem::subset(const std::vector<Index>& bs, const std::vector<Index>& hs, Index kv) const {
  BatchProblem s = *this;
  s.batch = static_cast<Index>(bs.size()), s.heads = static_cast<Index>(hs.size()), s.kv_heads = kv;
  s.resize_buffers();
  s.state = state_subset(state, bs, hs);
  const Index group = s.heads / kv;
  for (Index b = 0; b < s.batch; ++b)
    for (Index h = 0; h < s.heads; ++h) {
      const Index b0 = bs[static_cast<size_t>(b)], h0 = hs[static_cast<size_t>(h)];
      for (Index t = 0; t < n; ++t) {
        for (Index c = 0; c < d; ++c) s.q[s.q_index(b, h, t, c)] = q[q_index(b0, h0, t, c)];
        if (h % group != 0) continue;
        for (Index c = 0; c < d; ++c) s.k[s.k_index(b, h, t, c)] = k[k_index(b0, h0, t, c)];
        for (Index c = 0; c < dv; ++c) s.v[s.v_index(b, h, t, c)] = v[v_index(b0, h0, t, c)];
      }
    }
  return s;
}

bool BatchProblem::all_finite() const {
  for (const auto* x : {&q, &k, &v, &state})
    for (double e : *x)
      if (!std::isfinite(e)) return false;
  return true;
}

bool BatchProblem::head_finite(Index b, Index h, Index t0, Index t1) const {
  if (has_state()) {
    const StateView X0 = state_view(sequence_of(b, t0), h);
    const size_t end = X0.start.back() + static_cast<size_t>(X0.layout.back().size());
    for (size_t i = X0.start.front(); i < end; ++i)
      if (!std::isfinite(state[i])) return false;
  }
  for (Index t = t0; t < t1; ++t) {
    for (Index c = 0; c < d; ++c)
      if (!std::isfinite(q[q_index(b, h, t, c)]) || !std::isfinite(k[k_index(b, h, t, c)])) return false;
    for (Index c = 0; c < dv; ++c)
      if (!std::isfinite(v[v_index(b, h, t, c)])) return false;
  }
  return true;
}

void BatchProblem::validate(bool allow_nonfinite) const {
  opt.validate();
  auto dim = [](const char* name, Index x, Index lo) {
    if (x < lo) throw InputError(std::string(name) + " = " + std::to_string(x) + " must be >= " + std::to_string(lo));
  };
  dim("batch", batch, 1);
  dim("heads", heads, 1);
  dim("kv_heads", kv_heads, 1);
  dim("n", n, 0);
  dim("d", d, 1);
  dim("dv", dv, 1);
  // Caps, checked before any product is formed, so that no shape arithmetic
  // overflows and a tiny file cannot ask for unbounded work (n = 0 with
  // 2^40 heads would loop 2^40 times over nothing).
  auto cap = [](const char* name, Index x, Index hi) {
    if (x > hi) throw InputError(std::string(name) + " = " + std::to_string(x) + " exceeds the limit of " + std::to_string(hi));
  };
  cap("batch", batch, kMaxBatchHeads);
  cap("heads", heads, kMaxBatchHeads);
  cap("kv_heads", kv_heads, kMaxBatchHeads);
  cap("n", n, kMaxTokens);
  cap("d", d, kMaxDim);
  cap("dv", dv, kMaxDim);
  if (batch * heads > kMaxBatchHeads)
    throw InputError("batch·heads = " + std::to_string(batch * heads) + " exceeds the limit of " + std::to_string(kMaxBatchHeads));
  // batch·heads·n·max(d, dv) < 2^24·2^31·2^16 = 2^71 could overflow: check with the builtin.
  Index elems = 0;
  if (__builtin_mul_overflow(batch * heads * std::max(d, dv), n, &elems) || elems > kMaxElements)
    throw InputError("batch·heads·n·max(d, dv) exceeds the limit of " + std::to_string(kMaxElements) + " elements per tensor");
  if (offsets.size() > static_cast<size_t>(n) + 1)
    throw InputError("offsets holds " + std::to_string(offsets.size()) + " entries, more than n + 1 = " + std::to_string(n + 1));
  if (heads % kv_heads != 0)
    throw InputError("heads = " + std::to_string(heads) + " is not a multiple of kv_heads = " + std::to_string(kv_heads));
  auto size = [&](const char* name, const std::vector<double>& x, Index want) {
    if (static_cast<Index>(x.size()) != want)
      throw InputError(std::string(name) + " holds " + std::to_string(x.size()) + " values, expected " +
                       std::to_string(want));
    const size_t i = first_where(x.size(), [&](size_t j) { return (!allow_nonfinite && !std::isfinite(x[j])) || !representable(dtype, x[j]); });
    if (i == x.size()) return;
    if (!allow_nonfinite && !std::isfinite(x[i])) throw InputError(std::string(name) + "[" + std::to_string(i) + "] is not finite");
    throw InputError(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(x[i]) + " is not representable in " +
                     to_string(dtype));
  };
  size("q", q, batch * heads * n * d);
  size("k", k, batch * kv_heads * n * d);
  size("v", v, batch * kv_heads * n * dv);
  if (!offsets.empty()) {
    if (batch != 1) throw InputError("packed sequences (offsets) need batch = 1, got " + std::to_string(batch));
    if (offsets.size() < 2 || offsets.front() != 0 || offsets.back() != n)
      throw InputError("offsets must start at 0 and end at n = " + std::to_string(n));
    for (size_t i = 0; i + 1 < offsets.size(); ++i)
      if (offsets[i + 1] <= offsets[i])
        throw InputError("offsets must be strictly increasing (offsets[" + std::to_string(i + 1) + "] = " +
                         std::to_string(offsets[i + 1]) + ")");
  }
  if (has_state()) {
    const Index per = state_size(state_layout(opt, d, dv));  // InputError: a variant without a state
    Index want = 0;
    if (__builtin_mul_overflow(sequence_count() * heads, per, &want) || static_cast<Index>(state.size()) != want)
      throw InputError("the initial state holds " + std::to_string(state.size()) + " values, expected " +
                       std::to_string(want) + " (" + std::to_string(sequence_count()) + " sequences × " +
                       std::to_string(heads) + " heads × " + std::to_string(per) + ")");
    for (size_t i = 0; i < state.size(); ++i) {
      if (!allow_nonfinite && !std::isfinite(state[i]))
        throw InputError("initial state[" + std::to_string(i) + "] is not finite");
      if (!representable(state_dtype, state[i]))
        throw InputError("initial state[" + std::to_string(i) + "] is not representable in " + to_string(state_dtype));
    }
  }
}

}  // namespace hla
