// The fuzzer's parts, in process and in seconds (the zoo campaigns test the
// whole against real libraries in minutes): the generator draws every feature
// it claims, each probe reports its finding kind, an inconclusive check is not
// a finding, the shrinker reaches the minimal case and keeps what the bug
// needs, campaigns draw distinct cases and shards are disjoint. The candidates
// are in-process adapters around our own float64 streaming form (honest), with
// one planted bug each. Deterministic: fixed seeds, printed.
#include "hla/fuzz/campaign.hpp"
#include "hla/fuzz/cases.hpp"
#include "hla/fuzz/features.hpp"
#include "hla/gen/suite.hpp"
#include "hla_impl.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>

namespace hla {
namespace {

namespace fs = std::filesystem;

enum class Bug {
  none,
  second_token,  // +1 on token 1, column 0 of every head: needs n >= 2, nothing else
  decay_only,    // computes with γ² instead of γ: wrong only when γ < 1
  nan_leak,      // any NaN/Inf input poisons every output
  state_lost,    // ignores the state handed over
  varlen_leak,   // ignores the packed offsets (one state across sequences)
  exact_ulp,     // the last output one double ulp off
  fixed_error,   // every element 40 u64·M off: within the a priori bound while K + 1 > 40, never within our orders
  own_nan,       // output (token 0, column 0) of every head NaN, whatever the inputs (a kernel's own 0/0)
  own_inf,       // output (token 0, column 0) of every head +inf, whatever the inputs (an overflow)
};

fuzz::Supports all_supports() {
  fuzz::Supports s;
  s.name = "in-process";
  s.variants = variants_where(is_kernel_variant);
  s.dtypes = {DType::f64, DType::f32, DType::bf16, DType::f16};
  s.features = HLA_FEAT_UNMASKED | HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP | HLA_FEAT_DECAY | HLA_FEAT_RIDGE | HLA_FEAT_SCALE |
               HLA_FEAT_GQA | HLA_FEAT_VARLEN | HLA_FEAT_STATE | HLA_FEAT_DEN;
  s.max_n = 300;
  s.precision = engine::PrecisionMap{engine::Precision::f64, {}};
  return s;
}

// The state of a sequence so far is its tokens: q, k, v rows of every head,
// in the problem's layout, after two header numbers (n, then 0).
class Ours : public fuzz::Adapter {
 public:
  Ours(Bug bug, fuzz::Supports s) : bug_(bug), s_(std::move(s)) {}
  const fuzz::Supports& supports() const override { return s_; }
  std::vector<BatchProblem> calls;

  fuzz::RunResult run(const BatchProblem& p, const engine::Reference*, const std::vector<double>* state_in, bool want_state) override {
    calls.push_back(p);
    BatchProblem x = p;
    Index before = 0;
    if (state_in && !state_in->empty() && bug_ != Bug::state_lost) {
      before = static_cast<Index>((*state_in)[0]);
      x = prepend(p, *state_in, before);
    }
    if (bug_ == Bug::varlen_leak) x.offsets.clear();
    if (bug_ == Bug::decay_only) x.opt.gamma = x.opt.gamma * x.opt.gamma;
    const engine::CandidateOutputs all = engine::ours(x, engine::Precision::f64, Form::streaming, 64, DType::f64);
    fuzz::RunResult r;
    r.out = drop_first(p, all, before, x.n);
    if (!s_.has(HLA_FEAT_DEN)) r.out.den.clear();
    plant(p, r.out);
    if (want_state) r.state_out = state_of(x);
    return r;
  }

