// Dense matrices for the fast engine (engine.hpp), in three scalars:
// double-double (DD: value hi + lo, stored as two arrays), double and exact
// rationals (for the proofs: the same algebra, evaluated exactly).
//
// A "bounded" matrix (BMat) is a computed value together with the SPEC §7
// magnitude of the same quantity (the same computation on |q|, |k|, |v|, |scale|)
// and a running error bound, one per matrix, that every operation updates:
//   |val − exact| ≤ phi·unit·M + alpha   for every element,
// where exact is the value in exact arithmetic of the same algorithm, M the
// exact magnitude (which the mag half approximates with the same bound) and
// unit 2^-106 (DD) or 2^-53 (double). A bounds max(|val|, mag, M) from above.
//
// Why the bound holds (each operation's local error, then induction):
// every algorithm written with these operations only adds and multiplies
// quantities whose magnitudes are the same algorithm on absolute values, so
// the magnitude of a sum is the sum of the magnitudes and of a product the
// product. For DD, with u = 2^-53 and normalized operands (|lo| ≤ u|hi|):
//  - product a·b (TwoProd of the high parts, cross terms added, TwoSum):
//    |error| ≤ 8.01u²|a||b|;
//  - sum a + b (TwoSum, low parts added, TwoSum): ≤ 3.01u²(|a| + |b|);
//  - block products (kernels.inc): each step c + a·b adds the exact TwoProd
//    of the high parts with the TwoSum of c's high part, and the low parts
//    (t0 + e, then into c's low part) without renormalizing; every 8 steps a
//    TwoSum renormalizes. In a block of B steps the step i errs by at most
//    u²(11.14·P_i + (5.21 + 1.05·i)·M_i) (product 8.01u²P_i; the roundings
//    of t0 + e and of the growing low part, |lo| ≤ u·M_i(4.16 + 1.05i)),
//    P_i = |a_i||b_i| and M_i the magnitude of the partial sum, so a block
//    adds at most u²·M·(11.14 + 5.21B + 0.525B(B + 1)) ≤ 92·u²·M for B = 8.
// With |a| ≤ M_a(1 + phi_a·u²) + alpha_a and phi·u² ≤ 2^-76 (checked), the
// second-order terms fit in the rounded-up constants: a product gives
// phi_a + phi_b + 17, a sum max(phi_a, phi_b) + 5, a product of inner
// dimension k accumulated into C (phi_C0, or a fresh zero C)
// max(phi_C0, phi_A + phi_B + 1) + 92·ceil(k/8). For double (one rounding per
// operation; a product step c + a·b is fused, one rounding of at most
// u|c + a·b|): + 2, + 2, max(phi_C0, phi_A + phi_B + 3) + 2k.
// Underflow: a rounding below the normal range (or TwoProd's error term of
// a product below 2^-969) errs by at most 2^-1075 absolutely; a DD step has at
// most 16 such roundings, so each operation adds tau = 2^-1066 (DD) or
// 2^-1070 (double) to alpha, and alpha is carried through products as
// alpha_a·A_b + alpha_b·A_a + alpha_a·alpha_b (times 1.01 for the relative
// terms). Where no such rounding can happen, alpha is not needed: if every
// nonzero magnitude that an operation forms (each element of its result, and
// each product of an element of one operand's magnitude with one of the
// other's) is at least 2^-950, each absolute error of 2^-1066 is below
// 2^-116 times the magnitude it belongs to, which the margins of the
// constants above absorb (17 vs 16.01, 5 vs 3.01, 92 vs 90.6 per block); and a quantity of
// magnitude 0 is computed exactly 0 (every term has a zero factor). `tiny`
// records whether any operation leading to a matrix broke that condition.
// Overflow: a NaN or Inf anywhere clears `finite`, and the caller falls back
// to binary128.
#pragma once

#include "hla/fast/kernels.hpp"
#include "hla/scalar.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace hla::fast {

