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
#include "hla/engine/gradient_groups.hpp"
#include "hla/engine/detail.hpp"
#include "certify.hpp"
#include "hla/fast/heads.hpp"

#include "hla/bounds.hpp"
#include "hla/fast/backward.hpp"

#include <cmath>

namespace hla::engine {
namespace {

using fast::BMat;
using fast::Dense;
using fast::HeadGradient;

constexpr double u2 = 0x1p-106;

// The value scalar V of a run: double-double (the certified reference) or
// double (the proof of a stored reference on read).
template <class V> constexpr double kUnit = std::is_same_v<V, DD> ? 0x1p-106 : 0x1p-53;
template <class V> f113 to_f113(const V& x) {
  if constexpr (std::is_same_v<V, DD>) return fast::f113_from_dd(x);
  else return f113(x);
}
template <class V> V exact(double x) {
  if constexpr (std::is_same_v<V, DD>) return DD{x, 0};
  else return x;
}
template <class V> DD as_dd(const V& x) {
  if constexpr (std::is_same_v<V, DD>) return x;
  else return DD{x, 0};
}
// x rounded into V, and a bound of that rounding.
template <class V> V from_f113(const f113& x, f113& rounding) {
  if constexpr (std::is_same_v<V, DD>) {
    rounding = abs(x) * f113(0x1p-104);
    return fast::dd_from_f113(x);
  } else {
    rounding = abs(x) * f113(0x1p-52);
    return static_cast<double>(x);
  }
}
// phi·unit·M + alpha, rounded up (M_up ≥ M).
template <class V> double bound_in(double phi, double alpha, bool tiny, double M_up) {
  return phi * kUnit<V> * M_up * (1 + 0x1p-40) + (tiny ? alpha * (1 + 0x1p-40) : 0);
}

// One query head: the upstream the engine takes (Ĝ), its SPEC §9 magnitude
// (|do|/|D|, |dden| + Σ|do|·M_num/D²) and the error bound E of Ĝ; false
// where a normalized token's D (or, clamped, its sign or branch) is not
// bounded away from the pole.
template <class V> struct Upstream {
  Dense<V> G;
  Dense<double> mag, err;
  bool normalized = false;
};
template <class V>
bool upstream(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, Index b, Index h, Index t0, Index t1,
              const fast::HeadResult<V>* Y, const fast::HeadResult<double>* MY, const std::vector<double>& den_ref, Upstream<V>& u) {
  const Index n = t1 - t0, dv = p.dv;
  u.G = Dense<V>::zero(n, dv + 1);
  u.mag = Dense<double>::zero(n, dv + 1);
  u.err = Dense<double>::zero(n, dv + 1);
  u.normalized = p.opt.normalize;
  auto up_of = [&](Index t, Index c) { return dout[p.out_index(b, h, t0 + t, c)]; };
  auto dd_of = [&](Index t) { return dden.empty() ? 0.0 : dden[p.den_index(b, h, t0 + t)]; };
  if (!p.opt.normalize) {
    for (Index t = 0; t < n; ++t) {
      for (Index c = 0; c < dv; ++c) fast::put_entry(u.G, t, c, exact<V>(up_of(t, c))), u.mag.at(t, c) = std::fabs(up_of(t, c));
      fast::put_entry(u.G, t, dv, exact<V>(dd_of(t))), u.mag.at(t, dv) = std::fabs(dd_of(t));
    }
    return true;
  }
  const f113 eps = from_rational<f113>(p.opt.eps);
  const bool clamp = p.opt.eps_mode == EpsMode::clamp;
  auto bound = [&](const fast::HeadResult<double>& m, Index t, Index c, double phi, double alpha, bool tiny) {
    const size_t row = static_cast<size_t>(t);
    const double M = mag_up(m.val.at(t, c), m.phi[row], m.alpha[row], m.tiny);
    return bound_in<V>(phi, alpha, tiny, M);
  };
  for (Index t = 0; t < n; ++t) {
    const size_t row = static_cast<size_t>(t);
    const double phi = Y->phi[row], alpha = Y->alpha[row];
    const f113 den = to_f113(fast::get_entry(Y->val, t, dv));
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
    // The magnitudes' |D|: from the forward reference's den (the stored,
    // correctly rounded one), so that generation and proof compute the same.
    const double aDd = std::fabs(normalizer(den_ref[p.den_index(b, h, t0 + t)], to_double(p.opt.eps), p.opt.eps_mode));
    f113 s = 0, s_err = 0, s_abs = 0;
    for (Index c = 0; c < dv; ++c) {
      const f113 g = f113(up_of(t, c)), y = g / D;
      f113 rounding;
      fast::put_entry(u.G, t, c, from_f113<V>(y, rounding));
      u.mag.at(t, c) = std::fabs(up_of(t, c)) / aDd * (1 + 0x1p-50);  // ≥ |do|/|D|: an upper bound, as every magnitude
      const f113 E = abs(g) * e_D / (aD * lo) + abs(y) * f113(0x1p-110) + rounding;
      u.err.at(t, c) = static_cast<double>(E) * (1 + 0x1p-50);
      const f113 num = to_f113(fast::get_entry(Y->val, t, c));
      s += g * num;
      s_abs += abs(g * num);
      s_err += abs(g) * f113(bound(*MY, t, c, phi, alpha, Y->tiny));
    }
    const double gd = dd_of(t);
    if (flat) {
      fast::put_entry(u.G, t, dv, exact<V>(gd));
      u.mag.at(t, dv) = std::fabs(gd);
      continue;
    }
    s_err += s_abs * f113(static_cast<double>(dv + 1) * 0x1p-112);
    const f113 term = s / (D * D), y = f113(gd) - term;
    f113 rounding;
    fast::put_entry(u.G, t, dv, from_f113<V>(y, rounding));
    double m = 0;
    for (Index c = 0; c < dv; ++c) m += std::fabs(up_of(t, c)) * mag_up(MY->val.at(t, c), MY->phi[row], MY->alpha[row], MY->tiny);
    u.mag.at(t, dv) = (std::fabs(gd) + m / (aDd * aDd)) * (1 + 0x1p-50);
    const f113 E =
        s_err / (lo * lo) + abs(s) * (1 / (lo * lo) - 1 / (aD * aD)) + abs(term) * f113(0x1p-108) + abs(y) * f113(0x1p-110) + rounding;
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

// The engine's three runs of one query head: the values in V, the magnitudes
// M(Ȳmag) and the upstream's error carried through M(E), the last two on
// absolute values in A (double-double on small heads: their magnitudes are
// stored as the nearest double, as binary128's were; double on large ones).
template <class V> struct HeadRuns {
  HeadGradient<V> val;
  HeadGradient<double> mag, err;
  bool has_err = false;
};
template <class V, class A>
bool head_runs(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden, const std::vector<double>& den_ref,
               Index b, Index h, Index t0, Index t1, Index chunk, HeadRuns<V>& r) {
  const fast::FastHead<V> hv = head_for<V>(p, p.opt, b, h, t0, t1, chunk, false);
  const fast::FastHead<A> ha = head_for<A>(p, p.opt, b, h, t0, t1, chunk, true);
  const bool norm = p.opt.normalize;
  const fast::Tape<V> tv = fast::forward_tape(hv, norm);
  const fast::Tape<A> ta = fast::forward_tape(ha, norm);
  if (!tv.finite || !ta.finite) return false;
  Upstream<V> u;
  const fast::HeadResult<double> MY = norm ? as_double(ta.outputs) : fast::HeadResult<double>{};
  if (!upstream<V>(p, dout, dden, b, h, t0, t1, norm ? &tv.outputs : nullptr, norm ? &MY : nullptr, den_ref, u)) return false;
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

// An element: its value, its error bound and its magnitude (stored rounded
// up: an upper bound of the exact magnitude within 2^-50 of it, or for the
// double engine within 2(φ + 1)·2^-53).
struct Cell {
  DD v;
  double e, m;
};
// Element (t, c) of one of the runs' tensors.
template <class V>
Cell cell(const fast::HeadResult<V>& v, const fast::HeadResult<double>& m, const fast::HeadResult<double>* e, Index t, Index c) {
  const size_t row = static_cast<size_t>(t);
  const double M = mag_up(m.val.at(t, c), m.phi[row], m.alpha[row], m.tiny);
  double err = bound_in<V>(v.phi[row], v.alpha[row], v.tiny, M * (1 + 0x1p-30));  // 2^-30: |Ĝ| vs its magnitude's upstream
  if (e) err += mag_up(e->val.at(t, c), e->phi[row], e->alpha[row], e->tiny) * (1 + 0x1p-40);
  return {as_dd(v.val.at(t, c)), err, M};
}
template <class V> Cell cell(const BMat<V>& v, const BMat<double>& m, const BMat<double>* e, Index r, Index c) {
  const double M = mag_up(m.val.at(r, c), m.phi, m.alpha, m.tiny);
  double err = bound_in<V>(v.phi, v.alpha, v.tiny, M * (1 + 0x1p-30));
  if (e) err += mag_up(e->val.at(r, c), e->phi, e->alpha, e->tiny) * (1 + 0x1p-40);
  return {as_dd(v.val.at(r, c)), err, M};
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

// One group task's elements: dq of each query head (t·d + c), dk and dv
// summed over the group, and from a state each head's dstate (members in
// layout order, symmetric ones along symmetric directions, (G + Gᵀ)/2).
struct GroupCells {
  std::vector<std::vector<Cell>> dq;
  std::vector<Cell> dk, dv;
  std::vector<std::vector<std::vector<Cell>>> dstate;
};
template <class V>
bool group_cells(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                 const std::vector<double>& den_ref, Index b, Index kvh, Index t0, Index t1, Index chunk, GroupCells& out) {
  if (!fast::supports(p.opt.variant)) return false;
  const Index L = t1 - t0, group = p.heads / p.kv_heads;
  out = {};
  out.dk.resize(static_cast<size_t>(L * p.d)), out.dv.resize(static_cast<size_t>(L * p.dv));
  const bool small = static_cast<double>(L) * p.d * (p.d + p.dv) <= 0x1p22;
  const std::vector<StatePart> layout = p.has_state() ? state_layout(p.opt, p.d, p.dv) : std::vector<StatePart>{};
  for (Index i = 0; i < group; ++i) {
    const Index h = kvh * group + i;
    HeadRuns<V> r;
    if (!(small ? head_runs<V, DD>(p, dout, dden, den_ref, b, h, t0, t1, chunk, r)
                : head_runs<V, double>(p, dout, dden, den_ref, b, h, t0, t1, chunk, r)))
      return false;
    auto err_of = [&](const fast::HeadResult<double>& x) { return r.has_err ? &x : nullptr; };
    std::vector<Cell> dq(static_cast<size_t>(L * p.d));
    for (Index t = 0; t < L; ++t) {
      for (Index c = 0; c < p.d; ++c) {
        const size_t at = static_cast<size_t>(t * p.d + c);
        dq[at] = cell(r.val.dq, r.mag.dq, err_of(r.err.dq), t, c);
        const Cell k = cell(r.val.dk, r.mag.dk, err_of(r.err.dk), t, c);
        out.dk[at] = i == 0 ? k : sum(out.dk[at], k);
      }
      for (Index c = 0; c < p.dv; ++c) {
        const size_t at = static_cast<size_t>(t * p.dv + c);
        const Cell v = cell(r.val.dv, r.mag.dv, err_of(r.err.dv), t, c);
        out.dv[at] = i == 0 ? v : sum(out.dv[at], v);
      }
    }
    out.dq.push_back(std::move(dq));
    if (!p.has_state()) continue;
    std::vector<std::vector<Cell>> ds;
    for (size_t m = 0; m < layout.size(); ++m) {
      const BMat<V>& v = r.val.dstate[m];
      const BMat<double>& mg = r.mag.dstate[m];
      const BMat<double>* er = r.has_err ? &r.err.dstate[m] : nullptr;
      std::vector<Cell> x(static_cast<size_t>(v.rows() * v.cols()));
      for (Index rr = 0; rr < v.rows(); ++rr)
        for (Index c = 0; c < v.cols(); ++c) {
          Cell z = cell(v, mg, er, rr, c);
          if (layout[m].symmetric) z = half(sum(z, cell(v, mg, er, c, rr)));
          x[static_cast<size_t>(rr * v.cols() + c)] = z;
        }
      ds.push_back(std::move(x));
    }
    out.dstate.push_back(std::move(ds));
  }
  return true;
}

// The cells as a task's gradients: f(cell) of each, shaped as GroupGradient.
template <class F> GroupGradient<double> as_gradient(const BatchProblem& p, const GroupCells& g, Index L, F&& f) {
  auto mat = [&](const std::vector<Cell>& x, Index rows, Index cols) {
    Mat<double> m(rows, cols);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) m(i, j) = f(x[static_cast<size_t>(i * cols + j)]);
    return m;
  };
  GroupGradient<double> out;
  for (const auto& q : g.dq) out.dq.push_back(mat(q, L, p.d));
  out.dk = mat(g.dk, L, p.d), out.dv = mat(g.dv, L, p.dv);
  if (p.has_state()) {
    const std::vector<StatePart> layout = state_layout(p.opt, p.d, p.dv);
    for (const auto& head : g.dstate) {
      StateMats<double> s;
      for (size_t m = 0; m < layout.size(); ++m) s.push_back(mat(head[m], layout[m].rows, layout[m].width()));
      out.dstate.push_back(std::move(s));
    }
  }
  return out;
}

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

bool fast_group_gradient(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                         const std::vector<double>& den_ref, Index b, Index kvh, Index t0, Index t1, Index chunk, GroupGradient<double>& x,
                         GroupGradient<double>& flags, GroupGradient<double>* bounds) {
  GroupCells g;
  if (!group_cells<DD>(p, dout, dden, den_ref, b, kvh, t0, t1, chunk, g)) return false;
  const Index L = t1 - t0;
  if (bounds) *bounds = as_gradient(p, g, L, [](const Cell& c) { return c.e; });
  x = as_gradient(p, g, L, [](const Cell& c) {
    uint8_t f = 0;
    return certify(c, f);
  });
  const GroupGradient<double> m = as_gradient(p, g, L, [](const Cell& c) { return c.m; });
  x.mdq = m.dq, x.mdk = m.dk, x.mdv = m.dv, x.mdstate = m.dstate;
  flags = as_gradient(p, g, L, [](const Cell& c) {
    uint8_t f = 0;
    certify(c, f);
    return static_cast<double>(f);
  });
  return true;
}

bool fast_group_bounds(const BatchProblem& p, const std::vector<double>& dout, const std::vector<double>& dden,
                       const std::vector<double>& den_ref, Index b, Index kvh, Index t0, Index t1, GroupGradient<double>& values,
                       GroupGradient<double>& bounds) {
  GroupCells g;
  if (!group_cells<double>(p, dout, dden, den_ref, b, kvh, t0, t1, 64, g)) return false;
  const Index L = t1 - t0;
  values = as_gradient(p, g, L, [](const Cell& c) { return c.v.hi + c.v.lo; });
  const GroupGradient<double> m = as_gradient(p, g, L, [](const Cell& c) { return c.m; });
  values.mdq = m.dq, values.mdk = m.dk, values.mdv = m.dv, values.mdstate = m.dstate;
  bounds = as_gradient(p, g, L, [](const Cell& c) { return c.e * (1 + 0x1p-50) + std::fabs(c.v.lo); });
  return true;
}

}  // namespace hla::engine