 private:
  void plant(const BatchProblem& p, engine::CandidateOutputs& o) const {
    switch (bug_) {
      case Bug::second_token:
        if (p.n >= 2)
          for (Index b = 0; b < p.batch; ++b)
            for (Index h = 0; h < p.heads; ++h) o.out[p.out_index(b, h, 1, 0)] += 1;
        break;
      case Bug::nan_leak:
        if (!p.all_finite()) std::fill(o.out.begin(), o.out.end(), std::nan(""));
        break;
      case Bug::own_nan:
        for (Index b = 0; b < p.batch; ++b)
          for (Index h = 0; h < p.heads; ++h)
            if (p.n > 0) o.out[p.out_index(b, h, 0, 0)] = std::nan("");
        break;
      case Bug::own_inf:
        for (Index b = 0; b < p.batch; ++b)
          for (Index h = 0; h < p.heads; ++h)
            if (p.n > 0) o.out[p.out_index(b, h, 0, 0)] = INFINITY;
        break;
      case Bug::exact_ulp:
        if (!o.out.empty()) o.out.back() = std::nextafter(o.out.back(), INFINITY);
        break;
      case Bug::fixed_error: {
        const engine::Reference ref = engine::compute_reference(p);
        for (size_t i = 0; i < o.out.size(); ++i) o.out[i] = ref.out[i] + 40 * std::ldexp(1.0, -53) * ref.mag_num[i];
        o.den.clear();
        break;
      }
      default: break;
    }
  }
  static std::vector<double> state_of(const BatchProblem& x) {
    std::vector<double> s{static_cast<double>(x.n), 0};
    for (const auto* t : {&x.q, &x.k, &x.v}) s.insert(s.end(), t->begin(), t->end());
    return s;
  }
  // The tokens of the state (m of them) followed by p's.
  static BatchProblem prepend(const BatchProblem& p, const std::vector<double>& state, Index m) {
    BatchProblem prev = p, x = p;
    prev.n = m, prev.offsets.clear();
    prev.resize_buffers();
    size_t at = 2;
    for (auto* t : {&prev.q, &prev.k, &prev.v})
      for (double& e : *t) e = state[at++];
    x.n = m + p.n;
    x.resize_buffers();
    auto copy = [&](const BatchProblem& from, Index shift) {
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < p.heads; ++h)
          for (Index t = 0; t < from.n; ++t) {
            for (Index c = 0; c < p.d; ++c) {
              x.q[x.q_index(b, h, t + shift, c)] = from.q[from.q_index(b, h, t, c)];
              x.k[x.k_index(b, h, t + shift, c)] = from.k[from.k_index(b, h, t, c)];
            }
            for (Index c = 0; c < p.dv; ++c) x.v[x.v_index(b, h, t + shift, c)] = from.v[from.v_index(b, h, t, c)];
          }
    };
    copy(prev, 0);
    copy(p, m);
    return x;
  }
  // Rows [before, n) of every head, as p's outputs.
  static engine::CandidateOutputs drop_first(const BatchProblem& p, const engine::CandidateOutputs& all, Index before, Index n) {
    engine::CandidateOutputs o{std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n * p.dv)),
                               std::vector<double>(static_cast<size_t>(p.batch * p.heads * p.n)), DType::f64, DType::f64};
    for (Index b = 0; b < p.batch; ++b)
      for (Index h = 0; h < p.heads; ++h)
        for (Index t = 0; t < p.n; ++t) {
          const size_t src = static_cast<size_t>((b * p.heads + h) * n + t + before);
          o.den[p.den_index(b, h, t)] = all.den[src];
          for (Index c = 0; c < p.dv; ++c) o.out[p.out_index(b, h, t, c)] = all.out[src * static_cast<size_t>(p.dv) + static_cast<size_t>(c)];
        }
    return o;
  }

  Bug bug_;
  fuzz::Supports s_;
};

// One hand-made case.
fuzz::FuzzCase one_case(Variant v, Index n, Index d, Index dv, uint64_t seed, Index heads = 1) {
  fuzz::FuzzCase c;
  BatchProblem& p = c.p;
  p.opt.variant = v;
  p.opt.gamma = needs_unit_gamma(v) ? Rational(1) : Rational(7, 8);
  p.dtype = DType::f32;
  p.heads = p.kv_heads = heads;
  p.n = n, p.d = d, p.dv = dv;
  p.resize_buffers();
  gen::Rng rng(seed);
  gen::fill(p, gen::Dist::gaussian, rng);
  return c;
}

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "hla_fuzz_unit_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fuzz::Summary campaign(Ours& a, uint64_t seed, size_t cases, size_t stop_after, const fs::path& dir) {
  fuzz::CampaignOptions o;
  o.seed = seed;
  o.max_cases = cases;
  o.stop_after = stop_after;
  o.findings_dir = dir.string();
  std::cout << "[campaign] seed " << seed << ", " << cases << " cases (deterministic)" << std::endl;
  return fuzz::run_campaign(a, o);
}

}  // namespace

