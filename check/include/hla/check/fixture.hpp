// The check layer on files: a fixture is a problem plus its Reference, a
// candidate file is CandidateOutputs. Also the dump of a failing case, so that
// `hla check` reproduces any failure found by the API, the fuzzer or the GPU tests.
#pragma once

#include "hla/check/check.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/fixture.hpp"

#include <filesystem>
#include <functional>
#include <string>

namespace hla::check {

// "hla-oracle <version>": the product's one version (CMakeLists.txt project(VERSION)),
// written into every fixture; a release that changes fixture bytes bumps it.
const char* generator_version();

struct FixtureMeta {
  std::string suite = "adhoc", case_name = "case";
  uint64_t seed = 0;
  bool exact_tier = false;
};

// p and ref are taken by value: a caller done with them moves them in.
io::Fixture make_fixture(BatchProblem p, Reference ref, const FixtureMeta& meta);
Reference reference_of(const io::Fixture& f);
Reference reference_of(io::Fixture&& f);  // moves the reference tensors out (problem and metadata stay)
CandidateOutputs outputs_of(const io::Candidate& c);
io::Candidate candidate_of(const CandidateOutputs& c);

// Proves that the fixture's reference belongs to its inputs and options
// (verify.cpp): fields consistent with each other; magnitudes, den, num and
// the outputs within the a priori bound of a float64 evaluation of the inputs;
// NaN/Inf exactly where the inputs put them; exact tier bit for bit. Throws
// InputError "this fixture does not match its inputs …" naming the tensors
// and the first elements. Costs one streaming pass per head in float64.
// Heads are verified in parallel; progress(done, total) is called per head.
// with_unmasked = false leaves the unmasked-order magnitudes unproven: for a
// caller that never reads them (check of the masked class without gradients).
void verify_fixture(const io::Fixture& f, const std::function<void(double, double)>& progress = {}, bool with_unmasked = true);
// Stronger and slower (hla check --verify-inputs): recomputes the reference as
// `hla gen` does and demands the same doubles (uncertified elements: within
// the bound); max_seconds > 0 bounds the work (InputError when exceeded).
void verify_inputs(const io::Fixture& f, double max_seconds = 0);

// check() on a fixture (its exact_tier flag applies), after verify_fixture of
// what the verdict reads. The rvalue form moves the tensors out of f and c.
Report check_fixture(const io::Fixture& f, const io::Candidate& c, CheckOptions opt = {});
Report check_fixture(io::Fixture&& f, io::Candidate&& c, CheckOptions opt = {});

// Writes <stem>.safetensors (the fixture) and <stem>.candidate.safetensors;
// `hla check <stem>.safetensors <stem>.candidate.safetensors` reproduces the verdict.
void dump_case(const std::filesystem::path& stem, const io::Fixture& f, const CandidateOutputs& c);

}  // namespace hla::check
