// What the fast engine's chunk forms (ops/<variant>.hpp) share: one head as
// the engine reads it, the state it carries from chunk to chunk, the decay
// masks of a chunk, and rows of results with their bounds (matrix.hpp).
#pragma once

#include "hla/fast/matrix.hpp"
#include "hla/problem.hpp"
#include "hla/variants.hpp"

#include <cmath>
#include <map>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace hla::fast {

// Powers γ^e, e = 0..E, with their bound (every entry ≤ 1 and ≥ 0, so A = 1
// and the magnitude is the value).
template <class S> struct Powers {
  std::vector<S> g;
  double phi = 0, alpha = 0;
};

// The state a chunk form carries from one chunk to the next: the variant's
// State members (hla/state.hpp) in order — la1 (P); hla2 (S, C, F); ahla
// (P, E); hla3 (S, P, F) masked, (S, P, SQ) unmasked — each d × d or
// d × (dv + 1) with the denominator's column last.
template <class S> using Carry = std::vector<BMat<S>>;

// One head as the engine reads it: q already scaled, v with a column of ones
// (its output column is the denominator), the options the forms need.
template <class S> struct FastHead {
  Variant variant = Variant::hla2;
  bool masked = true;
  BMat<S> q, k, v;  // n × d, n × d, n × (dv + 1)
  Powers<S> pow;    // up to order·(w + 1)
  BMat<S> lambda;   // 1 × 1 (hla2 ridge; zero: no ridge terms)
  bool ridge = false;
  BMat<S> scale;  // 1 × 1: the factor q was multiplied by (the backward's dq carries it)
  bool scaled = false;
  bool magnitudes = true;   // compute mag (else only the bounds: see BMat::has_mag)
  Idx w = 64;               // chunk width
  bool full_carry = false;  // carry every state member (hla2's C also where no output reads it): a final state is wanted
  // Decay in log space (set_log_decay, our orders only): b_t, t = -1..n-1 at
  // index t + 1, the cumulative sum of log γ along the head's sequence; empty:
  // decay by the powers of γ.
  std::vector<double> logb;
  // The carry before token 0 (an initial state, hla/state.hpp: members in the
  // variant's State order, which is the order of the carries); empty: zero.
  std::vector<BMat<S>> carry0;
  Idx n() const { return q.rows(); }
  Idx d() const { return q.cols(); }
  Idx dv1() const { return v.cols(); }
  BMat<S> carry(size_t i, Idx rows, Idx cols) const { return i < carry0.size() ? carry0[i] : BMat<S>::zero(rows, cols, magnitudes); }
};

// m(i, j) = x in any engine scalar.
template <class S> void put_entry(Dense<S>& m, Idx i, Idx j, const S& x) {
  if constexpr (std::is_same_v<S, DD>) m.set(i, j, x);
  else m.at(i, j) = x;
}

// m(i, j) in any engine scalar.
template <class S> S get_entry(const Dense<S>& m, Idx i, Idx j) { return m.at(i, j); }

// Rows of results (outputs n × (dv + 1); gradients n × d or n × (dv + 1))
// with, per row, the bound |val − exact| ≤ phi·unit·M + alpha.
template <class S> struct HeadResult {
  Dense<S> val, mag;
  std::vector<double> phi, alpha;
  bool finite = true;
  bool tiny = false;  // alpha applies (matrix.hpp); else the bound is phi·unit·M alone
  bool has_mag = true;

  static HeadResult zero(Idx rows, Idx cols, bool with_mag) {
    HeadResult r;
    r.val = Dense<S>::zero(rows, cols);
    r.has_mag = Arith<S>::track && with_mag;
    if (r.has_mag) r.mag = Dense<S>::zero(rows, cols);
    r.phi.assign(static_cast<size_t>(rows), 0);
    r.alpha.assign(static_cast<size_t>(rows), 0);
    return r;
  }
  // Rows r0 .. r0 + Y.rows() − 1 ← Y, with Y's bound.
  void put(Idx r0, const BMat<S>& Y) {
    for (Idx t = 0; t < Y.rows(); ++t) {
      phi[static_cast<size_t>(r0 + t)] = Y.phi;
      alpha[static_cast<size_t>(r0 + t)] = Y.alpha;
      for (Idx j = 0; j < Y.cols(); ++j) {
        if constexpr (std::is_same_v<S, DD>) {
          if (!std::isfinite(Y.val.at(t, j).hi)) finite = false;
          val.set(r0 + t, j, Y.val.at(t, j));
          if (has_mag) mag.set(r0 + t, j, Y.mag.at(t, j));
        } else {
          if constexpr (std::is_same_v<S, double>)
            if (!std::isfinite(Y.val.at(t, j))) finite = false;
          val.at(r0 + t, j) = Y.val.at(t, j);
          if (has_mag) mag.at(r0 + t, j) = Y.mag.at(t, j);
        }
      }
    }
    finite = finite && Y.finite;
    tiny = tiny || Y.tiny;
  }
};