TEST_CASE("generator: every feature, distribution and probe is drawn", "[fuzz][generator]") {
  const fuzz::Supports s = all_supports();
  std::map<std::string, size_t> n;
  std::set<std::string> dists;
  const uint64_t seed = 20261201;
  std::cout << "[generator] cases make_case(all supports, derive_seed(" << seed << ", i)), i < 3000" << std::endl;
  for (uint64_t i = 0; i < 3000; ++i) {
    const fuzz::FuzzCase c = fuzz::make_case(s, gen::derive_seed(seed, i));
    const BatchProblem& p = c.p;
    const Options& o = p.opt;
    dists.insert(gen::to_string(c.dist));
    n["varlen"] += !p.offsets.empty();
    n["varlen, 2 sequences"] += p.offsets.size() == 3;
    n["gqa"] += p.kv_heads < p.heads;
    n["decay"] += o.gamma != 1;
    n["normalize add (not forced by the distribution)"] += o.normalize && o.eps_mode == EpsMode::add && c.dist != gen::Dist::near_zero_den;
    n["clamp"] += o.normalize && o.eps_mode == EpsMode::clamp;
    n["ridge"] += o.lambda != 0;
    n["scale"] += o.scale != 1;
    n["unmasked"] += !o.masked;
    n["batch 2"] += p.batch == 2;
    n["4 heads"] += p.heads == 4;
    n["exact tier"] += c.exact_tier;
    // Lengths 1..40 are common anyway; 64 and 128 ± 1 come from the chunk-boundary draw.
    n["n = 64 or 128"] += p.n == 64 || p.n == 128;
    n["n = 64 or 128, -1"] += p.n == 63 || p.n == 127;
    n["n = 64 or 128, +1"] += p.n == 65 || p.n == 129;
    n["probe state_continuation"] += c.probe == fuzz::Probe::state_continuation;
    n["probe state_continuation, packed"] += c.probe == fuzz::Probe::state_continuation && !p.offsets.empty();
    n["state split after token 1 or later"] += c.probe == fuzz::Probe::state_continuation && c.splits.front() > 1;
    n["probe nan_causality"] += c.probe == fuzz::Probe::nan_causality;
    if (c.probe == fuzz::Probe::nan_causality) {
      // Where the poison sits: a token after the first in its sequence, or the first.
      for (const auto* x : {&p.q, &p.k, &p.v})
        for (size_t e = 0; e < x->size(); ++e)
          if (!std::isfinite((*x)[e])) {
            const Index w = x == &p.v ? p.dv : p.d;
            const Index t = static_cast<Index>(e / static_cast<size_t>(w)) % p.n;
            n[t > 0 ? "poison after token 0" : "poison at token 0"] += 1;
          }
    }
  }
  for (const auto& [what, count] : n) std::cout << "  " << what << ": " << count << "\n";
  for (const auto& [what, count] : n) {
    INFO(what);
    CHECK(count > 0);
  }
  CHECK(dists.size() == gen::all_dists().size());
  CHECK(n["poison after token 0"] > n["poison at token 0"]);
  // The boundary draw is n = w - 1, w, w + 1 alike: a third each, not mostly w.
  CHECK(2 * n["n = 64 or 128, -1"] > n["n = 64 or 128"]);
  CHECK(2 * n["n = 64 or 128, +1"] > n["n = 64 or 128"]);
}

