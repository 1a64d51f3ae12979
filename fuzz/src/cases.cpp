#include "hla/fuzz/cases.hpp"

#include "hla/fuzz/features.hpp"
#include "hla/fuzz/gradients.hpp"
#include "hla_impl.h"

#include "hla/backward.hpp"
#include "hla/gen/suite.hpp"

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

std::string Supports::text() const {
  auto join = [](const auto& xs) {
    std::string t;
    for (const auto& x : xs) t += (t.empty() ? "" : ", ") + to_string(x);
    return t;
  };
  const std::string sizes = sizes_text();
  return "variants " + join(variants) + "; dtypes " + join(dtypes) + "; features " + feature_names(features) + "; max_n " +
         std::to_string(max_n) + ", max_d " + std::to_string(max_d) + ", max_dv " + std::to_string(max_dv) + "; precision " +
         precision.str() + "; form class " + engine::to_string(form_class) + (sizes.empty() ? "" : "; " + sizes);
}

namespace {
std::string join(const std::vector<Index>& xs) {
  std::string t;
  for (Index x : xs) t += (t.empty() ? "" : ",") + std::to_string(x);
  return t;
}
}  // namespace

std::string FuzzCase::describe() const {
  return p.opt.describe() + ", " + to_string(p.dtype) + " B=" + std::to_string(p.batch) + " H=" + std::to_string(p.heads) +
         " Hkv=" + std::to_string(p.kv_heads) + " n=" + std::to_string(p.n) + " d=" + std::to_string(p.d) +
         " dv=" + std::to_string(p.dv) + (p.offsets.empty() ? "" : " packed " + std::to_string(p.offsets.size() - 1) + " seqs") +
         ", " + gen::to_string(dist) + ", probe " + to_string(probe) +
         (probe == Probe::state_continuation ? " at " + join(splits) : "") + (exact_tier ? ", exact tier" : "") +
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

// The case's options: variant, mask, normalization, decay, ridge, scale.
// `modes`: the eps modes the candidate declares.
void draw_options(Options& o, const Supports& s, const std::vector<EpsMode>& modes, gen::Rng& r) {
  o.variant = pick(r, s.variants);
  o.masked = !(has_unmasked(o.variant) && s.has(HLA_FEAT_UNMASKED) && chance(r, 3));
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
}

// The dtype and sizes: batch, heads (GQA), d, dv, n; long sequences on small heads.
void draw_sizes(BatchProblem& p, const Supports& s, gen::Rng& r) {
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
    p.opt.gamma = 1, p.d = std::min<Index>(p.d, 8), p.dv = std::min<Index>(p.dv, 8), p.batch = 1, p.heads = p.kv_heads = 1;
    if (!s.d_values.empty()) p.d = declared_at_most(s.d_values, 8);
    if (!s.dv_values.empty()) p.dv = declared_at_most(s.dv_values, 8);
    if (s.dv_equals_d) p.dv = p.d;
  }
}

// The input distribution, and what it asks of the options.
void draw_distribution(FuzzCase& c, const Supports& s, const std::vector<EpsMode>& modes, gen::Rng& r) {
  BatchProblem& p = c.p;
  Options& o = p.opt;
  c.dist = pick(r, std::vector<gen::Dist>{gen::Dist::gaussian, gen::Dist::gaussian, gen::Dist::gaussian, gen::Dist::uniform,
                                          gen::Dist::small_int, gen::Dist::dynamic_range, gen::Dist::cancellation, gen::Dist::near_zero_den,
                                          gen::Dist::repeated, gen::Dist::zero_vectors});
  if (c.dist == gen::Dist::small_int) {
    o.gamma = 1, o.normalize = false, o.scale = 1, p.n = std::min<Index>(p.n, 24);
    if (s.n_multiple > 1) p.n = block_length(p.n, s);
  }
  if (c.dist == gen::Dist::near_zero_den && !modes.empty()) o.normalize = true, o.eps_mode = pick(r, modes);
  // A third of the Gaussian cases get positive features (den far from 0), normalized where the kernel
  // normalizes; drawn from a copy of the stream, so that every other case keeps its values.
  gen::Rng side = r;
  if (c.dist == gen::Dist::gaussian && side.int_in(0, 2) == 0) {
    c.dist = gen::Dist::positive;
    if (!modes.empty()) o.normalize = true, o.eps_mode = pick(side, modes);
  }
}