struct DD {
  double hi = 0, lo = 0;
};
// The nearest double-double of a binary128 number: hi = RN(x), lo = RN(x − hi);
// relative error ≤ 2^-106 (+ 2^-1075 absolutely below the normal range).
DD dd_from_f113(const f113& x);
f113 f113_from_dd(const DD& x);  // exact

template <class S> struct Arith;
template <> struct Arith<DD> {
  static constexpr bool exact = false, track = true;
  static constexpr double unit = 0x1p-106;
  static constexpr double prod = 17, add = 5, base = 1, step = 92;
  static constexpr Idx block = kDDBlock;  // step per block of this many products
  static constexpr double tau = 0x1p-1066;
  static constexpr double max_phi = 0x1p30;  // phi·unit ≤ 2^-76
};
template <> struct Arith<double> {
  static constexpr bool exact = false, track = true;
  static constexpr double unit = 0x1p-53;
  static constexpr double prod = 2, add = 2, base = 3, step = 2;
  static constexpr Idx block = 1;
  static constexpr double tau = 0x1p-1070;
  static constexpr double max_phi = 0x1p33;  // phi·unit ≤ 2^-20
};
template <> struct Arith<Rational> {
  static constexpr bool exact = true, track = true;
  static constexpr double unit = 0, prod = 0, add = 0, base = 0, step = 0, tau = 0, max_phi = 0;
  static constexpr Idx block = 1;
};

// Row-major storage, ld = padded(cols) (DD, double: padding columns zero), ld = cols (Rational).
template <class S> struct Dense {
  Idx rows = 0, cols = 0, ld = 0;
  std::vector<S> x;
  static Dense zero(Idx r, Idx c) {
    Dense m;
    m.rows = r, m.cols = c, m.ld = std::is_same_v<S, double> ? padded(c) : c;
    m.x.assign(static_cast<size_t>(r * m.ld), S(0));
    return m;
  }
  S& at(Idx i, Idx j) { return x[static_cast<size_t>(i * ld + j)]; }
  const S& at(Idx i, Idx j) const { return x[static_cast<size_t>(i * ld + j)]; }
};
template <> struct Dense<DD> {
  Idx rows = 0, cols = 0, ld = 0;
  std::vector<double> hi, lo;
  static Dense zero(Idx r, Idx c) {
    Dense m;
    m.rows = r, m.cols = c, m.ld = padded(c);
    m.hi.assign(static_cast<size_t>(r * m.ld), 0.0);
    m.lo.assign(static_cast<size_t>(r * m.ld), 0.0);
    return m;
  }
  DD at(Idx i, Idx j) const { return {hi[static_cast<size_t>(i * ld + j)], lo[static_cast<size_t>(i * ld + j)]}; }
  void set(Idx i, Idx j, DD v) {
    hi[static_cast<size_t>(i * ld + j)] = v.hi;
    lo[static_cast<size_t>(i * ld + j)] = v.lo;
  }
};

// Emulated precisions (the checker's baseline orders at scale): Emu<K> is a
// float-stored scalar whose every product and sum is rounded to f32 (K = 0),
// bf16 (1) or f16 (2) — the f32 result rounded to nearest even, as
// Eigen::bfloat16 and Eigen::half compute. No magnitudes or bounds are carried
// (track = false): these evaluations are peers of candidates, not references.
template <int K> struct Emu {
  float v = 0;
  Emu() = default;
  Emu(float x) : v(x) {}  // NOLINT: implicit, so that generic code writes S(1)
  operator float() const { return v; }
};

template <int K> struct Arith<Emu<K>> {
  static constexpr bool exact = false, track = false;
  static constexpr double unit = 0, prod = 0, add = 0, base = 0, step = 0, tau = 0, max_phi = 0;
  static constexpr Idx block = 1;
};

template <int K> struct Dense<Emu<K>> {
  Idx rows = 0, cols = 0, ld = 0;
  std::vector<float> x;
  static Dense zero(Idx r, Idx c) {
    Dense m;
    m.rows = r, m.cols = c, m.ld = (c + kPadF - 1) / kPadF * kPadF;
    m.x.assign(static_cast<size_t>(r * m.ld), 0.0f);
    return m;
  }
  float& at(Idx i, Idx j) { return x[static_cast<size_t>(i * ld + j)]; }
  const float& at(Idx i, Idx j) const { return x[static_cast<size_t>(i * ld + j)]; }
};