TEST_CASE("judge: each probe reports its finding kind, honest candidates pass", "[fuzz][kinds]") {
  const fuzz::Supports s = all_supports();
  Ours honest(Bug::none, s);
  // numerics (rules: the a priori bound, and the ratio)
  {
    const fuzz::FuzzCase c = one_case(Variant::hla2, 9, 3, 2, 1, 2);
    Ours bug(Bug::second_token, s);
    const fuzz::Verdict v = fuzz::judge(bug, c);
    INFO(v.message);
    CHECK(v.kind == "numerics");
    CHECK(v.rules == "bound,ratio");
    CHECK(fuzz::judge(honest, c).kind.empty());
  }
  // nan_causality: NaN in k at token 3 reaches tokens 0-2 through the bug
  {
    fuzz::FuzzCase c = one_case(Variant::la1, 6, 2, 2, 2);
    c.probe = fuzz::Probe::nan_causality;
    c.p.k[c.p.k_index(0, 0, 3, 1)] = NAN;
    Ours bug(Bug::nan_leak, s);
    const fuzz::Verdict v = fuzz::judge(bug, c);
    INFO(v.message);
    CHECK(v.kind == "nan_causality");
    CHECK(fuzz::judge(honest, c).kind.empty());
    // A NaN the kernel makes without the planted one (token 0 is before it) is numerics, not causality.
    Ours own(Bug::own_nan, s);
    const fuzz::Verdict o = fuzz::judge(own, c);
    INFO(o.message);
    CHECK(o.kind == "numerics");
    CHECK(o.rules.find("nonfinite") != std::string::npos);
    // +inf where every input it depends on is finite (token 0, before the NaN) is an overflow.
    Ours inf(Bug::own_inf, s);
    const fuzz::Verdict i = fuzz::judge(inf, c);
    INFO(i.message);
    CHECK(i.kind == "overflow");
    CHECK(i.rules.find("overflow") != std::string::npos);
    CHECK(i.rules.find("nonfinite") == std::string::npos);
    CHECK(fuzz::judge(inf, one_case(Variant::hla2, 9, 3, 2, 1, 2)).kind == "overflow");
    // Poison at token 0: every output depends on it; nothing to judge is no finding.
    c.p.k[c.p.k_index(0, 0, 3, 1)] = 0.5;
    c.p.k[c.p.k_index(0, 0, 0, 0)] = INFINITY;
    const fuzz::Verdict all = fuzz::judge(honest, c);
    CHECK(all.kind.empty());
    CHECK(all.inconclusive);
  }
  // exact_tier: one double ulp off is within every numeric rule, not bit-exact
  {
    fuzz::FuzzCase c;
    c.p.opt.variant = Variant::la1;
    c.p.dtype = DType::f32;
    c.p.n = 3, c.p.d = 2, c.p.dv = 1;
    c.p.q = {1, 2, -1, 1, 2, 2}, c.p.k = {1, 1, 2, -1, 1, 1}, c.p.v = {2, 1, -2};
    c.dist = gen::Dist::small_int;
    c.exact_tier = gen::qualifies_exact_tier(c.p);
    REQUIRE(c.exact_tier);
    Ours bug(Bug::exact_ulp, s);
    const fuzz::Verdict v = fuzz::judge(bug, c);
    INFO(v.message);
    CHECK(v.kind == "exact_tier");
    CHECK(v.rules == "exact");
    CHECK(fuzz::judge(honest, c).kind.empty());
  }
  // varlen: two packed sequences, each right alone, wrong together
  {
    fuzz::FuzzCase c = one_case(Variant::ahla, 11, 2, 2, 3);
    c.p.offsets = {0, 5, 11};
    Ours bug(Bug::varlen_leak, s);
    const fuzz::Verdict v = fuzz::judge(bug, c);
    INFO(v.message);
    CHECK(v.kind == "varlen");
    CHECK(fuzz::judge(honest, c).kind.empty());
  }
  // state_continuation: one pass right, two with the state handed over wrong
  {
    fuzz::FuzzCase c = one_case(Variant::hla3, 8, 2, 2, 4);
    c.probe = fuzz::Probe::state_continuation;
    c.splits = {3};
    Ours bug(Bug::state_lost, s);
    const fuzz::Verdict v = fuzz::judge(bug, c);
    INFO(v.message);
    CHECK(v.kind == "state_continuation");
    CHECK(bug.calls.size() == 3);
    CHECK(fuzz::judge(honest, c).kind.empty());
  }
}

TEST_CASE("shrinker: findings shrink to the minimal case, in steps", "[fuzz][shrink]") {
  // The bug needs two tokens and nothing else: every plain-probe finding must
  // end at one head of one batch entry, n = 2, d = dv = 1, needing no feature.
  fuzz::Supports s = all_supports();
  s.features &= ~HLA_FEAT_STATE;
  s.dtypes = {DType::f32, DType::bf16};
  Ours bug(Bug::second_token, s);
  ScratchDir dir;
  const fuzz::Summary r = campaign(bug, 5, 40, 4, dir.path);
  std::cout << r.text() << std::endl;
  REQUIRE(r.findings.size() == 4);
  size_t plain = 0, wide = 0, several = 0;
  for (const fuzz::Finding& f : r.findings) {
    INFO(f.original << "\n -> " << f.shrunk);
    CHECK(f.kind == "numerics");
    CHECK(f.shrink_steps > 0);
    CHECK(f.shrunk.find(" B=1 H=1 Hkv=1 ") != std::string::npos);
    CHECK(f.shrunk.find("f32 ") != std::string::npos);
    several += f.original.find(" B=1 H=1 ") == std::string::npos;
    // A causality probe keeps its NaN (and the columns and tokens up to it), a
    // packed case its sequences; a plain one has nothing to keep.
    if (f.shrunk.find("probe plain") != std::string::npos && f.original.find("packed") == std::string::npos) {
      ++plain;
      wide += f.original.find(" d=1 dv=1") == std::string::npos;
      CHECK(f.shrunk.find(" n=2 d=1 dv=1,") != std::string::npos);
      CHECK(f.needs == "none");
    }
  }
  // Not vacuous: some findings started with several heads, wider heads, the plain probe.
  CHECK(several > 0);
  CHECK(wide > 0);
  CHECK(plain > 0);
}