// Packed sequences (varlen), in whole blocks of n_multiple tokens.
void draw_packing(BatchProblem& p, const Supports& s, gen::Rng& r) {
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
}

// The probe (state continuation, a planted NaN/Inf, or plain) and, for a
// candidate with a backward, the upstream of a gradient case.
void draw_probe(FuzzCase& c, const Supports& s, gen::Rng& r) {
  BatchProblem& p = c.p;
  const Index m = s.n_multiple;
  // State cases, packed ones too: each sequence split at its own token, each
  // continued from its own state (a state mixed up between sequences shows).
  const auto seqs = p.sequences();
  const bool splittable = std::all_of(seqs.begin(), seqs.end(), [m](const auto& x) { return x.second - x.first >= 2 * m; });
  if (s.has(HLA_FEAT_STATE) && splittable && chance(r, 5)) {
    c.probe = Probe::state_continuation;
    for (const auto& [t0, t1] : seqs) c.splits.push_back(t0 + r.int_in(1, (t1 - t0) / m - 1) * m);
  } else if (chance(r, 5)) {
    c.probe = Probe::nan_causality;
    std::vector<double>* x = pick(r, std::vector<std::vector<double>*>{&p.q, &p.k, &p.v});
    (*x)[static_cast<size_t>(r.int_in(0, static_cast<int64_t>(x->size()) - 1))] = chance(r, 2) ? NAN : INFINITY;
    c.exact_tier = false;
  }
  // Gradients (drawn only for candidates with a backward: the streams of the
  // others stay as they were), on finite inputs without state.
  const Options& o = p.opt;
  if (s.has(HLA_FEAT_BACKWARD) && c.probe == Probe::plain && has_backward(o.variant) && chance(r, 2)) draw_upstream(c, s, r);
  // With HLA_FEAT_BACKWARD_STATE, half the state cases also hand the state's
  // gradient back (campaign.cpp: state-gradient continuation).
  else if (s.has(HLA_FEAT_BACKWARD_STATE) && c.probe == Probe::state_continuation && has_backward(o.variant) && chance(r, 2))
    draw_upstream(c, s, r);
}

}  // namespace

FuzzCase make_case(const Supports& s, uint64_t seed) {
  gen::Rng r(seed);
  FuzzCase c;
  BatchProblem& p = c.p;
  std::vector<EpsMode> modes;
  if (s.has(HLA_FEAT_NORMALIZE)) modes.push_back(EpsMode::add);
  if (s.has(HLA_FEAT_CLAMP)) modes.push_back(EpsMode::clamp);
  draw_options(p.opt, s, modes, r);
  draw_sizes(p, s, r);
  draw_distribution(c, s, modes, r);
  draw_packing(p, s, r);
  p.resize_buffers();
  gen::fill(p, c.dist, r);
  const engine::Precision prec = s.precision_for(p.dtype);
  c.exact_tier = c.dist == gen::Dist::small_int && (prec == engine::Precision::f32 || prec == engine::Precision::f64) &&
                 (p.dtype == DType::f32 || p.dtype == DType::f64) && gen::qualifies_exact_tier(p);
  draw_probe(c, s, r);
  return c;
}

BatchProblem pieces(const BatchProblem& p, const Ranges& ranges) {
  BatchProblem s = p;
  s.n = 0;
  s.offsets.clear();
  for (const auto& [t0, t1] : ranges) {
    if (ranges.size() > 1 && s.offsets.empty()) s.offsets.push_back(0);
    s.n += t1 - t0;
    if (ranges.size() > 1) s.offsets.push_back(s.n);
  }
  s.resize_buffers();
  for (Index b = 0; b < p.batch; ++b) {
    Index to = 0;
    for (const auto& [t0, t1] : ranges)
      for (Index t = t0; t < t1; ++t, ++to) {
        for (Index h = 0; h < p.heads; ++h)
          for (Index c = 0; c < p.d; ++c) s.q[s.q_index(b, h, to, c)] = p.q[p.q_index(b, h, t, c)];
        for (Index g = 0; g < p.kv_heads; ++g) {
          const Index h = g * (p.heads / p.kv_heads);  // a query head of kv group g
          for (Index c = 0; c < p.d; ++c) s.k[s.k_index(b, h, to, c)] = p.k[p.k_index(b, h, t, c)];
          for (Index c = 0; c < p.dv; ++c) s.v[s.v_index(b, h, to, c)] = p.v[p.v_index(b, h, t, c)];
        }
      }
  }
  return s;
}

