// The certified double-double reference of one head (fast_reference.hpp).
#include "hla/engine/fast_reference.hpp"

#include "hla/bounds.hpp"
#include "hla/fast/engine.hpp"
#include "hla/engine/detail.hpp"
#include "certify.hpp"

#include <cmath>

namespace hla::fast {

DD dd_from_f113(const f113& x) {
  const double hi = static_cast<double>(x);
  if (!std::isfinite(hi)) return {hi, 0};
  return {hi, static_cast<double>(x - f113(hi))};
}

f113 f113_from_dd(const DD& x) { return f113(x.hi) + f113(x.lo); }

}  // namespace hla::fast

namespace hla::engine {

using fast::DD;

namespace {

// An upper bound, as a binary128 number, of phi·2^-106·M + alpha for the
// magnitude mag (a computed DD magnitude, itself within the same bound of M).
f113 bound_of(double phi, double alpha, bool tiny, const DD& mag) {
  const f113 u2 = f113(0x1p-106);
  const f113 a = tiny ? f113(alpha) : f113(0);
  const f113 M = (fast::f113_from_dd(mag) + a) * (1 + f113(phi) * u2 * 2);  // M ≤ (M̂ + alpha)/(1 − phi·u²)
  return (f113(phi) * u2 * M + a) * (1 + f113(0x1p-60));
}

}  // namespace

namespace {

// The normalized output RN(N/D) for D of certain sign, decided in double
// without dividing: with r a candidate and m = r ± g (the midpoints to its
// neighbours, exact as pairs), RN(N/D) = r when m_up·D − N and m_dn·D − N
// have the signs of D, beyond their uncertainty. Declines (false) when unsure.
bool screen_quotient(Bounded N, Bounded D, double& r) {
  if (D.x.hi < 0) N.x.hi = -N.x.hi, N.x.lo = -N.x.lo, D.x.hi = -D.x.hi, D.x.lo = -D.x.lo;  // exact
  // Far from under- and overflow, so that the products with powers of 2 below are exact.
  if (!(D.x.hi >= 0x1p-800 && D.x.hi <= 0x1p800) || !(std::fabs(N.x.hi) >= 0x1p-800 && std::fabs(N.x.hi) <= 0x1p800)) return false;
  // Candidate: one Newton-like correction of Nh/Dh (its accuracy only decides whether we succeed).
  const double q1 = N.x.hi / D.x.hi;
  const double p = q1 * D.x.hi, e = std::fma(q1, D.x.hi, -p);
  const double rem = ((N.x.hi - p) - e) + N.x.lo - q1 * D.x.lo;
  r = q1 + rem / D.x.hi;
  const double g = half_gap(r);
  if (g == 0) return false;
  for (const double side : {1.0, -1.0}) {
    const double m_g = side * g;  // m = r + m_g
    const double p1 = r * D.x.hi, e1 = std::fma(r, D.x.hi, -p1);
    // Sterbenz: p1 − Nh is exact when they are within a factor 2.
    if (!(p1 > 0 && N.x.hi > 0 ? (p1 <= 2 * N.x.hi && N.x.hi <= 2 * p1) : (p1 < 0 && N.x.hi < 0 && p1 >= 2 * N.x.hi && N.x.hi >= 2 * p1)))
      return false;
    const double big = p1 - N.x.hi;
    const double t2 = r * D.x.lo, gh = m_g * D.x.hi, gl = m_g * D.x.lo;  // gh, gl exact (g a power of 2, no underflow here)
    const double small = (((e1 + t2) + gh) + gl) - N.x.lo;
    const double Z = big + small;
    // Roundings: t2 (u|r·Dl|), the four additions in small (≤ 4u·Σ|terms|·1.01), the last one (u|Z|).
    const double terms = std::fabs(e1) + std::fabs(t2) + std::fabs(gh) + std::fabs(gl) + std::fabs(N.x.lo);
    const double comp = (0x1p-53 * std::fabs(t2) + 4.1 * 0x1p-53 * terms + 0x1p-53 * std::fabs(Z)) * 1.01 + 0x1p-1060;
    // Exact inputs: m·D_ex − N_ex is within |m|·e_D + e_N of m·D − N.
    const double input = (std::fabs(r) + g) * D.e + N.e;
    const double margin = (comp + input) * (1 + 0x1p-40);
    if (side > 0 ? !(Z > margin) : !(Z < -margin)) return false;
  }
  return true;
}

// A head's values in double-double and, on large heads, its magnitudes by the
// double engine on absolute values (fast_head).
struct HeadValuesDD {
  bool large = false;
  fast::HeadResult<DD> r;
  fast::HeadResult<double> mr;  // large heads only
  // The stored magnitude of element (t, c) and an upper bound of the exact one.
  void magnitude(Index t, Index c, double& stored, double& up) const {
    if (!large) {
      const DD m = r.mag.at(t, c);
      stored = m.hi + m.lo;
      up = (m.hi * (1 + 0x1p-50) + (r.tiny ? r.alpha[static_cast<size_t>(t)] : 0)) * (1 + 0x1p-60);
      return;
    }
    // |m̂ − M| ≤ phi·2^-53·M + alpha: M ≤ (m̂ + alpha)(1 + 2(phi + 1)·2^-53), the +1 for this line's roundings.
    stored = mr.val.at(t, c);
    up = (stored + (mr.tiny ? mr.alpha[static_cast<size_t>(t)] : 0)) * (1 + 2 * (mr.phi[static_cast<size_t>(t)] + 1) * 0x1p-53);
  }
};

// Evaluates head (b, h), tokens [t0, t1), into v; false when either evaluation overflows.
bool evaluate_dd(const BatchProblem& p, Index b, Index h, Index t0, Index t1, Index chunk, double double_magnitudes_above,
                 HeadValuesDD& v) {
  const Options& o = p.opt;
  const Index n = t1 - t0, dv = p.dv;
  auto q_at = [&](Index t, Index c) { return DD{p.q[p.q_index(b, h, t0 + t, c)], 0}; };
  auto k_at = [&](Index t, Index c) { return DD{p.k[p.k_index(b, h, t0 + t, c)], 0}; };
  auto v_at = [&](Index t, Index c) { return DD{p.v[p.v_index(b, h, t0 + t, c)], 0}; };
  // Small heads: magnitudes in double-double too (rounded to nearest, as
  // binary128 stores them). Large heads: the values in double-double and the
  // magnitudes by the double engine on absolute values, with its own bound
  // (half the double-double work; a magnitude only scales scores).
  v.large = static_cast<double>(n) * p.d * (p.d + dv) > double_magnitudes_above;
  fast::FastHead<DD> fh = fast::make_fast_head<DD>(o, n, p.d, dv, q_at, k_at, v_at, chunk, !v.large);
  // An initial state: the carry before token 0, its entries exact inputs.
  const BatchProblem::StateView X0 = p.state_of(b, h, t0);  // none: no members, the carry stays zero
  fast::set_initial_carry(fh, X0.layout, [&](size_t i, Index r, Index c) { return DD{X0.at(i, r, c), 0}; });
  v.r = fast::evaluate_head(fh);
  if (!v.r.finite) return false;
  if (!v.large) return true;
  Options a = o;
  a.scale = abs(o.scale), a.normalize = false;
  auto abs_at = [&](const std::vector<double>& x, auto index) {
    return [&x, index](Index t, Index c) { return std::fabs(x[index(t, c)]); };
  };
  fast::FastHead<double> mh =
      fast::make_fast_head<double>(a, n, p.d, dv, abs_at(p.q, [&](Index t, Index c) { return p.q_index(b, h, t0 + t, c); }),
                                   abs_at(p.k, [&](Index t, Index c) { return p.k_index(b, h, t0 + t, c); }),
                                   abs_at(p.v, [&](Index t, Index c) { return p.v_index(b, h, t0 + t, c); }), chunk, false);
  fast::set_initial_carry(mh, X0.layout, [&](size_t i, Index r, Index c) { return std::fabs(X0.at(i, r, c)); });
  v.mr = fast::evaluate_head(mh);
  return v.mr.finite;
}

// ε as the DD engine holds it, with its error bounds: e (binary128, within
// 2^-113·ε of the exact ε) and, for the double screens, dd within e_d (2^-113 + 2^-106 of ε, 2^-105 with margin).
struct EpsDD {
  f113 x, e;
  DD dd;
  double e_d;
  explicit EpsDD(const Rational& eps)
      : x(from_rational<f113>(eps)),
        e(x * f113(0x1p-112) + f113(0x1p-1074)),
        dd(fast::dd_from_f113(x)),
        e_d(dd.hi * 0x1p-104 + 0x1p-1070) {}
};

// The divisor den ⊕ ε (or the clamp) as a bounded DD Div, for the quotient
// screen; false when its sign is not certain (then the screen is not tried).
bool bounded_divisor(const Options& o, const DD& den, const Bounded& Dv, const EpsDD& eps, Bounded& Div) {
  const DD& eps_dd = eps.dd;
  if (o.eps_mode == EpsMode::add) {
    double s, t0_, hi, lo;
    two_sum(den.hi, eps_dd.hi, s, t0_);
    const double w = den.lo + eps_dd.lo, t1_ = t0_ + w;
    two_sum(s, t1_, hi, lo);
    Div = {{hi, lo}, (Dv.e + eps.e_d + 4 * 0x1p-106 * (std::fabs(den.hi) + eps_dd.hi)) * (1 + 0x1p-40)};
    return std::fabs(hi) * (1 - 0x1p-50) > Div.e;
  }
  // sign(den)·max(|den|, ε) (sign(0) = +1), exactly from the DD values;
  // max and |·| are 1-Lipschitz, so its error is at most e_den + e_ε.
  const bool neg = den.hi < 0;
  const DD a = neg ? DD{-den.hi, -den.lo} : den;
  const bool big = a.hi > eps_dd.hi || (a.hi == eps_dd.hi && a.lo >= eps_dd.lo);
  DD m = big ? a : eps_dd;
  if (neg) m = {-m.hi, -m.lo};
  Div = {m, (Dv.e + eps.e_d) * (1 + 0x1p-40)};
  return std::fabs(den.hi) * (1 - 0x1p-50) > Dv.e * (1 + 0x1p-40);  // the sign of den is certain
}

// The normalized output num / (den ⊕ ε) of an element, correctly rounded:
// the quotient screen when the divisor's sign is certain (div_ok), else binary128
// with its flags; false when it is not certified. e113(x, up): the error bound
// of x, num's or den's value in binary128, whose magnitude is at most up.
template <class Err>
bool normalized_out(const Options& o, const DD& num, const DD& den, const Bounded& Nv, const Bounded& Div, bool div_ok, Err&& e113,
                    double mN_up, double mD_up, const EpsDD& eps, double& out_value, uint8_t& flags) {
  double ro = 0;
  if (div_ok && screen_quotient(Nv, Div, ro)) {
    out_value = ro;
    return true;
  }
  // Binary128: normalized_error_bound takes exact num, den and bounds of
  // their perturbations; ε's rounding is one more perturbation of the divisor.
  const f113 N = fast::f113_from_dd(num), D = fast::f113_from_dd(den);
  const f113 out = N / normalizer(D, eps.x, o.eps_mode);
  out_value = static_cast<double>(out);
  const auto eO = normalized_error_bound(N, D, eps.x, o.eps_mode, e113(N, mN_up), e113(D, mD_up) + eps.e);
  // The binary128 quotient rounds once (2^-113) and normalizer/bound are
  // evaluated in binary128 (relative 2^-110 is ample for their roundings).
  if (!eO) flags |= kIllConditioned | kUncertified;
  else if (!certifies(out, *eO * (1 + f113(0x1p-100)) + abs(out) * f113(0x1p-110))) flags |= kUncertified;
  else return true;
  return false;
}

}  // namespace

FastHeadOutcome fast_head(const BatchProblem& p, Reference& ref, Index b, Index h, Index t0, Index t1, Index chunk,
                          double double_magnitudes_above) {
  const Options& o = p.opt;
  FastHeadOutcome res;
  if (!fast::supports(o.variant)) return res;
  const Index n = t1 - t0, dv = p.dv;
  HeadValuesDD v;
  if (!evaluate_dd(p, b, h, t0, t1, chunk, double_magnitudes_above, v)) return res;
  const fast::HeadResult<DD>& r = v.r;
  res.ok = true;
  const EpsDD eps(o.eps);
  Index last_bad = -1;
  for (Index t = 0; t < n; ++t) {
    const size_t row = static_cast<size_t>(t);
    const double phi = r.phi[row], alpha = r.alpha[row];
    // Binary128 fallbacks: the DD value converted may round once more (2^-113 of it); an upper bound of the magnitude serves.
    auto e113 = [&](const f113& x, double mag_up) { return bound_of(phi, alpha, r.tiny, DD{mag_up, 0}) + abs(x) * f113(0x1p-112); };
    const size_t di = p.den_index(b, h, t0 + t);
    const DD den = r.val.at(t, dv);
    double mD = 0, mD_up = 0;
    v.magnitude(t, dv, mD, mD_up);
    const Bounded Dv{den, bound_up(phi, alpha, r.tiny, mD_up)};
    bool bad = false;
    double rd = 0;
    ref.mag_den[di] = mD;
    if (screen(Dv, rd)) {
      ref.den[di] = rd;
    } else {
      const f113 D = fast::f113_from_dd(den);
      ref.den[di] = den.hi + den.lo;
      if (!certifies(D, e113(D, mD_up))) ref.den_flags[di] |= kUncertified, bad = true;
    }
    Bounded Div{{0, 0}, 0};
    const bool div_ok = o.normalize && bounded_divisor(o, den, Dv, eps, Div);
    for (Index c = 0; c < dv; ++c) {
      const size_t i = p.out_index(b, h, t0 + t, c);
      const DD num = r.val.at(t, c);
      double mN = 0, mN_up = 0;
      v.magnitude(t, c, mN, mN_up);
      const Bounded Nv{num, bound_up(phi, alpha, r.tiny, mN_up)};
      ref.num[i] = num.hi + num.lo;
      ref.mag_num[i] = mN;
      double ro = 0;
      if (!o.normalize) {
        ref.out[i] = ref.num[i];
        if (!screen(Nv, ro)) {
          const f113 N = fast::f113_from_dd(num);
          if (!certifies(N, e113(N, mN_up))) ref.flags[i] |= kUncertified, bad = true;
        }
        continue;
      }
      if (!normalized_out(o, num, den, Nv, Div, div_ok, e113, mN_up, mD_up, eps, ref.out[i], ref.flags[i])) bad = true;
    }
    if (bad) last_bad = t;
  }
  res.redo = last_bad + 1;
  return res;
}

}  // namespace hla::engine