TEST_CASE("shrinker: the reductions of a case, each of them", "[fuzz][shrink]") {
  // docs/fuzzing.md (shrinking): fewer heads, tokens (a prefix, or without a
  // leading part), columns, simpler options, f32, small integers and zeros.
  fuzz::Supports s = all_supports();
  fuzz::FuzzCase c = one_case(Variant::hla2, 8, 4, 4, 12, 2);
  BatchProblem& p = c.p;
  p.batch = 2, p.kv_heads = 1, p.dtype = DType::bf16;
  p.opt.masked = false, p.opt.lambda = Rational(1, 4), p.opt.normalize = true, p.opt.scale = 2;
  p.resize_buffers();
  gen::Rng rng(13);
  gen::fill(p, gen::Dist::gaussian, rng);
  const std::vector<fuzz::FuzzCase> rs = fuzz::reductions(c, s);
  auto has = [&](const char* what, auto&& pred) {
    INFO(what);
    CHECK(std::any_of(rs.begin(), rs.end(), [&](const fuzz::FuzzCase& r) { return pred(r.p); }));
  };
  auto same_tokens = [&](const BatchProblem& r, Index t0) {  // r's tokens are p's t0, t0 + 1, …
    for (Index b = 0; b < p.batch; ++b)
      for (Index t = 0; t < r.n; ++t)
        for (Index i = 0; i < p.d; ++i)
          if (r.q[r.q_index(b, 1, t, i)] != p.q[p.q_index(b, 1, t + t0, i)]) return false;
    return true;
  };
  for (Index b = 0; b < 2; ++b)
    for (Index h = 0; h < 2; ++h)
      has("one head of one batch entry", [&](const BatchProblem& r) {
        return r.batch == 1 && r.heads == 1 && r.n == 8 && r.q[r.q_index(0, 0, 5, 2)] == p.q[p.q_index(b, h, 5, 2)] &&
               r.k == std::vector<double>(p.k.begin() + b * 32, p.k.begin() + (b + 1) * 32);
      });
  for (Index n : {2, 4, 6, 7})
    has("a prefix", [&](const BatchProblem& r) { return r.heads == 2 && r.n == n && same_tokens(r, 0); });
  for (Index t0 : {4, 2, 1})
    has("without a leading part", [&](const BatchProblem& r) { return r.heads == 2 && r.n == 8 - t0 && same_tokens(r, t0); });
  for (const auto& shape : {std::pair<Index, Index>{2, 4}, {4, 2}, {3, 4}, {4, 3}}) {
    const Index d = shape.first, dv = shape.second;  // not a structured binding: the lambda captures them
    has("narrower", [&](const BatchProblem& r) { return r.n == 8 && r.d == d && r.dv == dv && r.q[r.q_index(1, 1, 7, 0)] == p.q[p.q_index(1, 1, 7, 0)]; });
  }
  has("no ridge", [&](const BatchProblem& r) { return r.opt.lambda == 0 && r.opt.gamma == p.opt.gamma; });
  has("not normalized", [&](const BatchProblem& r) { return !r.opt.normalize && r.opt.lambda != 0; });
  has("no decay", [&](const BatchProblem& r) { return r.opt.gamma == 1 && r.opt.normalize; });
  has("scale 1", [&](const BatchProblem& r) { return r.opt.scale == 1 && r.opt.gamma != 1; });
  has("masked", [&](const BatchProblem& r) { return r.opt.masked && r.opt.scale != 1; });
  has("f32 inputs", [&](const BatchProblem& r) { return r.dtype == DType::f32 && r.n == 8; });
  has("small integer queries", [&](const BatchProblem& r) {
    return r.k == p.k && std::all_of(r.q.begin(), r.q.end(), [](double x) { return x == std::round(x) && std::fabs(x) <= 2; });
  });
  has("zero values", [&](const BatchProblem& r) {
    return r.q == p.q && std::all_of(r.v.begin(), r.v.end(), [](double x) { return x == 0; });
  });
}

