#include "hla/gen/suite.hpp"

#include "hla/backward.hpp"
#include "hla/exact.hpp"
#include "hla/evaluate.hpp"
#include "hla/state.hpp"

#include <cmath>

namespace hla::gen {
namespace {

struct Shape {
  Index batch = 1, heads = 2, kv_heads = 1, n = 37, d = 8, dv = 4;
  std::vector<int64_t> offsets = {};
};

// The operator configurations every suite sweeps.
struct Config {
  std::string name;
  Options opt;
};

std::vector<Config> configs() {
  std::vector<Config> c;
  auto add = [&](std::string name, Variant v, bool masked = true, Rational lambda = 0) {
    Options o;
    o.variant = v;
    o.masked = masked;
    o.lambda = lambda;
    o.gamma = needs_unit_gamma(v) ? Rational(1) : Rational(7, 8);
    c.push_back({std::move(name), o});
  };
  // Every variant of the table, then its unmasked and ridge forms where it has them.
  for (const VariantInfo& v : kVariants) {
    add(std::string(v.name), v.id);
    if (v.has_unmasked) add(std::string(v.name) + "-unmasked", v.id, false);
    if (v.has_ridge) add(std::string(v.name) + "-ridge", v.id, true, Rational(1, 4));
  }
  return c;
}

const Config& named(const std::vector<Config>& cfgs, std::string_view name) {
  for (const Config& c : cfgs)
    if (c.name == name) return c;
  throw std::logic_error("suite: no configuration " + std::string(name));
}

struct Builder {
  uint64_t seed;
  std::vector<Case> cases;

