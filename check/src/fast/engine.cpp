// The certified double-double reference of one head (fast_reference.hpp).
#include "hla/check/fast_reference.hpp"

#include "hla/bounds.hpp"
#include "hla/fast/engine.hpp"

#include <cmath>

namespace hla::fast {

DD dd_from_f113(const f113& x) {
  const double hi = static_cast<double>(x);
  if (!std::isfinite(hi)) return {hi, 0};
  return {hi, static_cast<double>(x - f113(hi))};
}

f113 f113_from_dd(const DD& x) { return f113(x.hi) + f113(x.lo); }

}  // namespace hla::fast

namespace hla::check {

using fast::DD;

namespace {

// Whether every value within e of x rounds to the same double as x does.
bool certifies(const f113& x, const f113& e) {
  const double r = static_cast<double>(x);
  if (!std::isfinite(r) || !(e >= 0)) return false;
  const f113 lo = (f113(r) + f113(std::nextafter(r, -INFINITY))) / 2;
  const f113 hi = (f113(r) + f113(std::nextafter(r, INFINITY))) / 2;
  return x - e > lo && x + e < hi;
}

// An upper bound, as a binary128 number, of phi·2^-106·M + alpha for the
// magnitude mag (a computed DD magnitude, itself within the same bound of M).
f113 bound_of(double phi, double alpha, bool tiny, const DD& mag) {
  const f113 u2 = f113(0x1p-106);
  const f113 a = tiny ? f113(alpha) : f113(0);
  const f113 M = (fast::f113_from_dd(mag) + a) * (1 + f113(phi) * u2 * 2);  // M ≤ (M̂ + alpha)/(1 − phi·u²)
  return (f113(phi) * u2 * M + a) * (1 + f113(0x1p-60));
}

}  // namespace

FastHeadOutcome fast_head(const BatchProblem& p, Reference& ref, Index b, Index h, Index t0, Index t1, Index chunk) {
  const Options& o = p.opt;
  FastHeadOutcome res;
  if (!fast::supports(o.variant)) return res;
  const Index n = t1 - t0, dv = p.dv;
  auto q_at = [&](Index t, Index c) { return DD{p.q[p.q_index(b, h, t0 + t, c)], 0}; };
  auto k_at = [&](Index t, Index c) { return DD{p.k[p.k_index(b, h, t0 + t, c)], 0}; };
  auto v_at = [&](Index t, Index c) { return DD{p.v[p.v_index(b, h, t0 + t, c)], 0}; };
  const fast::FastHead<DD> fh = fast::make_fast_head<DD>(o, n, p.d, dv, q_at, k_at, v_at, chunk);
  const fast::HeadResult<DD> r = fast::evaluate_head(fh);
  if (!r.finite) return res;
  res.ok = true;
  const f113 eps = from_rational<f113>(o.eps);
  // ε as the DD engine would hold it: within 2^-113·ε of the exact ε (binary128 rounding).
  const f113 e_eps = eps * f113(0x1p-112) + f113(0x1p-1074);
  Index last_bad = -1;
  for (Index t = 0; t < n; ++t) {
    const size_t row = static_cast<size_t>(t);
    const double phi = r.phi[row], alpha = r.alpha[row];
    const size_t di = p.den_index(b, h, t0 + t);
    const DD den = r.val.at(t, dv), magD = r.mag.at(t, dv);
    const f113 D = fast::f113_from_dd(den);
    // The DD value converted to binary128 may round once more: 2^-113 of it.
    const f113 eD = bound_of(phi, alpha, r.tiny, magD) + abs(D) * f113(0x1p-112);
    ref.den[di] = static_cast<double>(D);
    ref.mag_den[di] = static_cast<double>(fast::f113_from_dd(magD));
    bool bad = false;
    if (!certifies(D, eD)) ref.den_flags[di] |= kUncertified, bad = true;
    for (Index c = 0; c < dv; ++c) {
      const size_t i = p.out_index(b, h, t0 + t, c);
      const DD num = r.val.at(t, c), magN = r.mag.at(t, c);
      const f113 N = fast::f113_from_dd(num);
      const f113 eN = bound_of(phi, alpha, r.tiny, magN) + abs(N) * f113(0x1p-112);
      ref.num[i] = static_cast<double>(N);
      ref.mag_num[i] = static_cast<double>(fast::f113_from_dd(magN));
      if (!o.normalize) {
        ref.out[i] = ref.num[i];
        if (!certifies(N, eN)) ref.flags[i] |= kUncertified, bad = true;
        continue;
      }
      // normalized_error_bound takes exact num, den and bounds of their
      // perturbations: ε's rounding is one more perturbation of the divisor.
      const f113 out = N / normalizer(D, eps, o.eps_mode);
      ref.out[i] = static_cast<double>(out);
      const auto eO = normalized_error_bound(N, D, eps, o.eps_mode, eN, eD + e_eps);
      // The binary128 quotient rounds once (2^-113) and normalizer/bound are
      // evaluated in binary128 (relative 2^-110 is ample for their roundings).
      if (!eO) ref.flags[i] |= kIllConditioned | kUncertified, bad = true;
      else if (!certifies(out, *eO * (1 + f113(0x1p-100)) + abs(out) * f113(0x1p-110))) ref.flags[i] |= kUncertified, bad = true;
    }
    if (bad) last_bad = t;
  }
  res.redo = last_bad + 1;
  return res;
}

}  // namespace hla::check