TEST_CASE("shrinker: fewer heads, fewer batch entries, one K/V group", "[fuzz][shrink]") {
  // Besides one head of one entry: every entry with one head, one entry with
  // every head, one K/V group with its GQA ratio (a finding may need any of them).
  fuzz::Supports s = all_supports();
  fuzz::FuzzCase c = one_case(Variant::la1, 5, 2, 2, 14, 4);
  BatchProblem& p = c.p;
  p.batch = 2, p.kv_heads = 2;
  p.resize_buffers();
  gen::Rng rng(15);
  gen::fill(p, gen::Dist::gaussian, rng);
  const std::vector<fuzz::FuzzCase> rs = fuzz::reductions(c, s);
  auto has = [&](const char* what, Index B, Index H, Index Hkv, Index b0, Index h0) {
    INFO(what);
    // Query head h of entry b of the reduction is head h0 + h of entry b0 + b; its K/V head that of p.
    CHECK(std::any_of(rs.begin(), rs.end(), [&](const fuzz::FuzzCase& k) {
      const BatchProblem& r = k.p;
      if (r.batch != B || r.heads != H || r.kv_heads != Hkv || r.n != p.n) return false;
      for (Index b = 0; b < B; ++b)
        for (Index h = 0; h < H; ++h)
          for (Index t = 0; t < p.n; ++t)
            for (Index i = 0; i < p.d; ++i)
              if (r.q[r.q_index(b, h, t, i)] != p.q[p.q_index(b0 + b, h0 + h, t, i)] ||
                  r.k[r.k_index(b, h, t, i)] != p.k[p.k_index(b0 + b, h0 + h, t, i)])
                return false;
      return true;
    }));
  };
  has("one head of one entry", 1, 1, 1, 1, 3);
  has("every entry, one head", 2, 1, 1, 0, 2);
  has("one entry, every head", 1, 4, 2, 1, 0);
  has("every entry, K/V group 1 (GQA ratio 2)", 2, 2, 1, 0, 2);
}

TEST_CASE("shrinker: packed sequences shorten and stay packed", "[fuzz][shrink]") {
  fuzz::Supports s = all_supports();
  fuzz::FuzzCase c = one_case(Variant::la1, 24, 1, 1, 16);
  c.p.offsets = {0, 8, 12, 24};
  const std::vector<fuzz::FuzzCase> rs = fuzz::reductions(c, s);
  auto has = [&](const char* what, const std::vector<int64_t>& offsets, Index from) {
    INFO(what);
    CHECK(std::any_of(rs.begin(), rs.end(), [&](const fuzz::FuzzCase& k) {
      return k.p.offsets == offsets && k.p.q[0] == c.p.q[static_cast<size_t>(from)];
    }));
  };
  has("every sequence halved", {0, 4, 6, 12}, 0);
  has("the first sequence's prefix", {0, 2, 6, 18}, 0);
  has("the last sequence without its leading half", {0, 8, 12, 18}, 0);
  has("the middle sequence dropped", {0, 8, 20}, 0);
  has("the last two", {0, 4, 16}, 8);
  // A packed state case: each sequence keeps its split, moved with its tokens.
  c.probe = fuzz::Probe::state_continuation;
  c.splits = {4, 10, 20};
  size_t moved = 0;
  for (const fuzz::FuzzCase& k : fuzz::reductions(c, s)) {
    const auto seqs = k.p.sequences();
    REQUIRE(k.splits.size() == seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) CHECK((seqs[i].first < k.splits[i] && k.splits[i] < seqs[i].second));
    // The first sequence's prefix [0, 6), the last without its leading half [18, 24).
    moved += k.p.offsets == std::vector<int64_t>{0, 6, 10, 22} && k.splits == std::vector<Index>{4, 8, 18};
    moved += k.p.offsets == std::vector<int64_t>{0, 8, 12, 18} && k.splits == std::vector<Index>{4, 10, 14};
  }
  CHECK(moved == 2);
}

TEST_CASE("shrinker: a varlen finding ends small and still packed", "[fuzz][shrink]") {
  // One state across packed sequences shows with two tokens in two sequences.
  fuzz::Supports s = all_supports();
  s.features &= ~HLA_FEAT_STATE;
  s.dtypes = {DType::f32};
  Ours bug(Bug::varlen_leak, s);
  ScratchDir dir;
  const fuzz::Summary r = campaign(bug, 8, 60, 2, dir.path);
  std::cout << r.text() << std::endl;
  REQUIRE(!r.findings.empty());
  for (const fuzz::Finding& f : r.findings) {
    INFO(f.original << "\n -> " << f.shrunk);
    CHECK(f.kind == "varlen");
    CHECK(f.shrunk.find(" packed 2 seqs") != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(f.shrunk, m, std::regex(" n=(\\d+) ")));
    CHECK(std::stol(m[1]) <= 4);
  }
}