namespace detail {

// C += op(A)·B for dense operands, op(A) = A or Aᵀ (a_trans: A is read
// transposed, no copy); B's transposes are made by BMat (explicitly).
inline void gemm(Dense<DD>& C, const Dense<DD>& A, bool a_trans, const Dense<DD>& B, bool a_lower, bool c_lower, int lo_zero = 0) {
  kernels().gemm_dd(C.rows, C.ld, a_trans ? A.rows : A.cols, A.hi.data(), A.lo.data(), A.ld, a_trans, B.hi.data(), B.lo.data(), B.ld,
                    C.hi.data(), C.lo.data(), C.ld, lo_zero, a_lower, c_lower);
}
inline void gemm(Dense<double>& C, const Dense<double>& A, bool a_trans, const Dense<double>& B, bool a_lower, bool c_lower, int = 0) {
  kernels().gemm_d(C.rows, C.ld, a_trans ? A.rows : A.cols, A.x.data(), A.ld, a_trans, B.x.data(), B.ld, C.x.data(), C.ld, a_lower,
                   c_lower);
}
inline void gemm(Dense<Rational>& C, const Dense<Rational>& A, bool a_trans, const Dense<Rational>& B, bool, bool, int = 0) {
  const Idx k = a_trans ? A.rows : A.cols;
  for (Idx i = 0; i < C.rows; ++i)
    for (Idx l = 0; l < k; ++l) {
      const Rational& a = a_trans ? A.at(l, i) : A.at(i, l);
      if (a == 0) continue;
      for (Idx j = 0; j < B.cols; ++j) C.at(i, j) += a * B.at(l, j);
    }
}

inline void mul(Dense<DD>& X, const Dense<DD>& Y) {
  kernels().mul_dd(static_cast<Idx>(X.hi.size()), X.hi.data(), X.lo.data(), Y.hi.data(), Y.lo.data());
}
inline void mul(Dense<double>& X, const Dense<double>& Y) {
  for (size_t i = 0; i < X.x.size(); ++i) X.x[i] = X.x[i] * Y.x[i];
}
inline void mul(Dense<Rational>& X, const Dense<Rational>& Y) {
  for (size_t i = 0; i < X.x.size(); ++i) X.x[i] *= Y.x[i];
}
inline void add(Dense<DD>& X, const Dense<DD>& Y) {
  kernels().add_dd(static_cast<Idx>(X.hi.size()), X.hi.data(), X.lo.data(), Y.hi.data(), Y.lo.data());
}
inline void add(Dense<double>& X, const Dense<double>& Y) {
  for (size_t i = 0; i < X.x.size(); ++i) X.x[i] = X.x[i] + Y.x[i];
}
inline void add(Dense<Rational>& X, const Dense<Rational>& Y) {
  for (size_t i = 0; i < X.x.size(); ++i) X.x[i] += Y.x[i];
}
// Row i times r(i, 0).
inline void scale_rows(Dense<DD>& X, const Dense<DD>& r) {
  for (Idx i = 0; i < X.rows; ++i)
    kernels().scale_dd(X.ld, X.hi.data() + i * X.ld, X.lo.data() + i * X.ld, r.hi[static_cast<size_t>(i * r.ld)],
                       r.lo[static_cast<size_t>(i * r.ld)]);
}
inline void scale_rows(Dense<double>& X, const Dense<double>& r) {
  for (Idx i = 0; i < X.rows; ++i) {
    const double s = r.at(i, 0);
    for (Idx j = 0; j < X.ld; ++j) X.at(i, j) = X.at(i, j) * s;
  }
}
inline void scale_rows(Dense<Rational>& X, const Dense<Rational>& r) {
  for (Idx i = 0; i < X.rows; ++i)
    for (Idx j = 0; j < X.cols; ++j) X.at(i, j) *= r.at(i, 0);
}
inline void scale(Dense<DD>& X, const Dense<DD>& s) {
  kernels().scale_dd(static_cast<Idx>(X.hi.size()), X.hi.data(), X.lo.data(), s.hi[0], s.lo[0]);
}
inline void scale(Dense<double>& X, const Dense<double>& s) {
  for (double& e : X.x) e = e * s.x[0];
}
inline void scale(Dense<Rational>& X, const Dense<Rational>& s) {
  for (Rational& e : X.x) e *= s.x[0];
}

template <int K>
void gemm(Dense<Emu<K>>& C, const Dense<Emu<K>>& A, bool a_trans, const Dense<Emu<K>>& B, bool a_lower, bool c_lower, int = 0) {
  std::vector<float> a, b;  // tensor-core operands (kernels.hpp): rounded copies
  if (const int f = K == 0 ? current_operand_format() : 0) {
    a = A.x, b = B.x;
    for (float& x : a) x = operand_round(f, x);
    for (float& x : b) x = operand_round(f, x);
  }
  kernels().gemm_f(K, C.rows, C.ld, a_trans ? A.rows : A.cols, a.empty() ? A.x.data() : a.data(), A.ld, a_trans,
                   b.empty() ? B.x.data() : b.data(), B.ld, C.x.data(), C.ld, a_lower, c_lower);
}
template <int K> void mul(Dense<Emu<K>>& X, const Dense<Emu<K>>& Y) {
  kernels().mul_f(K, static_cast<Idx>(X.x.size()), X.x.data(), Y.x.data());
}
template <int K> void add(Dense<Emu<K>>& X, const Dense<Emu<K>>& Y) {
  kernels().add_f(K, static_cast<Idx>(X.x.size()), X.x.data(), Y.x.data());
}
template <int K> void scale_rows(Dense<Emu<K>>& X, const Dense<Emu<K>>& r) {
  for (Idx i = 0; i < X.rows; ++i) kernels().scale_f(K, X.ld, X.x.data() + i * X.ld, r.at(i, 0));
}
template <int K> void scale(Dense<Emu<K>>& X, const Dense<Emu<K>>& s) {
  kernels().scale_f(K, static_cast<Idx>(X.x.size()), X.x.data(), s.at(0, 0));
}
template <class S> Dense<S> transpose(const Dense<S>& X) {
  Dense<S> T = Dense<S>::zero(X.cols, X.rows);
  if constexpr (std::is_same_v<S, DD>) {
    for (Idx i = 0; i < X.rows; ++i)
      for (Idx j = 0; j < X.cols; ++j) {
        T.hi[static_cast<size_t>(j * T.ld + i)] = X.hi[static_cast<size_t>(i * X.ld + j)];
        T.lo[static_cast<size_t>(j * T.ld + i)] = X.lo[static_cast<size_t>(i * X.ld + j)];
      }
  } else {
    for (Idx i = 0; i < X.rows; ++i)
      for (Idx j = 0; j < X.cols; ++j) T.at(j, i) = X.at(i, j);
  }
  return T;
}

template <class S> Dense<S> rows_of(const Dense<S>& X, Idx r0, Idx count) {
  Dense<S> R;
  R.rows = count, R.cols = X.cols, R.ld = X.ld;
  const auto b = static_cast<std::ptrdiff_t>(r0 * X.ld), e = static_cast<std::ptrdiff_t>((r0 + count) * X.ld);
  if constexpr (std::is_same_v<S, DD>) {
    R.hi.assign(X.hi.begin() + b, X.hi.begin() + e);
    R.lo.assign(X.lo.begin() + b, X.lo.begin() + e);
  } else {
    R.x.assign(X.x.begin() + b, X.x.begin() + e);
  }
  return R;
}

// Zeroes X(i, j) for j > i (strict upper triangle).
template <class S> void zero_upper(Dense<S>& X) {
  for (Idx i = 0; i < X.rows; ++i)
    for (Idx j = i + 1; j < X.cols; ++j) {
      if constexpr (std::is_same_v<S, DD>) {
        X.hi[static_cast<size_t>(i * X.ld + j)] = 0;
        X.lo[static_cast<size_t>(i * X.ld + j)] = 0;
      } else {
        X.at(i, j) = S(0);
      }
    }
}

// Largest |element| (+inf with an Inf) and smallest nonzero one (+inf when
// none) of a matrix (DD: of the high parts; |hi + lo| ≤ |hi|(1 + 2^-53) is in
// the caller's slack).
template <class S> void max_min(const Dense<S>& X, double& mx, double& mn) {
  mx = 0, mn = INFINITY;
  if constexpr (std::is_same_v<S, DD>) kernels().max_min(static_cast<Idx>(X.hi.size()), X.hi.data(), mx, mn);
  else if constexpr (std::is_same_v<S, double>) kernels().max_min(static_cast<Idx>(X.x.size()), X.x.data(), mx, mn);
}

inline constexpr double kTiny = 0x1p-950;

}  // namespace detail

