// The certified gradient reference at scale (gradient_internal.hpp
// fast_group_gradient): one group task's dq, dk, dv (and dstate) by the
// double-double engine's backward (hla/fast/backward.hpp), every element
// certified from a bound on its error:
//   |ĝ − g| ≤ φ·2^-106·M(|Ĝ|) + α + M(E),
// where Ĝ is the upstream ∂L/∂Y the engine was given, M(·) the backward on
// absolute values of the inputs with that upstream (the gradient is linear in
// the upstream and the backward only adds terms, so J^T(Ĝ − G) is bounded by
// M(|Ĝ − G|) ≤ M(E)), φ, α the engine's running bound, and E a bound on
// |Ĝ − G| per element: 0 without normalize (Ĝ = [do | dden] exactly), else
// the error of [do/D | dden − ⟨do, num⟩/D²] formed in binary128 from the
// engine's own num and den and their bounds.
#include "../gradient_internal.hpp"
#include "../internal.hpp"
#include "certify.hpp"
#include "heads.hpp"

#include "hla/bounds.hpp"
#include "hla/fast/backward.hpp"

#include <cmath>

namespace hla::check {
namespace {

using fast::BMat;
using fast::Dense;
using fast::HeadGradient;

constexpr double u2 = 0x1p-106;

// One query head: the upstream the engine takes (Ĝ), its SPEC §9 magnitude
// (|do|/|D|, |dden| + Σ|do|·M_num/D²) and the error bound E of Ĝ; false
// where a normalized token's D (or, clamped, its sign or branch) is not
// bounded away from the pole.
struct Upstream {
  Dense<DD> G;
  Dense<double> mag, err;
  bool normalized = false;
};
bool upstream(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index h, Index t0,
              Index t1, const fast::HeadResult<DD>* Y, const fast::HeadResult<double>* MY, Upstream& u) {
  const Index n = t1 - t0, dv = p.dv;
  u.G = Dense<DD>::zero(n, dv + 1);
  u.mag = Dense<double>::zero(n, dv + 1);
  u.err = Dense<double>::zero(n, dv + 1);
  u.normalized = p.opt.normalize;
  auto up_of = [&](Index t, Index c) { return dout[p.out_index(b, h, t0 + t, c)]; };
  auto dd_of = [&](Index t) { return dden.empty() ? 0.0 : dden[p.den_index(b, h, t0 + t)]; };
  if (!p.opt.normalize) {
    for (Index t = 0; t < n; ++t) {
      for (Index c = 0; c < dv; ++c) u.G.set(t, c, DD{up_of(t, c), 0}), u.mag.at(t, c) = std::fabs(up_of(t, c));
      u.G.set(t, dv, DD{dd_of(t), 0}), u.mag.at(t, dv) = std::fabs(dd_of(t));
    }
    return true;
  }
  const f113 eps = from_rational<f113>(p.opt.eps);
  const bool clamp = p.opt.eps_mode == EpsMode::clamp;
  auto bound = [&](const fast::HeadResult<double>& m, Index t, Index c, double phi, double alpha, bool tiny) {
    const size_t row = static_cast<size_t>(t);
    const double M = mag_up(m.val.at(t, c), m.phi[row], m.alpha[row], m.tiny);
    return bound_up(phi, alpha, tiny, M);
  };
  for (Index t = 0; t < n; ++t) {
    const size_t row = static_cast<size_t>(t);
    const double phi = Y->phi[row], alpha = Y->alpha[row];
    const f113 den = fast::f113_from_dd(Y->val.at(t, dv));
    const f113 e_den = f113(bound(*MY, t, dv, phi, alpha, Y->tiny));
    // D = den ⊕ ε within e_D; clamped, the sign and the branch of D must be the exact one's.
    bool flat = false;
    f113 D, e_D = e_den;
    if (clamp) {
      const f113 a = abs(den);
      if (!(a > e_den * 2) || !(abs(a - eps) > e_den * 2)) return false;
      flat = a < eps;
      D = normalizer(den, eps, EpsMode::clamp);
      e_D = flat ? eps * f113(0x1p-112) : e_den + eps * f113(0x1p-112);
    } else {
      D = den + eps;
      e_D = e_den + abs(eps) * f113(0x1p-112) + abs(D) * f113(0x1p-112);
    }
    const f113 aD = abs(D);
    if (!(aD > e_D * 4)) return false;
    const f113 lo = aD - e_D;  // |exact D| ≥ lo
    const double aDd = static_cast<double>(aD);
    f113 s = 0, s_err = 0, s_abs = 0;
    for (Index c = 0; c < dv; ++c) {
      const f113 g = f113(up_of(t, c)), y = g / D;
      const fast::DD yd = fast::dd_from_f113(y);
      u.G.set(t, c, yd);
      u.mag.at(t, c) = std::fabs(up_of(t, c)) / aDd * (1 + 0x1p-50);  // ≥ |do|/|D|: an upper bound, as every magnitude
      const f113 E = abs(g) * e_D / (aD * lo) + abs(y) * f113(0x1p-104);
      u.err.at(t, c) = static_cast<double>(E) * (1 + 0x1p-50);
      const f113 num = fast::f113_from_dd(Y->val.at(t, c));
      s += g * num;
      s_abs += abs(g * num);
      s_err += abs(g) * f113(bound(*MY, t, c, phi, alpha, Y->tiny));
    }
    const double gd = dd_of(t);
    if (flat) {
      u.G.set(t, dv, DD{gd, 0});
      u.mag.at(t, dv) = std::fabs(gd);
      continue;
    }
    s_err += s_abs * f113(static_cast<double>(dv + 1) * 0x1p-112);
    const f113 term = s / (D * D), y = f113(gd) - term;
    u.G.set(t, dv, fast::dd_from_f113(y));
    double m = 0;
    for (Index c = 0; c < dv; ++c) m += std::fabs(up_of(t, c)) * mag_up(MY->val.at(t, c), MY->phi[row], MY->alpha[row], MY->tiny);
    u.mag.at(t, dv) = (std::fabs(gd) + m / (aDd * aDd)) * (1 + 0x1p-50);
    const f113 E = s_err / (lo * lo) + abs(s) * (1 / (lo * lo) - 1 / (aD * aD)) + abs(term) * f113(0x1p-108) + abs(y) * f113(0x1p-104);
    u.err.at(t, dv) = static_cast<double>(E) * (1 + 0x1p-50);
    if (!std::isfinite(u.err.at(t, dv)) || !std::isfinite(u.mag.at(t, dv))) return false;
  }
  return true;
}

// A magnitude run in double-double as the double results it is read as:
// values rounded to nearest, φ = 0 (mag_up then adds 2^-52, which bounds
// that rounding and the double-double run's own error, ≤ 2^-100 relative).
fast::HeadResult<double> as_double(const fast::HeadResult<DD>& x) {
  fast::HeadResult<double> r = fast::HeadResult<double>::zero(x.val.rows, x.val.cols, false);
  for (Index t = 0; t < x.val.rows; ++t)
    for (Index c = 0; c < x.val.cols; ++c) r.val.at(t, c) = x.val.at(t, c).hi + x.val.at(t, c).lo;
  r.alpha = x.alpha, r.tiny = x.tiny, r.finite = x.finite;
  return r;
}
fast::HeadResult<double> as_double(const fast::HeadResult<double>& x) { return x; }
HeadGradient<double> as_double(HeadGradient<double> x) { return x; }
HeadGradient<double> as_double(const HeadGradient<DD>& x) {
  HeadGradient<double> r{as_double(x.dq), as_double(x.dk), as_double(x.dv), {}, x.finite};
  for (const BMat<DD>& m : x.dstate) {
    BMat<double> d = BMat<double>::zero(m.rows(), m.cols(), false);
    for (Index a = 0; a < m.rows(); ++a)
      for (Index c = 0; c < m.cols(); ++c) d.val.at(a, c) = m.val.at(a, c).hi + m.val.at(a, c).lo;
    d.phi = 0, d.alpha = m.alpha, d.tiny = m.tiny, d.finite = m.finite;
    r.dstate.push_back(std::move(d));
  }
  return r;
}

// The engine's three runs of one query head: the values in double-double, the
// magnitudes M(Ȳmag) and the upstream's error carried through M(E), the last
// two on absolute values in A (double-double on small heads: their magnitudes
// are stored as the nearest double, as binary128's were; double on large ones).
struct HeadRuns {
  HeadGradient<DD> val;
  HeadGradient<double> mag, err;
  bool has_err = false;
};
template <class A>
bool head_runs(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index h, Index t0,
               Index t1, Index chunk, HeadRuns& r) {
  const fast::FastHead<DD> hv = head_for<DD>(p, p.opt, b, h, t0, t1, chunk, false);
  const fast::FastHead<A> ha = head_for<A>(p, p.opt, b, h, t0, t1, chunk, true);
  const bool norm = p.opt.normalize;
  const fast::Tape<DD> tv = fast::forward_tape(hv, norm);
  const fast::Tape<A> ta = fast::forward_tape(ha, norm);
  if (!tv.finite || !ta.finite) return false;
  Upstream u;
  const fast::HeadResult<double> MY = norm ? as_double(ta.outputs) : fast::HeadResult<double>{};
  if (!upstream(p, dout, dden, b, h, t0, t1, norm ? &tv.outputs : nullptr, norm ? &MY : nullptr, u)) return false;
  r.val = fast::backward_head(hv, tv, input_matrix(std::move(u.G)));
  auto abs_input = [](const fast::Dense<double>& m) {
    if constexpr (std::is_same_v<A, double>) return input_matrix(m);
    else {
      fast::Dense<DD> x = fast::Dense<DD>::zero(m.rows, m.cols);
      for (Index i = 0; i < m.rows; ++i)
        for (Index j = 0; j < m.cols; ++j) x.set(i, j, DD{m.at(i, j), 0});
      return input_matrix(std::move(x));
    }
  };
  r.mag = as_double(fast::backward_head(ha, ta, abs_input(u.mag)));
  if (!r.val.finite || !r.mag.finite) return false;
  r.has_err = norm;
  if (norm) {
    r.err = as_double(fast::backward_head(ha, ta, abs_input(u.err)));
    if (!r.err.finite) return false;
  }
  return true;
}

// An element: its double-double value, its error bound and its magnitude
// (stored rounded up: the double engine's value raised by its own bound, so
// that it bounds the exact magnitude, within 2(φ + 1)·2^-53 of it).
struct Cell {
  DD v;
  double e, m;
};
// Element (t, c) of one of the runs' tensors.
Cell cell(const fast::HeadResult<DD>& v, const fast::HeadResult<double>& m, const fast::HeadResult<double>* e, Index t, Index c) {
  const size_t row = static_cast<size_t>(t);
  const double M = mag_up(m.val.at(t, c), m.phi[row], m.alpha[row], m.tiny);
  double err = bound_up(v.phi[row], v.alpha[row], v.tiny, M * (1 + 0x1p-30));  // 2^-30: |Ĝ| vs its magnitude's upstream
  if (e) err += mag_up(e->val.at(t, c), e->phi[row], e->alpha[row], e->tiny) * (1 + 0x1p-40);
  return {v.val.at(t, c), err, M};
}
Cell cell(const BMat<DD>& v, const BMat<double>& m, const BMat<double>* e, Index r, Index c) {
  const double M = mag_up(m.val.at(r, c), m.phi, m.alpha, m.tiny);
  double err = bound_up(v.phi, v.alpha, v.tiny, M * (1 + 0x1p-30));
  if (e) err += mag_up(e->val.at(r, c), e->phi, e->alpha, e->tiny) * (1 + 0x1p-40);
  return {v.val.at(r, c), err, M};
}
// a + b as double-doubles (error ≤ 3.01·2^-106·(|a| + |b|): matrix.hpp), the bounds added.
Cell sum(const Cell& a, const Cell& b) {
  double s, t;
  two_sum(a.v.hi, b.v.hi, s, t);
  t += a.v.lo + b.v.lo;
  double hi, lo;
  two_sum(s, t, hi, lo);
  const double mags = (std::fabs(a.v.hi) + std::fabs(b.v.hi)) * (1 + 0x1p-50) + a.e + b.e;
  return {{hi, lo}, (a.e + b.e + 4 * u2 * mags) * (1 + 0x1p-50), (a.m + b.m) * (1 + 0x1p-52)};
}
Cell half(const Cell& a) { return {{a.v.hi / 2, a.v.lo / 2}, a.e / 2, a.m / 2}; }

// The certified double of c, or its nearest double with kUncertified.
double certify(const Cell& c, uint8_t& flag) {
  double r = 0;
  if (screen(Bounded{c.v, c.e}, r)) return r;
  const f113 x = fast::f113_from_dd(c.v);
  if (certifies(x, f113(c.e) * (1 + f113(0x1p-60)))) return static_cast<double>(x);
  flag = kUncertified;
  return c.v.hi + c.v.lo;
}

}  // namespace

bool fast_group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index kvh,
                         Index t0, Index t1, Index chunk, GroupGradient<double>& x, GroupGradient<double>& flags) {
  if (!fast::supports(p.opt.variant)) return false;
  const Index L = t1 - t0, group = p.heads / p.kv_heads;
  x = {}, flags = {};
  x.dk = x.mdk = flags.dk = Mat<double>::Zero(L, p.d);
  x.dv = x.mdv = flags.dv = Mat<double>::Zero(L, p.dv);
  std::vector<Cell> kc(static_cast<size_t>(L * p.d)), vc(static_cast<size_t>(L * p.dv));
  for (Index i = 0; i < group; ++i) {
    const Index h = kvh * group + i;
    HeadRuns r;
    const bool small = static_cast<double>(L) * p.d * (p.d + p.dv) <= 0x1p22;
    if (!(small ? head_runs<DD>(p, dout, dden, b, h, t0, t1, chunk, r) : head_runs<double>(p, dout, dden, b, h, t0, t1, chunk, r))) return false;
    auto err_of = [&](const HeadGradient<double>& g, int which) -> const fast::HeadResult<double>* {
      if (!r.has_err) return nullptr;
      return which == 0 ? &g.dq : which == 1 ? &g.dk : &g.dv;
    };
    Mat<double> dq(L, p.d), mdq(L, p.d), fq = Mat<double>::Zero(L, p.d);
    for (Index t = 0; t < L; ++t) {
      for (Index c = 0; c < p.d; ++c) {
        const Cell q = cell(r.val.dq, r.mag.dq, err_of(r.err, 0), t, c);
        uint8_t f = 0;
        dq(t, c) = certify(q, f), mdq(t, c) = q.m, fq(t, c) = f;
        const size_t at = static_cast<size_t>(t * p.d + c);
        const Cell k = cell(r.val.dk, r.mag.dk, err_of(r.err, 1), t, c);
        kc[at] = i == 0 ? k : sum(kc[at], k);
      }
      for (Index c = 0; c < p.dv; ++c) {
        const size_t at = static_cast<size_t>(t * p.dv + c);
        const Cell v = cell(r.val.dv, r.mag.dv, err_of(r.err, 2), t, c);
        vc[at] = i == 0 ? v : sum(vc[at], v);
      }
    }
    x.dq.push_back(std::move(dq)), x.mdq.push_back(std::move(mdq)), flags.dq.push_back(std::move(fq));
    if (!p.has_state()) continue;
    // ∂L/∂X0 of this head, symmetric members along symmetric directions ((G + Gᵀ)/2).
    const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
    StateMats<double> ds, dm, df;
    for (size_t m = 0; m < layout.size(); ++m) {
      const BMat<DD>& v = r.val.dstate[m];
      const BMat<double>& mg = r.mag.dstate[m];
      const BMat<double>* er = r.has_err ? &r.err.dstate[m] : nullptr;
      Mat<double> a(v.rows(), v.cols()), am(v.rows(), v.cols()), af = Mat<double>::Zero(v.rows(), v.cols());
      for (Index rr = 0; rr < v.rows(); ++rr)
        for (Index c = 0; c < v.cols(); ++c) {
          Cell z = cell(v, mg, er, rr, c);
          if (layout[m].symmetric && c < layout[m].rows) z = half(sum(z, cell(v, mg, er, c, rr)));
          uint8_t f = 0;
          a(rr, c) = certify(z, f), am(rr, c) = z.m, af(rr, c) = f;
        }
      ds.push_back(std::move(a)), dm.push_back(std::move(am)), df.push_back(std::move(af));
    }
    x.dstate.push_back(std::move(ds)), x.mdstate.push_back(std::move(dm)), flags.dstate.push_back(std::move(df));
  }
  for (Index t = 0; t < L; ++t) {
    for (Index c = 0; c < p.d; ++c) {
      uint8_t f = 0;
      const Cell& k = kc[static_cast<size_t>(t * p.d + c)];
      x.dk(t, c) = certify(k, f), x.mdk(t, c) = k.m, flags.dk(t, c) = f;
    }
    for (Index c = 0; c < p.dv; ++c) {
      uint8_t f = 0;
      const Cell& v = vc[static_cast<size_t>(t * p.dv + c)];
      x.dv(t, c) = certify(v, f), x.mdv(t, c) = v.m, flags.dv(t, c) = f;
    }
  }
  return true;
}

}  // namespace hla::check
