// Engine heads of a batch problem's inputs, for the check layer's gradient
// units (fast/gradient.cpp, gradient_yardstick.cpp).
#pragma once

#include "hla/fast/backward.hpp"
#include "hla/state.hpp"

#include <cmath>

namespace hla::engine {

using fast::DD;

// Upper bound of a magnitude computed by the double engine: |M̂ − M| ≤ phi·2^-53·M + alpha.
inline double mag_up(double m, double phi, double alpha, bool tiny) { return (m + (tiny ? alpha : 0)) * (1 + 2 * (phi + 1) * 0x1p-53); }

// The inputs of query head h of batch entry b, tokens [t0, t1), with options
// o (p's, or its unmasked form), as an engine head (values: no magnitudes;
// abs: the absolute values with |scale|, |λ| and |X0|).
template <class S>
fast::FastHead<S> head_for(const BatchProblem& p, Options o, Index b, Index h, Index t0, Index t1, Index chunk, bool abs) {
  if (abs) o.scale = mp::abs(o.scale), o.lambda = mp::abs(o.lambda);
  auto at = [&](const std::vector<double>& x, auto index) {
    return [&x, index, abs](Index t, Index c) {
      const double e = x[index(t, c)];
      if constexpr (std::is_same_v<S, DD>) return DD{abs ? std::fabs(e) : e, 0};
      else return abs ? std::fabs(e) : e;
    };
  };
  fast::FastHead<S> fh =
      fast::make_fast_head<S>(o, t1 - t0, p.d, p.dv, at(p.q, [&](Index t, Index c) { return p.q_index(b, h, t0 + t, c); }),
                              at(p.k, [&](Index t, Index c) { return p.k_index(b, h, t0 + t, c); }),
                              at(p.v, [&](Index t, Index c) { return p.v_index(b, h, t0 + t, c); }), chunk, false);
  // An initial state in o's layout: the members p's state shares with it by
  // name (o unmasked: S, C or P), the others zero (SPEC §8).
  const BatchProblem::StateView X0 = p.state_of(b, h, t0);
  if (X0.layout.empty()) return fh;
  const std::vector<StatePart> to = state_layout(o, p.d, p.dv);
  std::vector<int> from(to.size(), -1);
  for (size_t i = 0; i < to.size(); ++i)
    for (size_t j = 0; j < X0.layout.size(); ++j)
      if (X0.layout[j].name == to[i].name && X0.layout[j].width() == to[i].width()) from[i] = static_cast<int>(j);
  fast::set_initial_carry(fh, to, [&](size_t i, Index r, Index c) {
    const double e = from[i] < 0 ? 0.0 : X0.at(static_cast<size_t>(from[i]), r, c);
    if constexpr (std::is_same_v<S, DD>) return DD{abs ? std::fabs(e) : e, 0};
    else return abs ? std::fabs(e) : e;
  });
  return fh;
}

template <class S> fast::BMat<S> input_matrix(fast::Dense<S> m) { return fast::exact_input(std::move(m), false); }

}  // namespace hla::engine
