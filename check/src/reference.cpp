#include "hla/check/reference.hpp"

#include "hla/bounds.hpp"
#include "hla/evaluate.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

namespace hla::check {

double depth_bound(Variant v, Index n, Index d) {
  return static_cast<double>((order_of(v) + 1) * (n + d) + 16);
}

namespace {

// Whether every value within e of x rounds to the same double as x does
// (then RN64(x) is the correctly rounded exact value).
bool certifies(const f113& x, const f113& e) {
  const double r = static_cast<double>(x);
  if (!std::isfinite(r)) return false;
  const f113 lo = (f113(r) + f113(std::nextafter(r, -INFINITY))) / 2;
  const f113 hi = (f113(r) + f113(std::nextafter(r, INFINITY))) / 2;
  return x - e > lo && x + e < hi;
}

struct Sink {
  Reference& ref;
  const BatchProblem& p;
  size_t out_at(Index b, Index h, Index t, Index c) const { return p.out_index(b, h, t, c); }
};

void exact_head(Sink& s, Index b, Index h, Index t0, Index t1) {
  const Problem<Rational> ph = s.p.head<Rational>(b, h, t0, t1);
  const Output<Rational> o = evaluate(ph, Form::streaming);
  const Output<Rational> m = magnitude(ph);
  const bool sd = has_state_difference_magnitude(s.p.opt);
  const Output<Rational> msd = sd ? magnitude(ph, true) : m;
  for (Index t = t0; t < t1; ++t) {
    const Index lt = t - t0;
    const size_t di = s.p.den_index(b, h, t);
    s.ref.den[di] = to_double(o.den(lt));
    s.ref.mag_den[di] = to_double(m.den(lt));
    s.ref.mag_den_sd[di] = to_double(msd.den(lt));
    for (Index c = 0; c < s.p.dv; ++c) {
      const size_t i = s.out_at(b, h, t, c);
      s.ref.out[i] = to_double(o.out(lt, c));
      s.ref.num[i] = to_double(o.num(lt, c));
      s.ref.mag_num[i] = to_double(m.num(lt, c));
      s.ref.mag_num_sd[i] = to_double(msd.num(lt, c));
    }
  }
}

void f113_head(Sink& s, Index b, Index h, Index t0, Index t1) {
  const Options& opt = s.p.opt;
  const Problem<f113> ph = s.p.head<f113>(b, h, t0, t1);
  const Output<f113> o = evaluate(ph, Form::streaming);
  const Output<f113> m = magnitude(ph);
  // The reference form's own error: K·u113 times the magnitude of what it adds
  // (the unmasked-order magnitude where it subtracts partial sums; a variant
  // without an unmasked form — hla3_paper — already has it in m).
  const bool other = subtracts_partial_sums(opt, Form::streaming) && has_unmasked(opt.variant) && opt.masked;
  const Output<f113> M = other ? magnitude(ph, true) : m;
  const f113 k = f113(depth_bound(opt.variant, t1 - t0, s.p.d)) * f113(std::ldexp(1.0, -112));  // 2·u113: slack for the bound's own rounding
  const f113 eps = from_rational<f113>(opt.eps);
  for (Index t = t0; t < t1; ++t) {
    const Index lt = t - t0;
    const size_t di = s.p.den_index(b, h, t);
    const f113 eD = k * M.den(lt);
    s.ref.den[di] = static_cast<double>(o.den(lt));
    s.ref.mag_den[di] = static_cast<double>(m.den(lt));
    if (!certifies(o.den(lt), eD)) s.ref.den_flags[di] |= kUncertified;
    for (Index c = 0; c < s.p.dv; ++c) {
      const size_t i = s.out_at(b, h, t, c);
      const f113 eN = k * M.num(lt, c);
      s.ref.out[i] = static_cast<double>(o.out(lt, c));
      s.ref.num[i] = static_cast<double>(o.num(lt, c));
      s.ref.mag_num[i] = static_cast<double>(m.num(lt, c));
      if (!opt.normalize) {
        if (!certifies(o.num(lt, c), eN)) s.ref.flags[i] |= kUncertified;
        continue;
      }
      const auto eO = normalized_error_bound(o.num(lt, c), o.den(lt), eps, opt.eps_mode, eN, eD);
      if (!eO) s.ref.flags[i] |= kIllConditioned | kUncertified;
      else if (!certifies(o.out(lt, c), *eO)) s.ref.flags[i] |= kUncertified;
    }
  }
}

}  // namespace

bool has_state_difference_magnitude(const Options& o) { return o.masked && has_unmasked(o.variant); }

void fill_state_difference_magnitude(const BatchProblem& p, Reference& ref) {
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  if (!has_state_difference_magnitude(p.opt)) {
    ref.mag_num_sd = ref.mag_num;
    ref.mag_den_sd = ref.mag_den;
    return;
  }
  ref.mag_num_sd.assign(no, 0);
  ref.mag_den_sd.assign(nd, 0);
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    // Sums of non-negative terms: relative error at most K·2^-53 (K = depth_bound);
    // scaling by 1 + 2K·2^-53 makes the double an upper bound.
    const Output<double> m = magnitude(p.head<double>(b, h, t0, t1), true);
    const double up = 1 + 2 * depth_bound(p.opt.variant, t1 - t0, p.d) * std::ldexp(1.0, -53);
    for (Index t = t0; t < t1; ++t) {
      ref.mag_den_sd[p.den_index(b, h, t)] = m.den(t - t0) * up;
      for (Index c = 0; c < p.dv; ++c) ref.mag_num_sd[p.out_index(b, h, t, c)] = m.num(t - t0, c) * up;
    }
  });
}

