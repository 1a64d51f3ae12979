// The check layer on files: a fixture is a problem plus its Reference, a
// candidate file is CandidateOutputs. Also the dump of a failing case, so that
// `hla check` reproduces any failure found by the API, the fuzzer or the GPU tests.
#pragma once

#include "hla/check/check.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/fixture.hpp"

#include <filesystem>
#include <string>

namespace hla::check {

// Bumped whenever generated fixture bytes change (the golden set is then regenerated).
inline constexpr const char* kGeneratorVersion = "hla-oracle 0.2.0";

struct FixtureMeta {
  std::string suite = "adhoc", case_name = "case";
  uint64_t seed = 0;
  bool exact_tier = false;
};

io::Fixture make_fixture(const BatchProblem& p, const Reference& ref, const FixtureMeta& meta);
Reference reference_of(const io::Fixture& f);
CandidateOutputs outputs_of(const io::Candidate& c);
io::Candidate candidate_of(const CandidateOutputs& c);

// check() on a fixture (its exact_tier flag applies).
Report check_fixture(const io::Fixture& f, const io::Candidate& c, CheckOptions opt = {});

// Writes <stem>.safetensors (the fixture) and <stem>.candidate.safetensors;
// `hla check <stem>.safetensors <stem>.candidate.safetensors` reproduces the verdict.
void dump_case(const std::filesystem::path& stem, const io::Fixture& f, const CandidateOutputs& c);

}  // namespace hla::check