TEST_CASE("shrinker: keeps what the bug needs and the rules it fails", "[fuzz][shrink]") {
  // Decay only: the shrunk case keeps γ < 1 and says it needs decay.
  fuzz::Supports s = all_supports();
  s.features &= ~HLA_FEAT_STATE;
  s.dtypes = {DType::f32};
  {
    Ours bug(Bug::decay_only, s);
    ScratchDir dir;
    const fuzz::Summary r = campaign(bug, 6, 40, 3, dir.path);
    std::cout << r.text() << std::endl;
    REQUIRE(!r.findings.empty());
    for (const fuzz::Finding& f : r.findings) {
      INFO(f.shrunk);
      CHECK(f.shrunk.find("gamma=1 ") == std::string::npos);
      CHECK(f.needs.find("decay") != std::string::npos);
    }
  }
  // An error of 40 u·M everywhere fails rule 3 only where K + 1 > 40; the
  // shrinker must not trade that failure for an a priori bound failure of a
  // smaller case (K + 1 ≤ 40): the shrunk finding still fails rule 3 alone.
  {
    s.variants = {Variant::la1};
    s.features &= ~(HLA_FEAT_NORMALIZE | HLA_FEAT_CLAMP);  // the error is planted in num's units
    Ours bug(Bug::fixed_error, s);
    ScratchDir dir;
    const fuzz::Summary r = campaign(bug, 7, 40, 4, dir.path);
    std::cout << r.text() << std::endl;
    size_t judged = 0;
    for (const fuzz::Finding& f : r.findings) {
      // Cases that began with K + 1 = 2(n + d) + 17 > 40 (one sequence) failed rule 3 alone.
      std::smatch m;
      if (!std::regex_search(f.original, m, std::regex(" n=(\\d+) d=(\\d+) ")) || f.original.find("packed") != std::string::npos ||
          2 * (std::stol(m[1]) + std::stol(m[2])) + 17 <= 40)
        continue;
      ++judged;
      INFO(f.original << "\n -> " << f.shrunk << "\n" << f.message);
      CHECK(f.message.find("the worst of our honest evaluation orders") != std::string::npos);
      CHECK(f.message.find("a priori bound") == std::string::npos);
    }
    CHECK(judged > 0);
  }
}

TEST_CASE("campaign: case i of the stream, shards disjoint", "[fuzz][campaign]") {
  fuzz::Supports s = all_supports();
  s.features &= ~HLA_FEAT_STATE;  // one call per case
  const uint64_t seed = 11;
  for (size_t shard : {0, 1}) {
    Ours honest(Bug::none, s);
    fuzz::CampaignOptions o;
    o.seed = seed, o.max_cases = 12, o.shard = shard, o.shards = 2;
    ScratchDir dir;
    o.findings_dir = dir.path.string();
    const fuzz::Summary r = fuzz::run_campaign(honest, o);
    CHECK(r.findings.empty());
    // Every case's time is split into its phases, each spent, together within the whole.
    CHECK(r.phases.reference > 0);
    CHECK(r.phases.candidate > 0);
    CHECK(r.phases.check > 0);
    CHECK(r.phases.reference + r.phases.candidate + r.phases.check <= r.seconds);
    CHECK(r.text().find("per case: reference ") != std::string::npos);
    REQUIRE(honest.calls.size() == 12);
    for (size_t i = 0; i < 12; ++i) {
      const fuzz::FuzzCase want = fuzz::make_case(s, gen::derive_seed(seed, shard + 2 * i));
      INFO("shard " << shard << " call " << i << ": " << want.describe());
      CHECK(honest.calls[i].q.size() == want.p.q.size());
      CHECK(std::equal(honest.calls[i].v.begin(), honest.calls[i].v.end(), want.p.v.begin(), want.p.v.end(),
                       [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }));
    }
  }
}

TEST_CASE("campaign: reports through its callbacks and prints nothing", "[fuzz][campaign]") {
  // A findings folder that is a file: each finding goes to the fallback folder, which a note names.
  fuzz::Supports s = all_supports();
  s.features &= ~HLA_FEAT_STATE;
  Ours buggy(Bug::second_token, s);
  ScratchDir dir;
  const fs::path blocked = dir.path / "not-a-folder";
  std::ofstream(blocked) << "x";
  fuzz::CampaignOptions o;
  o.seed = 5, o.max_cases = 20, o.stop_after = 2, o.shrink_attempts = 20, o.findings_dir = blocked.string();
  std::vector<fuzz::Progress> progress;
  std::vector<std::string> findings, notes;
  o.on_progress = [&](const fuzz::Progress& p) { progress.push_back(p); };
  o.on_finding = [&](const fuzz::Finding& f) { findings.push_back(f.headline()); };
  o.on_note = [&](const std::string& m) { notes.push_back(m); };
  // Everything written to file descriptor 2 while the campaign runs.
  const fs::path err = dir.path / "stderr";
  std::fflush(stderr);
  const int saved = ::dup(2), fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, 2);
  const fuzz::Summary r = fuzz::run_campaign(buggy, o);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(fd), ::close(saved);
  if (!r.fallback_dir.empty()) fs::remove_all(r.fallback_dir);
  INFO(r.text());
  CHECK(fs::file_size(err) == 0);
  REQUIRE(r.findings.size() == 2);
  REQUIRE(findings.size() == 2);
  CHECK(findings[0] == "finding [" + r.findings[0].kind + "] at case " + std::to_string(r.findings[0].case_index) + ": " +
                           r.findings[0].message);
  REQUIRE(progress.size() == r.cases);
  for (size_t i = 0; i < progress.size(); ++i) {
    CHECK(progress[i].cases == i + 1);
    CHECK(progress[i].max_cases == 20);
  }
  CHECK(progress.back().findings == 2);
  CHECK(progress.back().text().rfind("[" + std::to_string(r.cases) + "/20 cases] 2 finding(s), ", 0) == 0);
  REQUIRE(notes.size() == 2);
  CHECK(notes[0].find("wrote it to " + r.fallback_dir + " instead") != std::string::npos);
}

