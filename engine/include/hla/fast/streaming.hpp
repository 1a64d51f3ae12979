// The streaming recurrences (SPEC §3; reference/include/hla/ops/*.hpp
// `streaming`) on the fast engine's dense matrices, in double or an emulated
// precision (Emu<K>): the checker's sequential baseline order at scale. Every
// product and sum is rounded to the precision; the state updates are the
// rank-one updates R(R(g·A) + R(x yᵀ)) and the readouts row-vector ×
// matrix products summed in order (kernels.hpp rank1/vecmat).
#pragma once

#include "hla/fast/engine.hpp"

namespace hla::fast {

namespace detail {

template <class S> struct Streamer {
  using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
  static constexpr int K = std::is_same_v<S, Emu<1>> ? 1 : std::is_same_v<S, Emu<2>> ? 2 : 0;
  static T* ptr(Dense<S>& m) { return m.x.data(); }
  static const T* ptr(const Dense<S>& m) { return m.x.data(); }
  static void rank1(Dense<S>& A, T g, const T* x, const T* y) {
    if constexpr (std::is_same_v<S, double>) kernels().rank1_d(A.rows, A.cols, A.x.data(), A.ld, g, x, y);
    else kernels().rank1_f(K, A.rows, A.cols, A.x.data(), A.ld, g, x, y);
  }
  // y = xᵀA (x: A.rows values).
  static void vecmat(const T* x, const Dense<S>& A, T* y) {
    if constexpr (std::is_same_v<S, double>) kernels().vecmat_d(A.rows, A.cols, x, A.x.data(), A.ld, y);
    else kernels().vecmat_f(K, A.rows, A.cols, x, A.x.data(), A.ld, y);
  }
  static T mul(T a, T b) {
    if constexpr (std::is_same_v<S, double>) return a * b;
    else return emu_round<K>(a * b);
  }
  static T add(T a, T b) {
    if constexpr (std::is_same_v<S, double>) return a + b;
    else return emu_round<K>(a + b);
  }
};

// The streaming recurrences' state and scratch: every variant's members,
// each variant's step (ops/<variant>.hpp `stream`) uses its own.
template <class S> struct StreamState {
  using T = typename Streamer<S>::T;
  Idx d, dv1;
  bool masked, ridge, paper_state;
  T g1, g2, g3, lambda;
  Dense<S> Sm, SQ, C, F, P, E;
  std::vector<T> u, w, y;
  StreamState(const FastHead<S>& h, bool paper)
      : d(h.q.cols()),
        dv1(h.v.cols()),
        masked(h.masked),
        ridge(h.ridge),
        paper_state(paper),
        g1(h.pow.g.size() > 1 ? T(h.pow.g[1]) : T(1)),
        g2(h.pow.g.size() > 2 ? T(h.pow.g[2]) : T(1)),
        g3(h.pow.g.size() > 3 ? T(h.pow.g[3]) : T(1)),
        lambda(h.ridge ? T(h.lambda.val.at(0, 0)) : T(0)),
        Sm(Dense<S>::zero(d, d)),
        SQ(Dense<S>::zero(d, d)),
        C(Dense<S>::zero(d, dv1)),
        F(Dense<S>::zero(d, dv1)),
        P(Dense<S>::zero(d, dv1)),
        E(Dense<S>::zero(d, dv1)),
        u(static_cast<size_t>(std::max(d, dv1))),
        w(static_cast<size_t>(std::max(d, dv1))),
        y(static_cast<size_t>(dv1)) {}
};

}  // namespace detail

// The head's outputs n × (dv + 1) by the streaming recurrence of its variant
// (paper_state: hla2's paper state (S, C, G) with the decay corrected, which
// subtracts partial sums: num = (qᵀS + λqᵀ)C − qᵀG; the state-difference class).
template <class S> Dense<S> streaming_head(const FastHead<S>& h, bool paper_state = false) {
  using St = detail::Streamer<S>;
  const Idx n = h.n();
  Dense<S> Y = Dense<S>::zero(n, h.v.cols());
  detail::StreamState<S> s(h, paper_state);
  with_chunk_form(h.variant, [&]<class F>(F) {
    for (Idx t = 0; t < n; ++t)
      F::template stream<St>(s, St::ptr(h.q.val) + t * h.q.val.ld, St::ptr(h.k.val) + t * h.k.val.ld, St::ptr(h.v.val) + t * h.v.val.ld,
                             St::ptr(Y) + t * Y.ld);
  });
  return Y;
}

// hla2's paper state after the head's last token, from its carry (S0, C0, F0;
// G0 = S0·C0 − F0) or zero: (S, C, F = S·C − G) with F formed by subtracting,
// as a state-difference kernel returns its final state; every product and sum
// rounded to the precision (the state-difference class's order for a final state).
template <class S> std::vector<Dense<S>> paper_state_final(const FastHead<S>& h) {
  using St = detail::Streamer<S>;
  detail::StreamState<S> s(h, true);
  // A·C − X row by row (A = S, symmetric: its row i is its column i).
  auto sc_minus = [&](const Dense<S>& A, const Dense<S>& C, const Dense<S>& X) {
    Dense<S> R = Dense<S>::zero(s.d, s.dv1);
    for (Idx i = 0; i < s.d; ++i) {
      St::vecmat(St::ptr(A) + i * A.ld, C, s.y.data());
      for (Idx c = 0; c < s.dv1; ++c) St::ptr(R)[i * R.ld + c] = St::add(s.y[c], -St::ptr(X)[i * X.ld + c]);
    }
    return R;
  };
  if (!h.carry0.empty()) s.Sm = h.carry0[0].val, s.C = h.carry0[1].val, s.F = sc_minus(s.Sm, s.C, h.carry0[2].val);
  std::vector<typename St::T> out(static_cast<size_t>(s.dv1));
  for (Idx t = 0; t < h.n(); ++t)
    detail::Hla2::template stream<St>(s, St::ptr(h.q.val) + t * h.q.val.ld, St::ptr(h.k.val) + t * h.k.val.ld,
                                      St::ptr(h.v.val) + t * h.v.val.ld, out.data());
  return {s.Sm, s.C, sc_minus(s.Sm, s.C, s.F)};  // s.F holds G
}

}  // namespace hla::fast