BatchProblem slice_tokens(const BatchProblem& p, Index t0, Index t1) { return pieces(p, {{t0, t1}}); }

std::pair<Ranges, Ranges> state_parts(const FuzzCase& c) {
  Ranges first, second;
  const Ranges seqs = c.p.sequences();
  for (size_t i = 0; i < seqs.size() && i < c.splits.size(); ++i) {
    first.emplace_back(seqs[i].first, c.splits[i]);
    second.emplace_back(c.splits[i], seqs[i].second);
  }
  return {first, second};
}

namespace {

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

// c's state splits moved with its tokens into pieces(c.p, rs) (false: a
// piece does not hold its sequence's split strictly inside).
bool moved_splits(const FuzzCase& c, const Ranges& rs, std::vector<Index>& splits) {
  const Ranges seqs = c.p.sequences();
  Index start = 0;
  for (const auto& [a, b] : rs) {
    size_t i = 0;
    while (i + 1 < seqs.size() && a >= seqs[i].second) ++i;
    if (i >= c.splits.size()) return false;
    const Index m = c.splits[i];
    if (!(a < m && m < b)) return false;
    splits.push_back(start + m - a);
    start += b - a;
  }
  return true;
}

// Every sequence's split strictly inside it, in whole blocks.
bool splits_fit(const FuzzCase& k, Index block) {
  const Ranges seqs = k.p.sequences();
  if (k.splits.size() != seqs.size()) return false;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Index m = k.splits[i];
    if (m <= seqs[i].first || m >= seqs[i].second || (m - seqs[i].first) % block != 0) return false;
  }
  return true;
}

// x without repeats, in order.
std::vector<Index> distinct(std::initializer_list<Index> xs) {
  std::vector<Index> out;
  for (Index x : xs)
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  return out;
}

std::vector<Index> first_n(Index n) {
  std::vector<Index> xs(static_cast<size_t>(n));
  for (Index i = 0; i < n; ++i) xs[static_cast<size_t>(i)] = i;
  return xs;
}

// The reductions of one case, by kind, in the order the shrinker tries them
// (each method adds its own to `out`).
class Reducer {
 public:
  Reducer(const FuzzCase& c, const Supports& s) : c_(c), s_(s), p_(c.p), all_{{}, {}, {}, c.p.dv} {}
  std::vector<FuzzCase> out;

  // keep: the upstream's part that belongs to the reduced problem (gradient
  // cases); splits: the state splits when the tokens moved.
  void add(BatchProblem p, const Keep& keep, const std::vector<Index>* splits = nullptr) {
    FuzzCase k = c_;
    k.p = std::move(p);
    if (splits) k.splits = *splits;
    keep_upstream(k, c_, keep);
    if (c_.probe == Probe::nan_causality && k.p.all_finite()) return;  // the probe needs its NaN
    if (c_.probe == Probe::grad_nan_causality && upstream_finite(k)) return;
    if (c_.probe == Probe::state_continuation && !splits_fit(k, s_.n_multiple)) return;
    if (!s_.admits_sizes(k.p)) return;  // a kernel's declared sizes hold for shrunk cases too
    k.exact_tier = c_.exact_tier && gen::qualifies_exact_tier(k.p);
    out.push_back(std::move(k));
  }

