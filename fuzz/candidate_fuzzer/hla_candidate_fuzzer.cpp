// The libFuzzer target of hla_add_candidate_fuzzer(TARGET LIB): a C ABI
// library (include/hla_impl.h) linked into this process, one case per input.
//
// The input's bytes select the case: their SHA-256 is the seed of `hla fuzz`'s
// case stream, and the case is its first (make_case of derive_seed(seed, 0)),
// inside what LIB declares in hla_impl_info, sequences at most kMaxN tokens
// long: the same bytes, the same case. LIB runs in this process; each case is
// judged as `hla fuzz` judges it (hla::fuzz::judge: the probes and hla::check's
// pass rule). A failing verdict is shrunk and written as a finding by `hla
// fuzz`'s campaign (the same case again; its files in $HLA_FINDINGS, default
// hla-findings/, in a folder named by the seed), whose text goes to stderr
// before abort(): the engine records the input as a crash. A crash or a hang
// of LIB is the engine's to catch.
//
// Coverage: besides LIB's own (when it is compiled with
// -fsanitize=fuzzer-no-link), each pair of traits of a case sets a counter of
// libFuzzer's extra counters, so that the corpus keeps an input for every
// pair it reached.
#include "hla/fuzz/adapter.hpp"
#include "hla/fuzz/campaign.hpp"
#include "hla/fuzz/cases.hpp"
#include "hla/fuzz/features.hpp"
#include "hla/gen/distributions.hpp"
#include "hla/io/sha256.hpp"
#include "hla_impl.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <string>

// Entry points a library need not export: null when LIB lacks them.
#pragma weak hla_impl_state_size
#pragma weak hla_impl_run_backward
#pragma weak hla_impl_run_backward_state

namespace {

constexpr hla::Index kMaxN = 256;  // small cases: many per second, and every chunk boundary up to 128

hla::fuzz::Adapter* adapter = nullptr;

// Kinds of case as libFuzzer coverage: a counter per pair of the case's
// traits (variant × dtype, distribution × probe, …; hashed into the array),
// set on each run. Pairs, not whole combinations: the corpus keeps an input
// for each pair reached, a few hundred at most instead of one per case.
constexpr std::size_t kKinds = 4096;
__attribute__((used, section("__libfuzzer_extra_counters"))) std::uint8_t kinds[kKinds];

void count_kinds(const hla::fuzz::FuzzCase& c) {
  const hla::BatchProblem& p = c.p;
  const hla::Options& o = p.opt;
  const std::string traits[] = {hla::to_string(o.variant), o.masked ? "masked" : "unmasked",
                                o.normalize ? hla::to_string(o.eps_mode) : "raw", o.gamma != 1 ? "decay" : "gamma=1",
                                o.lambda != 0 ? "ridge" : "lambda=0", o.scale != 1 ? "scale" : "scale=1",
                                hla::to_string(p.dtype), hla::gen::to_string(c.dist), hla::fuzz::to_string(c.probe),
                                c.grad ? "grad" : "forward", p.kv_heads < p.heads ? "gqa" : "mha",
                                p.offsets.empty() ? "one sequence" : "varlen"};
  const std::size_t n = std::size(traits);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      std::uint64_t h = 1469598103934665603ull;  // FNV-1a of "i:trait|j:trait"
      for (const unsigned char ch : std::to_string(i) + ":" + traits[i] + "|" + std::to_string(j) + ":" + traits[j])
        h = (h ^ ch) * 1099511628211ull;
      kinds[h % kKinds] = 1;
    }
}

std::uint64_t seed_of(const std::uint8_t* data, std::size_t size) {
  hla::io::Sha256 sha;
  sha.update(data, size);
  const auto digest = sha.finish();
  std::uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed |= static_cast<std::uint64_t>(digest[static_cast<std::size_t>(i)]) << (8 * i);
  return seed;
}

[[noreturn]] void report(std::uint64_t seed, const hla::fuzz::FuzzCase& c, const hla::fuzz::Verdict& v) {
  std::fprintf(stderr, "hla candidate fuzzer: [%s] on %s\n", v.kind.c_str(), c.describe().c_str());
  hla::fuzz::CampaignOptions o;
  o.seed = seed;
  o.max_cases = 1;
  // A folder per input: targets fuzzing side by side (-jobs, -fork) never write the same file.
  const char* dir = std::getenv("HLA_FINDINGS");
  char name[17];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(seed));
  o.findings_dir = std::string(dir && *dir ? dir : "hla-findings") + "/" + name;
  const hla::fuzz::Summary s = hla::fuzz::run_campaign(*adapter, o);
  if (s.findings.empty())  // LIB answered differently the second time: it keeps state across calls
    std::fprintf(stderr, "  %s\n  (not reproduced by a second run of the same case)\n", v.message.c_str());
  else
    std::fprintf(stderr, "%s", s.text().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const hla::fuzz::CabiEntryPoints e{hla_impl_info_get, hla_impl_run, hla_impl_state_size, hla_impl_run_backward,
                                     hla_impl_run_backward_state};
  try {
    adapter = hla::fuzz::make_cabi_adapter_in_process(e, kMaxN).release();
  } catch (const std::exception& x) {
    std::fprintf(stderr, "hla candidate fuzzer: %s\n", x.what());
    std::exit(2);
  }
  const hla::fuzz::Supports& s = adapter->supports();
  std::fprintf(stderr, "hla candidate fuzzer: %s (%s; n <= %lld); failures abort with their finding\n", s.name.c_str(),
               hla::fuzz::feature_names(s.features).c_str(), static_cast<long long>(s.max_n));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::uint64_t seed = seed_of(data, size);
  const hla::fuzz::FuzzCase c = hla::fuzz::make_case(adapter->supports(), hla::gen::derive_seed(seed, 0));
  count_kinds(c);
  const hla::fuzz::Verdict v = hla::fuzz::judge(*adapter, c);
  if (!v.kind.empty()) report(seed, c, v);
  return 0;
}