TEST_CASE("campaign: inconclusive cases are counted, not reported", "[fuzz][campaign]") {
  // Declared f16 precision: u·M below f16's smallest normal 2^-14 (M < 1/8,
  // short sequences of small values) is the underflow regime, not scored.
  fuzz::Supports s = all_supports();
  s.features &= ~HLA_FEAT_STATE;
  s.precision = engine::PrecisionMap{engine::Precision::f16, {}};
  s.max_n = 40;
  const uint64_t seed = 3;
  const size_t cases = 150;
  Ours honest(Bug::none, s);
  ScratchDir dir;
  const fuzz::Summary r = campaign(honest, seed, cases, 0, dir.path);
  size_t expected = 0;
  for (size_t i = 0; i < cases; ++i) {
    Ours fresh(Bug::none, s);
    expected += fuzz::judge(fresh, fuzz::make_case(s, gen::derive_seed(seed, i))).inconclusive;
  }
  INFO(r.text());
  CHECK(r.findings.empty());
  CHECK(expected > 0);
  CHECK(r.inconclusive == expected);
}

TEST_CASE("judge: packed state cases, each sequence from its own state", "[fuzz][cabi]") {
  // The zoo's backward_dstate_next_packed hands sequence s the state gradient
  // of s + 1 within a packed row: only a packed state case shows it.
  const char* paths_file = std::getenv("HLA_ZOO_PATHS");
  REQUIRE(paths_file);
  const nlohmann::json paths = nlohmann::json::parse(std::ifstream(paths_file));
  auto right = fuzz::make_cabi_adapter(paths.at("correct_backward_state").get<std::string>(), 10);
  auto wrong = fuzz::make_cabi_adapter(paths.at("backward_dstate_next_packed").get<std::string>(), 10);
  const uint64_t seed = 23;
  size_t packed = 0;
  for (size_t i = 0; i < 400 && packed < 3; ++i) {
    const fuzz::FuzzCase c = fuzz::make_case(right->supports(), gen::derive_seed(seed, i));
    if (c.probe != fuzz::Probe::state_continuation || c.p.offsets.empty() || !c.grad || c.p.n > 64) continue;
    ++packed;
    INFO("seed " << seed << ", case " << i << ": " << c.describe());
    const fuzz::Verdict v = fuzz::judge(*right, c), w = fuzz::judge(*wrong, c);
    INFO(v.message << "\n" << w.message);
    CHECK(v.kind.empty());
    CHECK(w.kind == "state_gradient_continuation");
  }
  CHECK(packed == 3);
}

TEST_CASE("C ABI adapter: a hang is a timeout, a segfault a crash", "[fuzz][cabi]") {
  const char* paths_file = std::getenv("HLA_ZOO_PATHS");
  REQUIRE(paths_file);
  const nlohmann::json paths = nlohmann::json::parse(std::ifstream(paths_file));
  const fuzz::FuzzCase hang = one_case(Variant::la1, 7, 2, 2, 8);      // zoo "hang": n a multiple of 7
  const fuzz::FuzzCase crash = one_case(Variant::la1, 41, 2, 2, 9);    // zoo "crash_long": n > 40
  auto a = fuzz::make_cabi_adapter(paths.at("hang").get<std::string>(), 0.5);
  CHECK(fuzz::judge(*a, hang).kind == "timeout");
  auto b = fuzz::make_cabi_adapter(paths.at("crash_long").get<std::string>(), 10);
  CHECK(fuzz::judge(*b, crash).kind == "crash");
  CHECK(fuzz::judge(*b, hang).kind.empty());
}

}  // namespace hla
