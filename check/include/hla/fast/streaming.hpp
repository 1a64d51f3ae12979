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

}  // namespace detail

// The head's outputs n × (dv + 1) by the streaming recurrence of its variant
// (paper_state: hla2's paper state (S, C, G) with the decay corrected, which
// subtracts partial sums: num = (qᵀS + λqᵀ)C − qᵀG; the state-difference class).
template <class S> Dense<S> streaming_head(const FastHead<S>& h, bool paper_state = false) {
  using St = detail::Streamer<S>;
  using T = typename St::T;
  const Idx n = h.n(), d = h.q.cols(), dv1 = h.v.cols();
  Dense<S> Y = Dense<S>::zero(n, dv1);
  const T g1 = h.pow.g.size() > 1 ? T(h.pow.g[1]) : T(1);
  const T g2 = h.pow.g.size() > 2 ? T(h.pow.g[2]) : T(1);
  const T g3 = h.pow.g.size() > 3 ? T(h.pow.g[3]) : T(1);
  Dense<S> Sm = Dense<S>::zero(d, d), SQ = Dense<S>::zero(d, d), C = Dense<S>::zero(d, dv1), F = Dense<S>::zero(d, dv1),
           P = Dense<S>::zero(d, dv1), E = Dense<S>::zero(d, dv1);
  std::vector<T> u(static_cast<size_t>(std::max(d, dv1))), w(static_cast<size_t>(std::max(d, dv1))), y(static_cast<size_t>(dv1));
  const T lambda = h.ridge ? T(h.lambda.val.at(0, 0)) : T(0);
  for (Idx t = 0; t < n; ++t) {
    const T* q = St::ptr(h.q.val) + t * h.q.val.ld;
    const T* k = St::ptr(h.k.val) + t * h.k.val.ld;
    const T* v = St::ptr(h.v.val) + t * h.v.val.ld;
    T* out = St::ptr(Y) + t * Y.ld;
    switch (h.variant) {
      case Variant::la1:
        St::rank1(P, g1, k, v);
        St::vecmat(q, P, out);
        break;
      case Variant::hla2:
        if (paper_state) {
          // G = γ²G + γk(kᵀC_{t−1}) (C before its update), then S, C; num = (qᵀS + λqᵀ)C − qᵀG.
          if (h.masked) {
            St::vecmat(k, C, w.data());
            for (Idx i = 0; i < d; ++i) u[static_cast<size_t>(i)] = St::mul(g1, k[i]);
            St::rank1(F, g2, u.data(), w.data());  // F holds G here
          }
          St::rank1(Sm, g1, k, k);
          St::rank1(C, g1, q, v);
          St::vecmat(q, Sm, u.data());
          if (h.ridge)
            for (Idx i = 0; i < d; ++i) u[static_cast<size_t>(i)] = St::add(u[static_cast<size_t>(i)], St::mul(lambda, q[i]));
          St::vecmat(u.data(), C, out);
          if (h.masked) {
            St::vecmat(q, F, y.data());
            for (Idx c = 0; c < dv1; ++c) out[c] = St::add(out[c], -y[static_cast<size_t>(c)]);
          }
          break;
        }
        St::rank1(Sm, g1, k, k);
        St::rank1(C, g1, q, v);
        St::vecmat(q, Sm, u.data());  // qᵀS = (Sq)ᵀ: S is symmetric, exactly (its updates are)
        if (h.masked) {
          St::rank1(F, g2, u.data(), v);
          St::vecmat(q, F, out);
        } else {
          St::vecmat(u.data(), C, out);
        }
        if (h.ridge) {
          St::vecmat(q, C, y.data());
          for (Idx c = 0; c < dv1; ++c) out[c] = St::add(out[c], St::mul(lambda, y[static_cast<size_t>(c)]));
        }
        break;
      case Variant::ahla:
        St::rank1(P, g1, k, v);
        St::vecmat(q, P, w.data());
        St::rank1(E, g1, k, w.data());
        St::vecmat(q, E, out);
        break;
      case Variant::hla3:
        St::rank1(Sm, g1, k, k);
        St::rank1(P, g1, k, v);
        if (h.masked) {
          St::vecmat(q, Sm, u.data());
          St::vecmat(q, P, w.data());
          St::rank1(F, g3, u.data(), w.data());
          St::vecmat(q, F, out);
        } else {
          St::rank1(SQ, g1, q, q);
          St::vecmat(q, Sm, u.data());
          St::vecmat(u.data(), SQ, w.data());
          St::vecmat(w.data(), P, out);
        }
        break;
      default: throw std::logic_error("fast engine: no streaming form for this variant");
    }
  }
  return Y;
}

}  // namespace hla::fast