  void add(const Config& cfg, const std::string& norm, DType dt, Dist dist, const Shape& s, const std::string& extra = "") {
    Case c;
    c.problem.opt = cfg.opt;
    c.problem.opt.normalize = norm != "raw";
    if (norm == "clamp") c.problem.opt.eps_mode = EpsMode::clamp;
    c.problem.dtype = dt;
    c.problem.batch = s.batch, c.problem.heads = s.heads, c.problem.kv_heads = s.kv_heads;
    c.problem.n = s.n, c.problem.d = s.d, c.problem.dv = s.dv;
    c.problem.offsets = s.offsets;
    c.problem.resize_buffers();
    c.dist = dist;
    c.seed = derive_seed(seed, cases.size());
    c.name = cfg.name + "-" + norm + "-" + to_string(dt) + "-" + to_string(dist) + "-n" + std::to_string(s.n) + "-d" +
             std::to_string(s.d) + "-B" + std::to_string(s.batch) + "H" + std::to_string(s.heads) + "K" +
             std::to_string(s.kv_heads) + (s.offsets.empty() ? "" : "-varlen") + extra;
    Rng rng(c.seed);
    fill(c.problem, dist, rng);
    if (dist == Dist::small_int) {
      c.problem.opt.gamma = 1;
      c.exact_tier = qualifies_exact_tier(c.problem);
      if (!c.exact_tier) throw std::logic_error("suite case " + c.name + " does not qualify for the exact tier");
    }
    cases.push_back(std::move(c));
  }
};

void golden(Builder& b) {
  const auto cfgs = configs();
  for (const Config& cfg : cfgs)
    for (const char* norm : {"raw", "add", "clamp"}) b.add(cfg, norm, DType::f32, Dist::gaussian, Shape{});
  // Exact tier: small integers, γ = 1 (third order needs shorter, narrower heads to stay below 2^24).
  for (const Config& cfg : cfgs) {
    const bool third = order_of(cfg.opt.variant) >= 3;
    b.add(cfg, "raw", DType::f32, Dist::small_int, third ? Shape{1, 2, 1, 8, 4, 4} : Shape{1, 2, 1, 20, 8, 4});
  }
  // Common kernel support — only γ = 1, only H = Hkv, only d = dv = 64: every
  // variant × normalize mode in f32, bf16 and f16 (`hla select` finds them).
  for (const Config& cfg : cfgs) {
    if (!cfg.opt.masked || cfg.opt.lambda != 0) continue;
    Config unit = cfg;
    unit.opt.gamma = 1;
    unit.name += "-g1";
    for (const char* norm : {"raw", "add", "clamp"})
      for (DType dt : {DType::f32, DType::bf16, DType::f16}) b.add(unit, norm, dt, Dist::gaussian, Shape{1, 1, 1, 20, 64, 64});
  }
  // Input dtypes, on the default operator.
  const Config& hla2 = named(cfgs, "hla2");
  for (DType dt : {DType::f64, DType::bf16, DType::f16}) b.add(hla2, "add", dt, Dist::gaussian, Shape{});
  // Adversarial inputs on each operator family.
  for (const char* family : {"hla2", "ahla", "hla3"})
    for (Dist d : {Dist::dynamic_range, Dist::cancellation, Dist::near_zero_den, Dist::repeated, Dist::zero_vectors})
      b.add(named(cfgs, family), d == Dist::near_zero_den ? "add" : "raw", DType::f32, d, Shape{});
  // Shapes: one token, grouped heads, packed sequences, a chunk boundary ± 1.
  b.add(hla2, "raw", DType::f32, Dist::gaussian, Shape{1, 1, 1, 1, 8, 4});
  b.add(hla2, "raw", DType::f32, Dist::gaussian, Shape{2, 4, 2, 17, 8, 4});
  b.add(named(cfgs, "ahla"), "raw", DType::f32, Dist::gaussian, Shape{1, 2, 2, 40, 8, 4, {0, 5, 17, 40}});
  for (Index n : {63, 65}) b.add(hla2, "raw", DType::f32, Dist::gaussian, Shape{1, 1, 1, n, 8, 4});
  // scale = 1/sqrt(d), as attention kernels use it.
  Config scaled = hla2;
  scaled.opt.scale = Rational(1, 4);
  b.add(scaled, "raw", DType::f32, Dist::gaussian, Shape{1, 1, 1, 37, 16, 4}, "-scale");
}

// The binary128 path with flags: n = 49 is beyond exact rationals; opposing
// key pairs (cancellation) with equal values make la1 at γ = 1 cancel exactly
// at every odd token: a reference 0 from terms of magnitude ~1, "not certified
// to f64" (flag 1) in out and den. At even tokens q_t = k_t (not ⊥ k_t, as the
// distribution makes it), so that out and den there are |k_t|²·v_t and |k_t|²,
// far beyond their f32 bounds: an all-zero output fails (it passed while even
// tokens were 0 as well, a vacuous fixture). Added after each suite's other
// cases, so that those keep their seeds and bytes.
void flagged(Builder& b) {
  Config unit = named(configs(), "la1");
  unit.opt.gamma = 1;
  unit.name += "-g1";
  b.add(unit, "raw", DType::f32, Dist::cancellation, Shape{1, 1, 1, 49, 4, 4}, "-flags");
  BatchProblem& p = b.cases.back().problem;
  for (Index t = 1; t < p.n; t += 2)
    for (Index c = 0; c < p.dv; ++c) p.v[p.v_index(0, 0, t, c)] = p.v[p.v_index(0, 0, t - 1, c)];
  for (Index t = 0; t < p.n; t += 2)
    for (Index c = 0; c < p.d; ++c) p.q[p.q_index(0, 0, t, c)] = p.k[p.k_index(0, 0, t, c)];
}

// Gradients (SPEC §9): every variant with a backward × normalize mode, small
// heads (exact rationals), the default shape (two query heads share one K/V
// head: dk, dv summed over the group), dden where den is divided by; and
// packed sequences. Added after the others, so that those keep their seeds.
// Normalized heads (and hla3's) are 20 tokens long: their exact gradients
// carry a different 1/D per token (hla2 with n = 37: 5 s, n = 20: 1 s).
void backward(Builder& b) {
  const auto cfgs = configs();
  for (const Config& cfg : cfgs) {
    if (!has_backward(cfg.opt.variant)) continue;
    const bool third = order_of(cfg.opt.variant) >= 3;
    for (const char* norm : {"raw", "add", "clamp"}) {
      const bool short_head = third || std::string(norm) != "raw";
      b.add(cfg, norm, DType::f32, Dist::gaussian, short_head ? Shape{1, 2, 1, 20, 8, 4} : Shape{}, "-grad");
      fill_upstream(b.cases.back(), std::string(norm) != "raw");
    }
  }
  b.add(named(cfgs, "hla2"), "raw", DType::f32, Dist::gaussian, Shape{1, 2, 1, 37, 8, 4, {0, 9, 23, 37}}, "-grad");
  fill_upstream(b.cases.back(), false);
}

// Positive feature maps (normalized linear attention's inputs, every den far
// from 0): normalized gradients of every variant family, each element
// well-conditioned. Added last, so that the others keep their seeds.
void positive(Builder& b) {
  const auto cfgs = configs();
  for (const char* family : {"la1", "hla2", "ahla", "hla3"})
    for (const char* norm : {"add", "clamp"}) {
      b.add(named(cfgs, family), norm, DType::f32, Dist::positive, Shape{1, 2, 1, 20, 8, 4}, "-grad");
      fill_upstream(b.cases.back(), true);
    }
}

void full(Builder& b) {
  golden(b);
  const auto cfgs = configs();
  // Every operator × normalization × dtype, across chunk boundaries.
  for (const Config& cfg : cfgs)
    for (const char* norm : {"raw", "add"})
      for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16})
        for (Index n : {1, 16, 17, 129}) b.add(cfg, norm, dt, Dist::gaussian, Shape{1, 2, 1, n, 16, 16});
  // Adversarial inputs on every operator.
  for (const Config& cfg : cfgs)
    for (Dist d : {Dist::uniform, Dist::dynamic_range, Dist::cancellation, Dist::near_zero_den, Dist::repeated, Dist::zero_vectors})
      b.add(cfg, d == Dist::near_zero_den ? "add" : "raw", DType::f32, d, Shape{1, 2, 1, 65, 16, 16});
  // Long sequences at head size 64 (γ = 1 for the longest: no decay to hide growth).
  for (const char* family : {"la1", "hla2", "ahla", "hla3"}) {
    b.add(named(cfgs, family), "raw", DType::f32, Dist::gaussian, Shape{1, 1, 1, 256, 64, 64});
    b.add(named(cfgs, family), "raw", DType::bf16, Dist::gaussian, Shape{1, 1, 1, 1024, 64, 64});
  }
  Config long_cfg = named(cfgs, "hla2");
  long_cfg.opt.gamma = 1;
  long_cfg.name = "hla2-gamma1";
  b.add(long_cfg, "add", DType::f32, Dist::gaussian, Shape{1, 1, 1, 4096, 64, 64});
  flagged(b);
}

}  // namespace