namespace detail {

// The decay masks and vectors of a chunk of L tokens, from the head's powers of γ.
template <class S> class Chunks {
 public:
  explicit Chunks(const FastHead<S>& h) : h_(h) {}

  // The chunk [c0, c0 + L) that the decays below are for: with log-space decay
  // they depend on where it starts.
  void start(Idx c0, Idx L) {
    if (!h_.logb.empty() && c0 != c0_) masks_.clear();
    c0_ = c0, L_ = L;
  }

  // D_p(t, j) = γ^(p(t − j)) for j ≤ t, else 0 (L × L).
  const BMat<S>& D(Idx L, int p) {
    auto key = std::make_pair(L, p);
    auto it = masks_.find(key);
    if (it != masks_.end()) return it->second;
    Dense<S> m = Dense<S>::zero(L, L);
    for (Idx t = 0; t < L; ++t)
      for (Idx j = 0; j <= t; ++j) put(m, t, j, logs() ? between(c0_ + t, c0_ + j, p) : g(p * (t - j)));
    return masks_.emplace(key, powers_matrix(std::move(m))).first->second;
  }
  // γ^(p(t + 1)), t = 0..L-1: decay from the carry's end to token t (L × 1).
  BMat<S> rho(Idx L, int p) {
    Dense<S> m = Dense<S>::zero(L, 1);
    for (Idx t = 0; t < L; ++t) put(m, t, 0, logs() ? between(c0_ + t, c0_ - 1, p) : g(p * (t + 1)));
    return powers_matrix(std::move(m));
  }
  // γ^(p(L − 1 − i)), i = 0..L-1: decay from token i to the chunk's end (L × 1).
  BMat<S> e(Idx L, int p) {
    Dense<S> m = Dense<S>::zero(L, 1);
    for (Idx i = 0; i < L; ++i) put(m, i, 0, logs() ? between(c0_ + L - 1, c0_ + i, p) : g(p * (L - 1 - i)));
    return powers_matrix(std::move(m));
  }
  // γ^x as a 1 × 1 matrix (x a multiple of the chunk's length: its decay to that power).
  BMat<S> gs(Idx x) {
    Dense<S> m = Dense<S>::zero(1, 1);
    put(m, 0, 0, logs() ? between(c0_ + L_ - 1, c0_ - 1, static_cast<int>(x / L_)) : g(x));
    return powers_matrix(std::move(m));
  }
  // Rows r0 .. r0+L-1 of X times the column vector c (a copy).
  static BMat<S> times_rows(const BMat<S>& X, const BMat<S>& c) {
    BMat<S> Y = X;
    ops::scale_rows(Y, c);
    return Y;
  }

 private:
  const S& g(Idx e) const {
    if (e < 0 || static_cast<size_t>(e) >= h_.pow.g.size()) throw std::logic_error("fast engine: power of gamma beyond its table");
    return h_.pow.g[static_cast<size_t>(e)];
  }
  bool logs() const { return !h_.logb.empty(); }
  // The decay from token lo to token hi in log space, to the p-th power:
  // exp(b_hi − b_lo) with the difference, the exponential and the products
  // rounded in f32 (f64 for S = double), as kernels that keep decays in f32 form it.
  S between(Idx hi, Idx lo, int p) const {
    if constexpr (std::is_same_v<S, double> || std::is_same_v<S, Emu<0>> || std::is_same_v<S, Emu<1>> || std::is_same_v<S, Emu<2>>) {
      using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
      const T f = std::exp(static_cast<T>(h_.logb[static_cast<size_t>(hi + 1)]) - static_cast<T>(h_.logb[static_cast<size_t>(lo + 1)]));
      T y = f;
      for (int i = 1; i < p; ++i) y *= f;
      if constexpr (std::is_same_v<S, double>) return y;
      else return S(emu_round < std::is_same_v<S, Emu<1>> ? 1 : std::is_same_v<S, Emu<2>> ? 2 : 0 > (y));
    } else {
      throw std::logic_error("fast engine: log-space decay is an order of ours (double or an emulated precision)");
    }
  }
  static void put(Dense<S>& m, Idx i, Idx j, const S& x) { put_entry(m, i, j, x); }
  BMat<S> powers_matrix(Dense<S> m) const {
    BMat<S> b;
    b.has_mag = h_.magnitudes && Arith<S>::track;
    if (b.has_mag) b.mag = m;
    b.val = std::move(m);
    b.phi = h_.pow.phi, b.alpha = h_.pow.alpha;
    b.refresh();
    return b;
  }
  const FastHead<S>& h_;
  Idx c0_ = 0, L_ = 1;
  std::map<std::pair<Idx, int>, BMat<S>> masks_;
};

// One chunk [c0, c0 + L) of a head: its rows of q, k, v.
template <class S> struct Chunk {
  Idx c0, L;
  BMat<S> Q, K, V;
  Chunk(const FastHead<S>& h, Idx c0_, Idx L_)
      : c0(c0_), L(L_), Q(ops::rows(h.q, c0_, L_)), K(ops::rows(h.k, c0_, L_)), V(ops::rows(h.v, c0_, L_)) {}
};

// The adjoints one chunk's backward produces: of its rows of q, k, v.
template <class S> struct ChunkGrad { BMat<S> dQ, dK, dV; };

using ops::add;
using ops::had;
using ops::mm;
using ops::mm_into;
using ops::rows;
using ops::scale;
using ops::scale_rows;
using ops::zero_upper;
constexpr bool N = false, T = true;

}  // namespace detail
}  // namespace hla::fast