bool is_complete(const Reference& ref) {
  return ref.num.size() == ref.out.size() && ref.mag_num_sd.size() == ref.mag_num.size() &&
         ref.mag_den_sd.size() == ref.mag_den.size();
}

void complete_reference(const BatchProblem& p, Reference& ref) {
  if (ref.num.size() != ref.out.size()) {
    ref.num = ref.out;
    if (p.opt.normalize) {
      const double eps = to_double(p.opt.eps);
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < p.heads; ++h)
          for (Index t = 0; t < p.n; ++t)
            for (Index c = 0; c < p.dv; ++c)
              ref.num[p.out_index(b, h, t, c)] *= normalizer(ref.den[p.den_index(b, h, t)], eps, p.opt.eps_mode);
    }
  }
  if (ref.mag_num_sd.size() != ref.mag_num.size() || ref.mag_den_sd.size() != ref.mag_den.size())
    fill_state_difference_magnitude(p, ref);
}

bool exact_options_cheap(const Options& o) {
  auto bits = [](const Rational& x) {
    return mp::msb(mp::abs(mp::numerator(x)) + 1) + mp::msb(mp::denominator(x)) + 1;
  };
  // gamma enters as gamma^(3n): its size multiplies every number of the exact
  // evaluation; the others enter a fixed number of times.
  return bits(o.gamma) <= 128 && bits(o.scale) <= 256 && bits(o.eps) <= 256 && bits(o.lambda) <= 256;
}

Reference compute_reference(const BatchProblem& p, Index exact_max_n, double max_seconds) {
  p.validate(true);  // NaN/Inf inputs (causality probes) propagate through binary128
  Reference ref;
  const size_t no = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nd = static_cast<size_t>(p.batch * p.heads * p.n);
  ref.out.assign(no, 0);
  ref.num.assign(no, 0);
  ref.mag_num.assign(no, 0);
  ref.mag_num_sd.assign(no, 0);
  ref.mag_den_sd.assign(nd, 0);
  ref.flags.assign(no, 0);
  ref.den.assign(nd, 0);
  ref.mag_den.assign(nd, 0);
  ref.den_flags.assign(nd, 0);
  bool exact = p.d <= 16 && p.dv <= 16 && p.all_finite() && exact_options_cheap(p.opt);
  for (const auto& [t0, t1] : p.sequences()) exact = exact && t1 - t0 <= exact_max_n;
  ref.bits = exact ? 0 : 113;
  Sink s{ref, p};
  const auto start = std::chrono::steady_clock::now();
  const size_t total = static_cast<size_t>(p.batch * p.heads) * p.sequences().size();
  size_t done = 0;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    if (max_seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > max_seconds)
      throw InputError("computing the reference exceeded its budget of " + std::to_string(max_seconds) + " s after " +
                       std::to_string(done) + " of " + std::to_string(total) + " heads×sequences (raise it with --budget)");
    ++done;
    if (exact) {
      try {
        exact_head(s, b, h, t0, t1);
        return;
      } catch (const std::domain_error&) {  // den + ε = 0 exactly: let binary128 flag the pole
        ref.bits = 113;
      }
    }
    f113_head(s, b, h, t0, t1);
  });
  // Binary128 heads: the state-difference magnitude in double (exact heads filled it exactly).
  if (ref.bits != 0) fill_state_difference_magnitude(p, ref);
  return ref;
}

}  // namespace hla::check