  // Fewer heads and batch entries: one head of one entry; then, for a finding
  // that needs several entries or heads sharing K/V, every entry with one head,
  // one entry with every head, one K/V group (its GQA ratio kept), half of each
  // group, half of the groups.
  void fewer_heads() {
    const BatchProblem& p = p_;
    auto keep_heads = [&](const std::vector<Index>& bs, const std::vector<Index>& hs, Index kv_heads) {
      add(p.subset(bs, hs, kv_heads), {bs, hs, {}, p.dv});
    };
    auto heads_where = [&](auto&& pred) {
      std::vector<Index> hs;
      for (Index h = 0; h < p.heads; ++h)
        if (pred(h)) hs.push_back(h);
      return hs;
    };
    const std::vector<Index> batches = first_n(p.batch), heads = first_n(p.heads);
    const Index group = p.heads / p.kv_heads;
    if (p.batch * p.heads > 1)
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < p.heads; ++h) keep_heads({b}, {h}, 1);
    if (p.batch > 1) {
      for (Index b = 0; b < p.batch; ++b) keep_heads({b}, heads, p.kv_heads);
      if (p.heads > 1)
        for (Index h = 0; h < p.heads; ++h) keep_heads(batches, {h}, 1);
    }
    if (p.kv_heads > 1 && group > 1)
      for (Index g = 0; g < p.kv_heads; ++g) keep_heads(batches, heads_where([&](Index h) { return h / group == g; }), 1);
    if (group >= 4) keep_heads(batches, heads_where([&](Index h) { return h % group < group / 2; }), p.kv_heads);
    if (p.kv_heads >= 4 && p.kv_heads % 2 == 0)
      keep_heads(batches, heads_where([&](Index h) { return h / group < p.kv_heads / 2; }), p.kv_heads / 2);
  }

  // Token reductions: ranges of p's tokens, one packed sequence each (one: unpacked).
  void add_ranges(const Ranges& rs) {
    std::vector<Index> splits;
    if (c_.probe == Probe::state_continuation && !moved_splits(c_, rs, splits)) return;
    add(pieces(p_, rs), {{}, {}, rs, p_.dv}, c_.probe == Probe::state_continuation ? &splits : nullptr);
  }

  // Fewer packed sequences: the first k, the last ones, or one between left out.
  void fewer_sequences() {
    const Ranges seqs = p_.sequences();
    const size_t S = seqs.size();
    const auto at = [](size_t i) { return static_cast<std::ptrdiff_t>(i); };
    for (size_t k = 1; k < S; ++k) add_ranges(Ranges(seqs.begin(), seqs.begin() + at(k)));
    for (size_t k = 1; k < S; ++k) add_ranges(Ranges(seqs.begin() + at(k), seqs.end()));
    for (size_t i = 1; i + 1 < S; ++i) {
      Ranges rs = seqs;
      rs.erase(rs.begin() + at(i));
      add_ranges(rs);
    }
  }

  // Fewer tokens: a prefix (outputs depend only on earlier tokens), then
  // without a leading part (the failure may not need it); of every packed
  // sequence at once (they stay packed), then of each sequence alone.
  // With a declared block, whole blocks (rounded down; add() drops the rest).
  void fewer_tokens() {
    const Ranges seqs = p_.sequences();
    const size_t S = seqs.size();
    const Index m = s_.n_multiple;
    auto blocks = [m](Index x) { return x / m * m; };
    if (S > 1) {
      // keep(t0, t1): the part of [t0, t1) kept, or all of it where nothing shorter is.
      auto every = [&](auto&& keep) {
        Ranges rs;
        bool shorter = false;
        for (const auto& [t0, t1] : seqs) {
          auto r = keep(t0, t1);
          if (r.second - r.first < 1 || r.second - r.first >= t1 - t0) r = {t0, t1};
          shorter = shorter || r.second - r.first < t1 - t0;
          rs.push_back(r);
        }
        if (shorter) add_ranges(rs);
      };
      for (Index q : {1, 2, 3}) every([&](Index t0, Index t1) { return std::pair{t0, t0 + blocks(q * (t1 - t0) / 4)}; });
      every([&](Index t0, Index t1) { return std::pair{t0 + blocks((t1 - t0) / 2), t1}; });
    }
    for (size_t i = 0; i < S; ++i) {
      const auto [t0, t1] = seqs[i];
      const Index L = t1 - t0;
      auto only = [&](Index a, Index b) {
        Ranges rs = seqs;
        rs[i] = {a, b};
        add_ranges(rs);
      };
      for (Index n2 : distinct({blocks(L / 4), blocks(L / 2), blocks((3 * L) / 4), blocks(L - 1)}))
        if (n2 >= 1 && n2 < L) only(t0, t0 + n2);
      for (Index d0 : distinct({blocks(L / 2), blocks(L / 4), blocks(1)}))
        if (d0 >= 1 && d0 < L) only(t0 + d0, t1);
    }
  }

  // Narrower heads; with declared dimensions, the smaller declared ones (both
  // at once with dv = d).
  void narrower() {
    const BatchProblem& p = p_;
    if (s_.d_values.empty() && s_.dv_values.empty() && !s_.dv_equals_d) {
      for (auto [d2, dv2] : {std::pair{std::max<Index>(1, p.d / 2), p.dv}, std::pair{p.d, std::max<Index>(1, p.dv / 2)},
                             std::pair{p.d - 1, p.dv}, std::pair{p.d, p.dv - 1}})
        if (d2 >= 1 && dv2 >= 1 && (d2 < p.d || dv2 < p.dv)) add(narrow(p, d2, dv2), {{}, {}, {}, dv2});
      return;
    }
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
    if (s_.dv_equals_d) {
      for (Index d2 : smaller(s_.d_values, p.d)) add(narrow(p, d2, d2), {{}, {}, {}, d2});
    } else {
      for (Index d2 : smaller(s_.d_values, p.d)) add(narrow(p, d2, p.dv), all_);
      for (Index dv2 : smaller(s_.dv_values, p.dv)) add(narrow(p, p.d, dv2), {{}, {}, {}, dv2});
    }
  }

  // Simpler options, then f32 inputs instead of another dtype.
  void simpler_options() {
    auto with = [&](auto&& edit) {
      BatchProblem q = p_;
      edit(q.opt);
      if (!(q.opt == p_.opt)) add(std::move(q), all_);
    };
    with([](Options& o) { o.lambda = 0; });
    with([](Options& o) { o.normalize = false; });
    with([&](Options& o) { if (!needs_unit_gamma(o.variant)) o.gamma = 1; });
    with([](Options& o) { o.scale = 1; });
    with([](Options& o) { o.masked = true; });
    if (p_.dtype != DType::f32 && std::find(s_.dtypes.begin(), s_.dtypes.end(), DType::f32) != s_.dtypes.end()) {
      BatchProblem q = p_;
      q.dtype = DType::f32;
      for (auto* x : {&q.q, &q.k, &q.v})
        for (double& e : *x) e = round_to(DType::f32, e);
      size_t before = out.size();
      add(std::move(q), all_);
      if (out.size() > before)
        for (auto* x : {&out.back().dout, &out.back().dden})
          for (double& e : *x) e = round_to(DType::f32, e);
    }
  }

  // Simpler values: small integers (keeping signs and the NaN), then zeros.
  void simpler_values() {
    using Member = std::vector<double> BatchProblem::*;
    for (Member which : {&BatchProblem::q, &BatchProblem::k, &BatchProblem::v}) {
      BatchProblem q = p_;
      bool changed = false;
      for (double& e : q.*which)
        if (std::isfinite(e)) {
          const double r = std::clamp(std::round(e), -2.0, 2.0);
          changed = changed || r != e;
          e = r;
        }
      if (changed) add(q, all_);
      BatchProblem z = p_;
      bool nonzero = false;
      for (double& e : z.*which)
        if (std::isfinite(e) && e != 0) e = 0, nonzero = true;
      if (nonzero) add(z, all_);
    }
  }

  // A simpler upstream: its NaN/Inf moved to column 0 (narrower heads keep it
  // then), small integers (keeping the NaN), without dden.
  void simpler_upstream() {
    if (!c_.grad) return;
    for (size_t i = 0; i < c_.dout.size(); ++i)
      if (!std::isfinite(c_.dout[i]) && i % static_cast<size_t>(p_.dv) != 0) {
        FuzzCase k = c_;
        std::swap(k.dout[i], k.dout[i - i % static_cast<size_t>(p_.dv)]);
        out.push_back(std::move(k));
      }
    const size_t before = out.size();
    add(p_, all_);
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
    if (!c_.dden.empty() && c_.probe != Probe::grad_nan_causality) {
      FuzzCase k = c_;
      k.dden.clear();
      out.push_back(std::move(k));
    }
  }

 private:
  const FuzzCase& c_;
  const Supports& s_;
  const BatchProblem& p_;
  const Keep all_;
};

}  // namespace

std::vector<FuzzCase> reductions(const FuzzCase& c, const Supports& s) {
  Reducer r(c, s);
  r.fewer_heads();
  r.fewer_sequences();
  r.fewer_tokens();
  r.narrower();
  r.simpler_options();
  r.simpler_values();
  r.simpler_upstream();
  // Without the planted NaN/Inf: 0 there, a plain case. Kept only when the
  // finding stays the same (a kernel's own NaN, a wrong gradient), never for
  // a causality finding; last, so that it costs an attempt only once the rest is done.
  if (c.probe == Probe::nan_causality || c.probe == Probe::grad_nan_causality) r.out.push_back(without_planted_nan(c));
  return std::move(r.out);
}

FuzzCase without_planted_nan(const FuzzCase& c) {
  FuzzCase k = c;
  k.probe = Probe::plain;
  for (auto* x : {&k.p.q, &k.p.k, &k.p.v, &k.dout, &k.dden})
    for (double& e : *x)
      if (!std::isfinite(e)) e = 0;
  return k;
}

}  // namespace hla::fuzz
