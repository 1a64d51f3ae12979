// Uses the installed fuzzer (hla::fuzz) as a kernel's test would: a short
// campaign over a function computing la1 with our streaming form in f32, and
// the same function with one output element off. Returns 0 when the correct
// one has no finding and the broken one has at least one.
#include "hla/fuzz/campaign.hpp"

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

std::unique_ptr<hla::fuzz::Adapter> la1(bool broken) {
  hla::fuzz::Supports s;
  s.name = broken ? "broken_la1" : "la1";
  s.variants = {hla::Variant::la1};
  s.dtypes = {hla::DType::f32};
  s.max_n = 24, s.max_d = 4, s.max_dv = 4;
  return hla::fuzz::make_function_adapter(s, [broken](const hla::BatchProblem& p, const std::vector<double>*, bool) {
    hla::fuzz::RunResult r;
    r.out = hla::engine::ours(p, hla::engine::Precision::f32, hla::Form::streaming, 64, hla::DType::f32);
    if (broken && !r.out.out.empty()) r.out.out.back() = static_cast<float>(r.out.out.back() * 1.25 + 1);
    return r;
  });
}

}  // namespace

// The number of findings of a 30-case campaign (findings under dir).
size_t consumer_fuzz(bool broken, const std::string& dir) {
  hla::fuzz::CampaignOptions o;
  o.seed = 7, o.max_cases = 30, o.stop_after = 1, o.shrink_attempts = 20;
  o.findings_dir = dir;
  const auto adapter = la1(broken);
  const hla::fuzz::Summary s = hla::fuzz::run_campaign(*adapter, o);
  std::printf("hla_oracle consumer: fuzz %s: %zu cases, %zu findings\n", adapter->supports().name.c_str(), s.cases,
              s.findings.size());
  return s.findings.size();
}
