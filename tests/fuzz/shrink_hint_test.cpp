// The shrinker keeps a finding's class hint (campaign.cpp: a reduction is
// accepted only with the same kind, the same failed rules and the same
// other_class_passes). The candidate is hla2's paper state in f32 (S·C − G:
// it subtracts unmasked partial sums) declared `masked`: where cancellation
// makes it fail, it passes as state_difference (hint). A planted error that
// no class explains (hint gone, same kind and rules) switches on by sequence
// length, so the reductions that drop tokens flip the hint:
//   keep: planted at n ≤ n0/2: shrinking the hinted case must not lose the hint;
//   gain: planted at n > n0/2: shrinking the unhinted case must not gain it.
// Deterministic: the first case of the stream (seed printed) that fails by
// cancellation alone, also in a prefix of at most half its tokens.
#include "hla/fuzz/campaign.hpp"
#include "hla/fuzz/cases.hpp"

#include "hla/check/check.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <string>

namespace hla {
namespace shrink_hint {

namespace fs = std::filesystem;

fuzz::Supports paper_supports() {
  fuzz::Supports s;
  s.name = "hla2 paper state, f32, declared masked";
  s.variants = {Variant::hla2};
  s.dtypes = {DType::f32};
  s.features = 0;  // masked, γ = 1, no normalization: the paper state is all there is
  s.max_n = 40, s.max_d = 4, s.max_dv = 4;
  s.precision = engine::PrecisionMap{engine::Precision::f32, {}};
  return s;
}

// planted(n): add max(1, M_sd) to every output (fails in both classes: no hint).
std::unique_ptr<fuzz::Adapter> paper_state(std::function<bool(Index)> planted) {
  return fuzz::make_function_adapter(paper_supports(), [planted](const BatchProblem& p, const std::vector<double>*, bool) {
    fuzz::RunResult r;
    r.out = engine::ours(p, engine::Precision::f32, Form::streaming_paper_state, 64, DType::f32);
    r.out.den.clear();
    if (planted(p.n)) {
      const engine::Reference ref = engine::compute_reference(p);
      for (size_t i = 0; i < r.out.out.size(); ++i) r.out.out[i] = round_to(DType::f32, r.out.out[i] + std::max(1.0, ref.mag_num_sd[i]));
    }
    return r;
  });
}

bool hinted(const std::string& message) { return message.find("judged as --form-class state_difference") != std::string::npos; }

std::string verdict(const fuzz::Verdict& v) {
  return v.kind + " [" + v.rules + "]" + (v.other_class_passes ? " hinted" : "");
}

struct Scratch {
  fs::path path;
  Scratch() {
    std::string t = (fs::temp_directory_path() / "hla_shrink_hint_XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace shrink_hint

TEST_CASE("shrinker: keeps the class hint of a finding, neither losing nor gaining it", "[fuzz][shrink]") {
  using namespace shrink_hint;
  const fuzz::Supports s = paper_supports();
  const uint64_t seed = 29;
  const auto honest = paper_state([](Index) { return false; });
  // The case: the paper state fails as masked by cancellation alone (bound and
  // ratio, hinted), and so does a reduction to at most half its tokens.
  size_t index = 0;
  fuzz::FuzzCase c;
  fuzz::Verdict v;
  bool found = false;
  for (size_t i = 0; i < 200 && !found; ++i) {
    c = fuzz::make_case(s, gen::derive_seed(seed, i));
    if (c.probe != fuzz::Probe::plain || c.exact_tier || c.p.n < 8) continue;
    v = fuzz::judge(*honest, c);
    if (v.kind != "numerics" || v.rules != "bound,ratio" || !v.other_class_passes) continue;
    for (const fuzz::FuzzCase& r : fuzz::reductions(c, s))
      if (r.p.n <= c.p.n / 2) {
        const fuzz::Verdict w = fuzz::judge(*honest, r);
        if (w.kind == v.kind && w.rules == v.rules && w.other_class_passes) {
          found = true, index = i;
          break;
        }
      }
  }
  std::cout << "[shrink hint] seed " << seed << ", case " << index << ": " << c.describe() << "\n  unplanted: " << verdict(v) << std::endl;
  REQUIRE(found);
  const Index half = c.p.n / 2;
  for (const bool keep : {true, false}) {
    // keep: planted on the reductions to ≤ n/2 tokens; gain: on the others (the original too).
    const auto a = paper_state([keep, half](Index n) { return keep ? n <= half : n > half; });
    const fuzz::Verdict original = fuzz::judge(*a, c);
    INFO((keep ? "keep" : "gain") << ": original " << verdict(original));
    REQUIRE(original.kind == "numerics");
    REQUIRE(original.rules == "bound,ratio");
    REQUIRE(original.other_class_passes == keep);
    // Not vacuous: a reduction fails the same way by the same rules with the other hint.
    bool flips = false;
    for (const fuzz::FuzzCase& r : fuzz::reductions(c, s)) {
      const fuzz::Verdict w = fuzz::judge(*a, r);
      flips = flips || (w.kind == original.kind && w.rules == original.rules && w.other_class_passes != keep);
      if (flips) break;
    }
    REQUIRE(flips);
    // The campaign takes exactly case `index` (its shard's first) and shrinks it.
    Scratch dir;
    fuzz::CampaignOptions o;
    o.seed = seed, o.shard = index, o.shards = index + 1, o.max_cases = 1;
    o.findings_dir = dir.path.string();
    const fuzz::Summary sum = fuzz::run_campaign(*a, o);
    REQUIRE(sum.findings.size() == 1);
    const fuzz::Finding& f = sum.findings.front();
    std::cout << "  " << (keep ? "keep" : "gain") << ": shrunk in " << f.shrink_steps << " steps to " << f.shrunk
              << (hinted(f.message) ? " (hinted)" : " (no hint)") << std::endl;
    INFO(f.original << "\n -> " << f.shrunk << " (" << f.shrink_steps << " steps)\n" << f.message);
    CHECK(f.original == c.describe());
    CHECK(f.kind == "numerics");
    CHECK(f.shrink_steps > 0);
    CHECK(hinted(f.message) == keep);
    // Where the hint is decided: the shrunk case stayed on its side of n0/2.
    const auto at = f.shrunk.find(" n=");
    REQUIRE(at != std::string::npos);
    CHECK(std::stol(f.shrunk.substr(at + 3)) > half);
  }
}

}  // namespace hla