// A computed matrix with its magnitude and running error bound (see the top).
template <class S> struct BMat {
  Dense<S> val, mag;
  double phi = 0, alpha = 0;
  double A = 0;              // ≥ max |val|, mag, the exact magnitude and value
  double minmag = INFINITY;  // smallest nonzero element of mag
  bool finite = true;
  bool tiny = false;     // alpha is needed (see the top)
  bool lo_zero = false;  // DD: every low part of val and mag is zero (exact inputs)
  // Whether mag is computed (a run may carry only the bounds: its magnitudes
  // then come from another run, on absolute values; phi, alpha, A and minmag
  // are kept either way).
  bool has_mag = true;
  Idx rows() const { return val.rows; }
  Idx cols() const { return val.cols; }

  // Recomputes A, minmag and finite from the magnitudes and the bound: every
  // |val| and the exact magnitude are within phi·unit·M + alpha of mag (a
  // pass over the matrix: for inputs and constants).
  void refresh() {
    if constexpr (Arith<S>::exact || !Arith<S>::track) return;
    else {
      // Inputs and constants without mag are exact: their magnitude is |val|.
      double m = 0;
      detail::max_min(has_mag ? mag : val, m, minmag);
      if (!std::isfinite(m)) finite = false;
      settle(m);
    }
  }
  // After an operation: `mmax` bounds the exact magnitude of every element
  // and minmag (set by the caller) bounds its nonzero ones from below, both
  // derived from the operands (no pass over the matrix).
  void settle(double mmax) {
    if constexpr (!Arith<S>::exact && Arith<S>::track) {
      if (!std::isfinite(mmax) || !std::isfinite(alpha) || !(phi <= Arith<S>::max_phi)) finite = false;
      // Mildly below the threshold: the next product would be far below.
      if (minmag < detail::kTiny) tiny = true;
      A = finite ? (mmax + 2 * alpha) * (1 + 2 * phi * Arith<S>::unit + 0x1p-45) : INFINITY;
    }
  }
  static BMat zero(Idx r, Idx c, bool with_mag = true) {
    BMat m;
    m.val = Dense<S>::zero(r, c);
    m.has_mag = Arith<S>::track && with_mag;
    if (m.has_mag) m.mag = Dense<S>::zero(r, c);
    m.lo_zero = true;
    return m;
  }
};

