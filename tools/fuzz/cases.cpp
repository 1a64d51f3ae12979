#include "cases.hpp"

#include "features.hpp"
#include "gradients.hpp"
#include "hla_impl.h"
#include "suite.hpp"

#include "hla/backward.hpp"

#include <algorithm>
#include <cmath>

namespace hla::fuzz {

std::string to_string(Probe p) {
  switch (p) {
    case Probe::plain: return "plain";
    case Probe::nan_causality: return "nan_causality";
    case Probe::state_continuation: return "state_continuation";
    case Probe::grad_nan_causality: return "grad_nan_causality";
  }
  return "?";
}

void Supports::validate() const {
  if (variants.empty() || dtypes.empty()) throw InputError("a candidate must support at least one variant and one dtype");
  if (n_multiple < 1) throw InputError("n_multiple must be at least 1, got " + std::to_string(n_multiple));
  if (max_n < n_multiple)
    throw InputError("max_n " + std::to_string(max_n) + " is below n_multiple " + std::to_string(n_multiple) + ": no sequence fits");
  for (const auto* list : {&d_values, &dv_values})
    for (Index x : *list)
      if (x < 1 || x > kMaxDim) throw InputError("a head dimension must be in [1, " + std::to_string(kMaxDim) + "], got " + std::to_string(x));
  if (dv_equals_d && !dv_values.empty()) throw InputError("declare either dv = d or a list of dv values, not both");
}

bool Supports::admits_sizes(const BatchProblem& p) const {
  auto in = [](const std::vector<Index>& xs, Index x) { return xs.empty() || std::find(xs.begin(), xs.end(), x) != xs.end(); };
  if (!in(d_values, p.d) || !in(dv_values, p.dv) || (dv_equals_d && p.dv != p.d)) return false;
  if (n_multiple > 1)
    for (const auto& [t0, t1] : p.sequences())
      if ((t1 - t0) % n_multiple != 0) return false;
  return true;
}

std::string Supports::outside(const BatchProblem& p) const {
  auto in = [](const auto& xs, const auto& x) { return xs.empty() || std::find(xs.begin(), xs.end(), x) != xs.end(); };
  if (std::find(variants.begin(), variants.end(), p.opt.variant) == variants.end()) return "variant " + to_string(p.opt.variant);
  if (std::find(dtypes.begin(), dtypes.end(), p.dtype) == dtypes.end()) return "dtype " + to_string(p.dtype);
  if (const uint32_t missing = required_features(p) & ~features) return "needs " + feature_names(missing);
  if (!in(d_values, p.d) || (d_values.empty() && p.d > max_d)) return "d = " + std::to_string(p.d);
  if (!in(dv_values, p.dv) || (dv_values.empty() && p.dv > max_dv)) return "dv = " + std::to_string(p.dv);
  if (dv_equals_d && p.dv != p.d) return "dv != d";
  if (p.n > max_n) return "n = " + std::to_string(p.n);
  if (!admits_sizes(p)) return "n not a multiple of " + std::to_string(n_multiple);
  return "";
}

std::string Supports::sizes_text() const {
  auto list = [](const std::vector<Index>& xs) {
    std::string t;
    for (Index x : xs) t += (t.empty() ? "" : ", ") + std::to_string(x);
    return "{" + t + "}";
  };
  std::string t;
  auto add = [&](const std::string& x) { t += (t.empty() ? "" : ", ") + x; };
  if (!d_values.empty()) add("d in " + list(d_values));
  if (dv_equals_d) add("dv = d");
  else if (!dv_values.empty()) add("dv in " + list(dv_values));
  if (n_multiple > 1) add("n multiple of " + std::to_string(n_multiple));
  return t;
}

std::string FuzzCase::describe() const {
  return p.opt.describe() + ", " + to_string(p.dtype) + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
         " Hkv=" + std::to_string(p.kv_heads) + " n=" + std::to_string(p.n) + " d=" + std::to_string(p.d) +
         " dv=" + std::to_string(p.dv) + (p.offsets.empty() ? "" : " packed " + std::to_string(p.offsets.size() - 1) + " seqs") +
         ", " + gen::to_string(dist) + ", probe " + to_string(probe) +
         (probe == Probe::state_continuation ? " at " + std::to_string(split) : "") + (exact_tier ? ", exact tier" : "") +
         (grad ? std::string(", gradients") + (dden.empty() ? "" : " with dden") : "");
}

namespace {

template <class T> const T& pick(gen::Rng& r, const std::vector<T>& xs) { return xs[static_cast<size_t>(r.int_in(0, static_cast<int64_t>(xs.size()) - 1))]; }
bool chance(gen::Rng& r, int one_in) { return r.int_in(1, one_in) == 1; }

// n rounded down to a multiple of the declared block (at least one block, at most max_n).
Index block_length(Index n, const Supports& s) {
  const Index m = s.n_multiple;
  return std::clamp<Index>(n / m * m, m, s.max_n / m * m);
}

// The smallest declared head dimension at most `cap` (else the smallest declared).
Index declared_at_most(const std::vector<Index>& xs, Index cap) {
  Index best = *std::min_element(xs.begin(), xs.end());
  for (Index x : xs)
    if (x <= cap) best = std::max(best, x);
  return best;
}

Index pick_n(gen::Rng& r, const Supports& s) {
  Index n;
  const int64_t mode = r.int_in(0, 19);
  if (mode < 10) n = r.int_in(1, 40);                                                           // short
  else if (mode < 16) n = pick(r, std::vector<Index>{16, 32, 64, 128}) + r.int_in(-1, 1);        // chunk boundaries
  else if (mode < 19) n = r.int_in(41, 300);                                                    // medium
  else n = pick(r, std::vector<Index>{1024, 2048});                                             // long
  n = std::clamp<Index>(n, 1, s.max_n);
  return s.n_multiple > 1 ? block_length(n, s) : n;
}

}  // namespace

FuzzCase make_case(const Supports& s, uint64_t seed) {
  gen::Rng r(seed);
  FuzzCase c;
  BatchProblem& p = c.p;
  Options& o = p.opt;
  o.variant = pick(r, s.variants);
  o.masked = !(has_unmasked(o.variant) && s.has(HLA_FEAT_UNMASKED) && chance(r, 3));
  std::vector<EpsMode> modes;
  if (s.has(HLA_FEAT_NORMALIZE)) modes.push_back(EpsMode::add);
  if (s.has(HLA_FEAT_CLAMP)) modes.push_back(EpsMode::clamp);
  if (!modes.empty() && chance(r, 3)) {
    o.normalize = true;
    o.eps_mode = pick(r, modes);
    o.eps = pick(r, std::vector<Rational>{Rational(1, 1000000), Rational(1, 1000), Rational(1, 4)});
  }
  if (!needs_unit_gamma(o.variant) && s.has(HLA_FEAT_DECAY) && !chance(r, 3))
    o.gamma = pick(r, std::vector<Rational>{Rational(7, 8), Rational(1, 2), Rational(9, 10), Rational(15, 16), Rational(99, 100)});
  if (has_ridge(o.variant) && s.has(HLA_FEAT_RIDGE) && chance(r, 3))
    o.lambda = pick(r, std::vector<Rational>{Rational(1, 4), Rational(1), Rational(1, 10)});
  if (s.has(HLA_FEAT_SCALE) && chance(r, 3))
    o.scale = pick(r, std::vector<Rational>{Rational(1, 8), Rational(17677669529663687, 100000000000000000), Rational(2)});
  p.dtype = pick(r, s.dtypes);
  p.batch = chance(r, 3) ? 2 : 1;
  p.heads = std::vector<Index>{1, 2, 4}[static_cast<size_t>(r.int_in(0, 2))];
  p.kv_heads = p.heads;
  if (s.has(HLA_FEAT_GQA) && p.heads > 1 && chance(r, 2)) p.kv_heads = p.heads / (chance(r, 2) ? p.heads : 2);
  p.d = std::min<Index>(s.max_d, pick(r, std::vector<Index>{1, 2, 3, 4, 8, 16}));
  p.dv = std::min<Index>(s.max_dv, pick(r, std::vector<Index>{1, 2, 4, 8, 16}));
  // Declared head dimensions (drawn only when declared: the streams of
  // candidates that declare none stay as they were).
  if (!s.d_values.empty()) p.d = pick(r, s.d_values);
  if (!s.dv_values.empty()) p.dv = pick(r, s.dv_values);
  if (s.dv_equals_d) p.dv = p.d;
  p.n = pick_n(r, s);
  if (p.n >= 1024) {
    o.gamma = 1, p.d = std::min<Index>(p.d, 8), p.dv = std::min<Index>(p.dv, 8), p.batch = 1, p.heads = p.kv_heads = 1;
    if (!s.d_values.empty()) p.d = declared_at_most(s.d_values, 8);
    if (!s.dv_values.empty()) p.dv = declared_at_most(s.dv_values, 8);
    if (s.dv_equals_d) p.dv = p.d;
  }
  c.dist = pick(r, std::vector<gen::Dist>{gen::Dist::gaussian, gen::Dist::gaussian, gen::Dist::gaussian, gen::Dist::uniform,
                                          gen::Dist::small_int, gen::Dist::dynamic_range, gen::Dist::cancellation,
                                          gen::Dist::near_zero_den, gen::Dist::repeated, gen::Dist::zero_vectors});
  if (c.dist == gen::Dist::small_int) {
    o.gamma = 1, o.normalize = false, o.scale = 1, p.n = std::min<Index>(p.n, 24);
    if (s.n_multiple > 1) p.n = block_length(p.n, s);
  }
  if (c.dist == gen::Dist::near_zero_den && !modes.empty()) o.normalize = true, o.eps_mode = pick(r, modes);
  // Sequences (and the state split below) in whole blocks of n_multiple tokens.
  const Index m = s.n_multiple, blocks = p.n / m;
  if (s.has(HLA_FEAT_VARLEN) && blocks >= 4 && chance(r, 4)) {
    p.batch = 1;
    const int64_t seqs = r.int_in(2, std::min<int64_t>(4, blocks));
    std::vector<int64_t> cuts{0, p.n};
    while (static_cast<int64_t>(cuts.size()) < seqs + 1) {
      const int64_t x = r.int_in(1, blocks - 1) * m;
      if (std::find(cuts.begin(), cuts.end(), x) == cuts.end()) cuts.push_back(x);
    }
    std::sort(cuts.begin(), cuts.end());
    p.offsets = cuts;
  }
  p.resize_buffers();
  gen::fill(p, c.dist, r);
  const check::Precision prec = s.precision_for(p.dtype);
  c.exact_tier = c.dist == gen::Dist::small_int && (prec == check::Precision::f32 || prec == check::Precision::f64) &&
                 (p.dtype == DType::f32 || p.dtype == DType::f64) && gen::qualifies_exact_tier(p);
  if (s.has(HLA_FEAT_STATE) && p.offsets.empty() && blocks >= 2 && chance(r, 5)) {
    c.probe = Probe::state_continuation;
    c.split = r.int_in(1, blocks - 1) * m;
  } else if (chance(r, 5)) {
    c.probe = Probe::nan_causality;
    std::vector<double>* x = pick(r, std::vector<std::vector<double>*>{&p.q, &p.k, &p.v});
    (*x)[static_cast<size_t>(r.int_in(0, static_cast<int64_t>(x->size()) - 1))] = chance(r, 2) ? NAN : INFINITY;
    c.exact_tier = false;
  }
  // Gradients (drawn only for candidates with a backward: the streams of the
  // others stay as they were), on finite inputs without state.
  if (s.has(HLA_FEAT_BACKWARD) && c.probe == Probe::plain && has_backward(o.variant) && chance(r, 2)) draw_upstream(c, s, r);
  // With HLA_FEAT_BACKWARD_STATE, half the state cases also hand the state's
  // gradient back (campaign.cpp: state-gradient continuation).
  else if (s.has(HLA_FEAT_BACKWARD_STATE) && c.probe == Probe::state_continuation && has_backward(o.variant) && chance(r, 2))
    draw_upstream(c, s, r);
  return c;
}

BatchProblem slice_tokens(const BatchProblem& p, Index t0, Index t1) {
  BatchProblem s = p;
  s.n = t1 - t0;
  s.offsets.clear();
  s.resize_buffers();
  for (Index b = 0; b < p.batch; ++b)
    for (Index t = t0; t < t1; ++t) {
      for (Index h = 0; h < p.heads; ++h)
        for (Index c = 0; c < p.d; ++c) s.q[s.q_index(b, h, t - t0, c)] = p.q[p.q_index(b, h, t, c)];
      for (Index g = 0; g < p.kv_heads; ++g) {
        const Index h = g * (p.heads / p.kv_heads);  // a query head of kv group g
        for (Index c = 0; c < p.d; ++c) s.k[s.k_index(b, h, t - t0, c)] = p.k[p.k_index(b, h, t, c)];
        for (Index c = 0; c < p.dv; ++c) s.v[s.v_index(b, h, t - t0, c)] = p.v[p.v_index(b, h, t, c)];
      }
    }
  return s;
}

namespace {

// Keeps batch entry b and query head h (with its kv head) only.
BatchProblem one_head(const BatchProblem& p, Index b, Index h) {
  BatchProblem s = p;
  s.batch = s.heads = s.kv_heads = 1;
  s.resize_buffers();
  for (Index t = 0; t < p.n; ++t) {
    for (Index c = 0; c < p.d; ++c) s.q[s.q_index(0, 0, t, c)] = p.q[p.q_index(b, h, t, c)], s.k[s.k_index(0, 0, t, c)] = p.k[p.k_index(b, h, t, c)];
    for (Index c = 0; c < p.dv; ++c) s.v[s.v_index(0, 0, t, c)] = p.v[p.v_index(b, h, t, c)];
  }
  return s;
}

// Keeps the first d' columns of q, k (and dv' of v).
BatchProblem narrow(const BatchProblem& p, Index d2, Index dv2) {
  BatchProblem s = p;
  s.d = d2, s.dv = dv2;
  s.resize_buffers();
  for (Index b = 0; b < p.batch; ++b)
    for (Index t = 0; t < p.n; ++t) {
      for (Index h = 0; h < p.heads; ++h)
        for (Index c = 0; c < d2; ++c) s.q[s.q_index(b, h, t, c)] = p.q[p.q_index(b, h, t, c)];
      for (Index h = 0; h < p.heads; h += p.heads / p.kv_heads) {
        for (Index c = 0; c < d2; ++c) s.k[s.k_index(b, h, t, c)] = p.k[p.k_index(b, h, t, c)];
        for (Index c = 0; c < dv2; ++c) s.v[s.v_index(b, h, t, c)] = p.v[p.v_index(b, h, t, c)];
      }
    }
  return s;
}

}  // namespace

std::vector<FuzzCase> reductions(const FuzzCase& c, const Supports& s) {
  std::vector<FuzzCase> out;
  // keep: the upstream's part that belongs to the reduced problem (gradient cases).
  const Keep all{{}, {}, 0, c.p.n, c.p.dv};
  auto add = [&](BatchProblem p, const Keep& keep, Index dropped_prefix = 0) {
    FuzzCase k = c;
    k.p = std::move(p);
    k.split -= dropped_prefix;
    keep_upstream(k, c, keep);
    if (c.probe == Probe::nan_causality && k.p.all_finite()) return;  // the probe needs its NaN
    if (c.probe == Probe::grad_nan_causality && upstream_finite(k)) return;
    if (c.probe == Probe::state_continuation && (k.split < 1 || k.split >= k.p.n || k.split % s.n_multiple != 0)) return;
    if (!s.admits_sizes(k.p)) return;  // a kernel's declared sizes hold for shrunk cases too
    k.exact_tier = c.exact_tier && gen::qualifies_exact_tier(k.p);
    out.push_back(std::move(k));
  };
  const BatchProblem& p = c.p;
  // Fewer heads and batch entries.
  if (p.batch * p.heads > 1)
    for (Index b = 0; b < p.batch; ++b)
      for (Index h = 0; h < p.heads; ++h) {
        BatchProblem q = one_head(p, b, h);
        if (!p.offsets.empty()) q.offsets = p.offsets;
        add(std::move(q), {{b}, {h}, 0, p.n, p.dv});
      }
  // Fewer packed sequences: the first k of them.
  if (p.offsets.size() > 2)
    for (size_t k = 1; k + 1 < p.offsets.size(); ++k) {
      BatchProblem q = slice_tokens(p, 0, p.offsets[k]);
      q.offsets.assign(p.offsets.begin(), p.offsets.begin() + static_cast<std::ptrdiff_t>(k) + 1);
      if (q.offsets.size() == 2) q.offsets.clear();
      add(std::move(q), {{}, {}, 0, p.offsets[k], p.dv});
    }
  // ... or the last ones (the failure may sit in a later sequence).
  if (p.offsets.size() > 2)
    for (size_t k = 1; k + 1 < p.offsets.size(); ++k) {
      BatchProblem q = slice_tokens(p, p.offsets[k], p.n);
      for (size_t i = k; i < p.offsets.size(); ++i) q.offsets.push_back(p.offsets[i] - p.offsets[k]);
      if (q.offsets.size() == 2) q.offsets.clear();
      add(std::move(q), {{}, {}, p.offsets[k], p.n, p.dv});
    }
  // Fewer tokens: a prefix (outputs depend only on earlier tokens), then
  // without a leading part (the failure may not need it).
  // With a declared block, whole blocks (rounded down; add() drops the rest).
  const Index m = s.n_multiple;
  auto blocks = [m](Index x) { return x / m * m; };
  if (p.offsets.empty()) {
    for (Index n2 : {p.n / 4, p.n / 2, (3 * p.n) / 4, p.n - 1})
      if (blocks(n2) >= 1 && blocks(n2) < p.n) add(slice_tokens(p, 0, blocks(n2)), {{}, {}, 0, blocks(n2), p.dv});
    for (Index t0 : {p.n / 2, p.n / 4, Index(1)})
      if (blocks(t0) >= 1 && blocks(t0) < p.n) add(slice_tokens(p, blocks(t0), p.n), {{}, {}, blocks(t0), p.n, p.dv}, blocks(t0));
  }
  // Narrower heads; with declared dimensions, the smaller declared ones (both
  // at once with dv = d).
  if (s.d_values.empty() && s.dv_values.empty() && !s.dv_equals_d) {
    for (auto [d2, dv2] : {std::pair{std::max<Index>(1, p.d / 2), p.dv}, std::pair{p.d, std::max<Index>(1, p.dv / 2)},
                           std::pair{p.d - 1, p.dv}, std::pair{p.d, p.dv - 1}})
      if (d2 >= 1 && dv2 >= 1 && (d2 < p.d || dv2 < p.dv)) add(narrow(p, d2, dv2), {{}, {}, 0, p.n, dv2});
  } else {
    auto smaller = [](const std::vector<Index>& declared, Index x) {
      std::vector<Index> out;
      if (declared.empty()) {
        for (Index y : {x / 2, x - 1})
          if (y >= 1 && std::find(out.begin(), out.end(), y) == out.end()) out.push_back(y);
      } else {
        for (Index y : declared)
          if (y < x) out.push_back(y);
        std::sort(out.begin(), out.end());
      }
      return out;
    };
    if (s.dv_equals_d) {
      for (Index d2 : smaller(s.d_values, p.d)) add(narrow(p, d2, d2), {{}, {}, 0, p.n, d2});
    } else {
      for (Index d2 : smaller(s.d_values, p.d)) add(narrow(p, d2, p.dv), all);
      for (Index dv2 : smaller(s.dv_values, p.dv)) add(narrow(p, p.d, dv2), {{}, {}, 0, p.n, dv2});
    }
  }
  // Simpler options.
  auto with = [&](auto&& edit) {
    BatchProblem q = p;
    edit(q.opt);
    if (!(q.opt == p.opt)) add(std::move(q), all);
  };
  with([](Options& o) { o.lambda = 0; });
  with([](Options& o) { o.normalize = false; });
  with([&](Options& o) { if (!needs_unit_gamma(o.variant)) o.gamma = 1; });
  with([](Options& o) { o.scale = 1; });
  with([](Options& o) { o.masked = true; });
  if (p.dtype != DType::f32 && std::find(s.dtypes.begin(), s.dtypes.end(), DType::f32) != s.dtypes.end()) {
    BatchProblem q = p;
    q.dtype = DType::f32;
    for (auto* x : {&q.q, &q.k, &q.v})
      for (double& e : *x) e = round_to(DType::f32, e);
    size_t before = out.size();
    add(std::move(q), all);
    if (out.size() > before)
      for (auto* x : {&out.back().dout, &out.back().dden})
        for (double& e : *x) e = round_to(DType::f32, e);
  }
  // Simpler values: small integers (keeping signs and the NaN), then zeros.
  using Member = std::vector<double> BatchProblem::*;
  for (Member which : {&BatchProblem::q, &BatchProblem::k, &BatchProblem::v}) {
    BatchProblem q = p;
    bool changed = false;
    for (double& e : q.*which)
      if (std::isfinite(e)) {
        const double r = std::clamp(std::round(e), -2.0, 2.0);
        changed = changed || r != e;
        e = r;
      }
    if (changed) add(q, all);
    BatchProblem z = p;
    bool nonzero = false;
    for (double& e : z.*which)
      if (std::isfinite(e) && e != 0) e = 0, nonzero = true;
    if (nonzero) add(z, all);
  }
  // A simpler upstream: its NaN/Inf moved to column 0 (narrower heads keep it
  // then), small integers (keeping the NaN), without dden.
  if (c.grad) {
    for (size_t i = 0; i < c.dout.size(); ++i)
      if (!std::isfinite(c.dout[i]) && i % static_cast<size_t>(p.dv) != 0) {
        FuzzCase k = c;
        std::swap(k.dout[i], k.dout[i - i % static_cast<size_t>(p.dv)]);
        out.push_back(std::move(k));
      }
    const size_t before = out.size();
    add(p, all);
    if (out.size() > before) {
      bool changed = false;
      for (auto* x : {&out.back().dout, &out.back().dden})
        for (double& e : *x)
          if (std::isfinite(e)) {
            const double r = std::clamp(std::round(e), -2.0, 2.0);
            changed = changed || r != e;
            e = r;
          }
      if (!changed) out.pop_back();
    }
    if (!c.dden.empty() && c.probe != Probe::grad_nan_causality) {
      FuzzCase k = c;
      k.dden.clear();
      out.push_back(std::move(k));
    }
  }
  return out;
}

}  // namespace hla::fuzz