const std::vector<std::string>& suite_names() {
  static const std::vector<std::string> s{"golden", "default"};
  return s;
}

std::vector<Case> make_suite(const std::string& name, uint64_t seed) {
  Builder b{seed, {}};
  if (name == "golden") golden(b), flagged(b), backward(b), positive(b);
  else if (name == "default") full(b), positive(b);
  else throw InputError("unknown suite '" + name + "' (expected golden or default)");
  return std::move(b.cases);
}

void fill_upstream(Case& c, bool with_dden) {
  const BatchProblem& p = c.problem;
  Rng rng(derive_seed(c.seed, 1));
  c.grad = true;
  c.dout.assign(static_cast<size_t>(p.batch * p.heads * p.n * p.dv), 0);
  for (double& x : c.dout) x = round_to(p.dtype, rng.normal());
  c.dden.clear();
  if (with_dden) {
    c.dden.assign(static_cast<size_t>(p.batch * p.heads * p.n), 0);
    for (double& x : c.dden) x = round_to(p.dtype, rng.normal());
  }
}

void fill_state(BatchProblem& p, Dist dist, Rng& rng, Index earlier) {
  if (!has_state(p.opt.variant))
    throw InputError("--case: state=" + std::to_string(earlier) + ": " + to_string(p.opt.variant) + " has no streaming state");
  if (static_cast<double>(p.batch) * static_cast<double>(p.heads) * static_cast<double>(earlier) * static_cast<double>(std::max(p.d, p.dv)) > 0x1p28)
    throw InputError("--case: B·H·state·max(d, dv) is above 2^28 elements");
  BatchProblem pre = p;
  pre.n = earlier;
  pre.offsets.clear();
  pre.resize_buffers();
  fill(pre, dist, rng);
  p.state_dtype = DType::f32;
  p.state.clear();
  for (Index b = 0; b < p.batch; ++b)
    for (Index h = 0; h < p.heads; ++h) {
      const Problem<double> ph = pre.head<double>(b, h, 0, earlier);
      for (const Mat<double>& m : final_state(ph, pre.head_state<double>(b, h)))
        for (Index r = 0; r < m.rows(); ++r)
          for (Index col = 0; col < m.cols(); ++col) p.state.push_back(static_cast<float>(m(r, col)));
    }
  p.validate();
}

bool qualifies_exact_tier(const BatchProblem& p) {
  // Every option exact in any order: no decay, division or scaling, and a
  // ridge λ that is an integer or 1/2^k (λ = 1/10 is not even representable);
  // with λ = 1/2^k every value is a multiple of 2^-k, so the bound shrinks by 2^k.
  if (p.opt.gamma != 1 || p.opt.normalize || p.opt.scale != 1) return false;
  const mp::mpz_int lden = mp::denominator(p.opt.lambda);
  if ((lden & (lden - 1)) != 0 || (lden > 1 && mp::numerator(p.opt.lambda) != 1)) return false;
  for (const auto* t : {&p.q, &p.k, &p.v})
    for (double e : *t)
      if (e != std::trunc(e)) return false;
  const Rational limit = Rational(mp::mpz_int(1) << 24) / Rational(lden);
  bool below = true;
  p.for_each_sequence([&](Index b, Index h, Index t0, Index t1) {
    const Output<Rational> m = exact::magnitude(p.head<Rational>(b, h, t0, t1), true);
    if ((m.num.size() && m.num.maxCoeff() >= limit) || (m.den.size() && m.den.maxCoeff() >= limit)) below = false;
  });
  return below;
}

}  // namespace hla::gen