// An exact input (phi = alpha = 0): mag = |val| (kept only with_mag).
template <class S> BMat<S> exact_input(Dense<S> val, bool with_mag = true) {
  BMat<S> m;
  if constexpr (!Arith<S>::track) {
    m.val = std::move(val);
    m.has_mag = false;
    return m;
  } else {
    if (!with_mag) {
      m.val = std::move(val);
      m.has_mag = false;
      if constexpr (std::is_same_v<S, DD>) m.lo_zero = std::all_of(m.val.lo.begin(), m.val.lo.end(), [](double x) { return x == 0; });
      m.refresh();
      return m;
    }
    m.mag = val;
    if constexpr (std::is_same_v<S, DD>) {
      for (double& e : m.mag.hi) e = std::fabs(e);
      for (double& e : m.mag.lo) e = std::fabs(e);  // lo = 0 for inputs; |hi| + |lo| is exact then
    } else {
      using std::abs;
      for (auto& e : m.mag.x) e = abs(e);
    }
    m.val = std::move(val);
    if constexpr (std::is_same_v<S, DD>) m.lo_zero = std::all_of(m.val.lo.begin(), m.val.lo.end(), [](double x) { return x == 0; });
    m.refresh();
    return m;
  }
}

namespace ops {

// Multiply-adds done by matrix products (values and magnitudes), all threads:
// for benchmarks' rates.
inline std::atomic<std::uint64_t>& mac_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

// Elementwise product bounds: magnitudes multiply, so max ≤ A_X·A_Y and a
// nonzero one ≥ minmag_X·minmag_Y.
template <class S> void bound_product(BMat<S>& Z, const BMat<S>& X, const BMat<S>& Y) {
  using Ar = Arith<S>;
  Z.finite = Z.finite && X.finite && Y.finite;
  Z.tiny = Z.tiny || X.tiny || Y.tiny || X.minmag * Y.minmag < detail::kTiny;
  if constexpr (!Ar::exact) {
    Z.phi = X.phi + Y.phi + Ar::prod;
    Z.alpha = 1.01 * (X.alpha * Y.A + Y.alpha * X.A + X.alpha * Y.alpha) + Ar::tau;
    Z.minmag = X.minmag * Y.minmag;
    Z.settle(X.A * Y.A * (1 + 0x1p-50));
  }
}

// C = op(A)·op(B) (ta, tb: transpose), or C += it (accumulate into C).
// a_lower: op(A) is lower triangular; c_lower: only C's lower triangle is wanted
// (entries above it are left as they were: zero for a fresh C, to be masked).
template <class S>
void mm_into(BMat<S>& C, bool accumulate, const BMat<S>& A, bool ta, const BMat<S>& B, bool tb, bool a_lower = false,
             bool c_lower = false) {
  using Ar = Arith<S>;
  const bool track = Arith<S>::track && A.has_mag && B.has_mag;
  const Dense<S> Bt = tb ? detail::transpose(B.val) : Dense<S>();
  const Dense<S> Btm = track && tb ? detail::transpose(B.mag) : Dense<S>();
  const Dense<S>& bv = tb ? Bt : B.val;
  const Dense<S>& bm = tb ? Btm : B.mag;
  const Idx m = ta ? A.val.cols : A.val.rows, k = ta ? A.val.rows : A.val.cols;
  if (k != bv.rows) throw std::logic_error("fast engine: inner dimensions differ");
  if (!accumulate) {
    C = BMat<S>::zero(m, bv.cols, track);
  } else if (C.rows() != m || C.cols() != bv.cols || C.has_mag != track) {
    throw std::logic_error("fast engine: accumulated shapes differ");
  }
  const int lo_zero = (A.lo_zero ? 1 : 0) | (B.lo_zero ? 2 : 0);
  mac_counter().fetch_add(static_cast<std::uint64_t>(m * bv.cols * k) * (track ? 2 : 1), std::memory_order_relaxed);
  detail::gemm(C.val, A.val, ta, bv, a_lower, c_lower, lo_zero);
  if (track) detail::gemm(C.mag, A.mag, ta, bm, a_lower, c_lower, lo_zero);
  C.lo_zero = false;
  C.finite = (accumulate ? C.finite : true) && A.finite && B.finite;
  C.tiny = (accumulate ? C.tiny : false) || A.tiny || B.tiny || A.minmag * B.minmag < detail::kTiny;
  if constexpr (!Ar::exact) {
    const double kk = static_cast<double>(k);
    const double blocks = static_cast<double>((k + Ar::block - 1) / Ar::block);
    const double base = A.phi + B.phi + Ar::base;
    const double cross = kk * (1.01 * (A.alpha * B.A + B.alpha * A.A + A.alpha * B.alpha) + Ar::tau);
    // A sum of k products of magnitudes: at most k·A_A·A_B (plus C's own);
    // a nonzero one is at least one nonzero product.
    const double mmax = kk * A.A * B.A * (1 + 0x1p-50) + (accumulate ? C.A : 0);
    C.minmag = std::min(accumulate ? C.minmag : INFINITY, A.minmag * B.minmag);
    if (accumulate) {
      C.phi = std::max(C.phi, base) + Ar::step * blocks;
      C.alpha = C.alpha * (1 + 0x1p-40) + cross;
    } else {
      C.phi = base + Ar::step * blocks;
      C.alpha = cross;
    }
    C.settle(mmax * (1 + 0x1p-50));
  }
}

template <class S> BMat<S> mm(const BMat<S>& A, bool ta, const BMat<S>& B, bool tb, bool a_lower = false, bool c_lower = false) {
  BMat<S> C;
  mm_into(C, false, A, ta, B, tb, a_lower, c_lower);
  return C;
}

// X ← op(X, Y) on the values (and the magnitudes, where kept); X's bound
// becomes that of the product of X and Y.
template <class S, class Op> void multiply_in(BMat<S>& X, const BMat<S>& Y, Op op) {
  op(X.val, Y.val);
  X.lo_zero = false;
  if (X.has_mag) op(X.mag, Y.mag);
  BMat<S> Z;
  Z.finite = X.finite, Z.tiny = X.tiny;
  bound_product(Z, X, Y);
  X.phi = Z.phi, X.alpha = Z.alpha, X.finite = Z.finite, X.tiny = Z.tiny, X.A = Z.A, X.minmag = Z.minmag;
}

// X ⊙ Y (same shape).
template <class S> void had(BMat<S>& X, const BMat<S>& Y) {
  multiply_in(X, Y, [](auto& x, const auto& y) { detail::mul(x, y); });
}
// Row i of X times r(i) (r: rows × 1).
template <class S> void scale_rows(BMat<S>& X, const BMat<S>& r) {
  multiply_in(X, r, [](auto& x, const auto& y) { detail::scale_rows(x, y); });
}
// X times the 1 × 1 matrix s.
template <class S> void scale(BMat<S>& X, const BMat<S>& s) {
  multiply_in(X, s, [](auto& x, const auto& y) { detail::scale(x, y); });
}
// X + Y (same shape).
template <class S> void add(BMat<S>& X, const BMat<S>& Y) {
  detail::add(X.val, Y.val);
  X.lo_zero = false;
  if (X.has_mag) detail::add(X.mag, Y.mag);
  X.finite = X.finite && Y.finite;
  X.tiny = X.tiny || Y.tiny;
  if constexpr (!Arith<S>::exact) {
    X.phi = std::max(X.phi, Y.phi) + Arith<S>::add;
    X.alpha = X.alpha + Y.alpha + Arith<S>::tau;
    X.minmag = std::min(X.minmag, Y.minmag);  // magnitudes are ≥ 0: a nonzero sum has a nonzero term
    X.settle((X.A + Y.A) * (1 + 0x1p-50));
  }
}
// Exact: zeroes the strict upper triangle (the causal mask with the diagonal).
template <class S> void zero_upper(BMat<S>& X) {
  detail::zero_upper(X.val);
  if (X.has_mag) detail::zero_upper(X.mag);
}
template <class S> BMat<S> rows(const BMat<S>& X, Idx r0, Idx count) {
  BMat<S> R;
  R.val = detail::rows_of(X.val, r0, count);
  if (X.has_mag) R.mag = detail::rows_of(X.mag, r0, count);
  R.has_mag = X.has_mag;
  R.phi = X.phi, R.alpha = X.alpha, R.A = X.A, R.finite = X.finite, R.minmag = X.minmag, R.tiny = X.tiny, R.lo_zero = X.lo_zero;
  return R;
}

}  // namespace ops
}  // namespace hla::fast
