// One finding group per cause (issue 40): findings group by kind and cause
// (grouping.cpp), not by the rules they fail, their dtype or options; a
// group's examples keep its variety.
#include "hla/fuzz/campaign.hpp"

#include <catch2/catch.hpp>

#include <random>

using namespace hla;
using namespace hla::fuzz;

namespace {

// The paper's E1 (hla2, G decayed by γ) on inputs of `dtype`, checked as an f32 kernel.
check::Report e1_report(DType dtype, bool normalize) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> N;
  BatchProblem p;
  p.opt.gamma = Rational(7, 8), p.opt.normalize = normalize;
  p.dtype = dtype, p.heads = 2, p.kv_heads = 2, p.n = 40, p.d = 8, p.dv = 8;
  p.resize_buffers();
  for (auto* x : {&p.q, &p.k, &p.v})
    for (double& e : *x) e = round_to(dtype, N(rng) / 3);
  return check::check(p, engine::ours_paper(p, engine::Precision::f32, PaperForm::E1_hla2_streaming, 16, DType::f32));
}

Finding finding(const check::Report& r, const std::string& rules, const std::string& needs) {
  Finding f;
  f.kind = "numerics", f.tensor = "out", f.rules = rules, f.needs = needs, f.cause = cause_of(r);
  return f;
}

}  // namespace

TEST_CASE("grouping: one cause through several dtypes and rule sets is one group", "[fuzz][grouping]") {
  const check::Report f32 = e1_report(DType::f32, false), bf16 = e1_report(DType::bf16, false), norm = e1_report(DType::f16, true);
  REQUIRE(cause_of(f32) == "matches E1");
  REQUIRE(cause_of(bf16) == "matches E1");
  REQUIRE(cause_of(norm) == "matches E1");
  std::vector<Group> groups;
  std::vector<Finding> all{finding(f32, "bound,ratio", "decay"), finding(bf16, "ratio", "decay"),
                           finding(norm, "ratio", "decay, normalize")};
  for (Finding& f : all) group_finding(groups, f);
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].signature() == "numerics|matches E1");
  CHECK((all[0].group == 0 && all[1].group == 0 && all[2].group == 0));
}

TEST_CASE("grouping: without a diagnosis, the error profile decides", "[fuzz][grouping]") {
  check::Report a, b;
  a.maps.push_back({}), a.maps[0].name = "out", a.maps[0].fails = true;
  b = a;
  a.hints = {"out: periodic at width 16: the wrong tokens are …"};
  b.hints = {"out: periodic at width 32: the wrong tokens are …"};
  CHECK(cause_of(a) == "profile out; out: periodic at width #");
  CHECK(cause_of(a) == cause_of(b));
  b.hints = {"out: grows with the token index: …"};
  CHECK(cause_of(a) != cause_of(b));
  std::vector<Group> groups;
  Finding x = finding(a, "ratio", "decay"), y = finding(b, "ratio", "decay");
  CHECK(group_finding(groups, x) == 0);
  CHECK(group_finding(groups, y) == 1);  // the same kind, tensor, rules and needs: two causes
}

TEST_CASE("grouping: examples cover a group's variety", "[fuzz][grouping]") {
  Group g;
  std::vector<Finding> all;
  auto add = [&](const std::string& needs) {
    Finding f;
    f.kind = "numerics", f.needs = needs;
    const bool takes = takes_example(g, all, f, 3);
    if (takes) g.examples.push_back(all.size());
    all.push_back(f);
    return takes;
  };
  CHECK(add("decay"));
  CHECK(add("decay"));   // a slot for the same variety, the last one kept
  CHECK(!add("decay"));  // the last slot waits for another variety
  CHECK(add("decay, bf16 inputs"));
  CHECK(!add("scale"));  // full
}
