// RapidCheck generators for exact problems (n ∈ [0, 24],
// d, dv ∈ [1, 6], rational entries, γ ∈ {1} ∪ rationals in (0,1), random λ,
// normalize on/off). Everything shrinks towards small and simple: n, d, dv
// towards their minimum, entries towards 0 and small denominators, γ towards
// 1/2, λ towards 0.
#pragma once

#include "hla/evaluate.hpp"

#include <rapidcheck.h>

#include <ostream>
#include <utility>

namespace hla {
// RapidCheck prints generated values with operator<<.
inline std::ostream& operator<<(std::ostream& os, const Output<Rational>& o) {
  os << "Output{num rows=" << o.num.rows() << "}";
  return os;
}
}  // namespace hla

// Short type names in RapidCheck's counterexample listings.
template <> struct rc::ShowType<hla::Rational> {
  static void showType(std::ostream& os) { os << "Rational"; }
};
template <> struct rc::ShowType<hla::Problem<hla::Rational>> {
  static void showType(std::ostream& os) { os << "Problem<Rational>"; }
};
template <> struct rc::ShowType<hla::Mat<hla::Rational>> {
  static void showType(std::ostream& os) { os << "Mat<Rational>"; }
};

namespace hla::test {

// 0, 1, -1, 2, -2, 3, -3, 4, -4 (shrinks towards 0).
inline rc::Gen<int> small_int(int max_abs = 4) {
  return rc::gen::map(rc::gen::inRange(0, 2 * max_abs + 1), [](int x) { return x % 2 ? (x + 1) / 2 : -x / 2; });
}

// p/q with |p| ≤ 4, q ∈ [1, 4].
inline rc::Gen<Rational> rational_entry() {
  return rc::gen::apply([](int p, int q) { return Rational(p, q); }, small_int(), rc::gen::inRange(1, 5));
}

inline rc::Gen<Mat<Rational>> rational_matrix(Index rows, Index cols) {
  return rc::gen::map(rc::gen::container<std::vector<Rational>>(static_cast<size_t>(rows * cols), rational_entry()),
                      [rows, cols](const std::vector<Rational>& xs) {
                        Mat<Rational> m(rows, cols);
                        for (Index i = 0; i < rows * cols; ++i) m(i / cols, i % cols) = xs[static_cast<size_t>(i)];
                        return m;
                      });
}

// γ = 1 (one case in three) or a/(a+b) with a, b ∈ [1, 7].
inline rc::Gen<Rational> gamma_gen() {
  return rc::gen::weightedOneOf<Rational>(
      {{1, rc::gen::just(Rational(1))},
       {2, rc::gen::apply([](int a, int b) { return Rational(a, a + b); }, rc::gen::inRange(1, 8), rc::gen::inRange(1, 8))}});
}

inline rc::Gen<Rational> nonneg_rational() {
  return rc::gen::apply([](int p, int q) { return Rational(p, q); }, rc::gen::inRange(0, 5), rc::gen::inRange(1, 5));
}

// ε with a prime denominator no generated quantity has, so den + ε ≠ 0 exactly.
inline Rational property_eps() { return Rational(1, 1000003); }

struct Spec {
  Variant variant = Variant::hla2;
  Index max_n = 24;
  Index max_d = 6;
  bool random_masked = true;  // where the variant has an unmasked form
  bool random_ridge = true;   // hla2 only
  bool random_normalize = true;
  bool random_scale = false;  // scale ≠ 1 sometimes
  bool force_decay = false;   // γ < 1 always
};

inline rc::Gen<Options> options_gen(const Spec& s) {
  const bool unit_gamma = needs_unit_gamma(s.variant);
  return rc::gen::apply(
      [s, unit_gamma](bool unmasked, Rational gamma, Rational decayed, int ridge_on, Rational lambda, bool normalize, bool clamp,
                      int scale_on, Rational scale) {
        Options o;
        o.variant = s.variant;
        o.masked = !(s.random_masked && has_unmasked(s.variant) && unmasked);
        o.gamma = unit_gamma ? Rational(1) : (s.force_decay ? decayed : gamma);
        o.lambda = (s.random_ridge && has_ridge(s.variant) && ridge_on > 0) ? lambda : Rational(0);
        o.normalize = s.random_normalize && normalize;
        o.eps = property_eps();
        o.eps_mode = clamp ? EpsMode::clamp : EpsMode::add;
        o.scale = (s.random_scale && scale_on > 0 && scale != 0) ? scale : Rational(1);
        return o;
      },
      rc::gen::arbitrary<bool>(), gamma_gen(),
      rc::gen::apply([](int a, int b) { return Rational(a, a + b); }, rc::gen::inRange(1, 8), rc::gen::inRange(1, 8)),
      rc::gen::inRange(0, 2), nonneg_rational(), rc::gen::arbitrary<bool>(), rc::gen::arbitrary<bool>(), rc::gen::inRange(0, 2),
      rational_entry());
}

inline rc::Gen<Problem<Rational>> problem_gen(const Spec& s) {
  return rc::gen::mapcat(rc::gen::tuple(rc::gen::inRange<Index>(0, s.max_n + 1), rc::gen::inRange<Index>(1, s.max_d + 1),
                                        rc::gen::inRange<Index>(1, s.max_d + 1)),
                         [s](const std::tuple<Index, Index, Index>& shape) {
                           const auto [n, d, dv] = shape;
                           return rc::gen::apply(
                               [](Options o, Mat<Rational> q, Mat<Rational> k, Mat<Rational> v) {
                                 return Problem<Rational>{o, std::move(q), std::move(k), std::move(v)};
                               },
                               options_gen(s), rational_matrix(n, d), rational_matrix(n, d), rational_matrix(n, dv));
                         });
}

inline bool same(const Output<Rational>& a, const Output<Rational>& b) { return a.num == b.num && a.den == b.den && a.out == b.out; }

// The first element where two outputs differ, spelled out ("" when equal).
inline std::string first_difference(const Output<Rational>& a, const Output<Rational>& b, const char* an = "got", const char* bn = "want") {
  auto cell = [&](const char* what, Index t, Index c, const Rational& x, const Rational& y) {
    return std::string(what) + "[t=" + std::to_string(t) + (c >= 0 ? ", c=" + std::to_string(c) : "") + "]: " + an + " " + to_string(x) +
           ", " + bn + " " + to_string(y);
  };
  for (Index t = 0; t < a.num.rows(); ++t) {
    if (a.den(t) != b.den(t)) return cell("den", t, -1, a.den(t), b.den(t));
    for (Index c = 0; c < a.num.cols(); ++c)
      if (a.num(t, c) != b.num(t, c)) return cell("num", t, c, a.num(t, c), b.num(t, c));
    for (Index c = 0; c < a.out.cols(); ++c)
      if (a.out(t, c) != b.out(t, c)) return cell("out", t, c, a.out(t, c), b.out(t, c));
  }
  return "";
}

// RC_ASSERT(same(a, b)) that names the first differing element.
#define HLA_ASSERT_SAME(a, b, an, bn)                                          \
  do {                                                                         \
    const std::string diff_ = ::hla::test::first_difference((a), (b), an, bn); \
    if (!diff_.empty()) RC_FAIL(diff_);                                        \
  } while (0)

inline bool same_rows_upto(const Output<Rational>& a, const Output<Rational>& b, Index t) {
  return a.num.topRows(t + 1) == b.num.topRows(t + 1) && a.den.head(t + 1) == b.den.head(t + 1) &&
         a.out.topRows(t + 1) == b.out.topRows(t + 1);
}

// p with every token after t replaced by fresh random ones (inside a property).
inline Problem<Rational> with_future_redrawn(const Problem<Rational>& p, Index t) {
  const Index rest = p.n() - t - 1;
  auto p2 = p;
  p2.q.bottomRows(rest) = *rational_matrix(rest, p.d());
  p2.k.bottomRows(rest) = *rational_matrix(rest, p.d());
  p2.v.bottomRows(rest) = *rational_matrix(rest, p.dv());
  return p2;
}

// W = L ⊙ QKᵀ and the causal mask L (SPEC §1).
inline std::pair<Mat<Rational>, Mat<Rational>> masked_scores(const Problem<Rational>& p) {
  Mat<Rational> L = Mat<Rational>::Zero(p.n(), p.n());
  for (Index t = 0; t < p.n(); ++t)
    for (Index j = 0; j <= t; ++j) L(t, j) = 1;
  return {Mat<Rational>(p.q * p.k.transpose()).cwiseProduct(L), L};
}

}  // namespace hla::test
