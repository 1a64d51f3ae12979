// Uses the installed libraries as a kernel's test would: a small batched hla2
// problem, its reference, and the pass rule on a correct and a corrupted
// candidate; then a short fuzz campaign of each kind (consumer_fuzz.cpp).
// Exit 0 only when the correct one PASSes and the corrupted one FAILs, and the
// correct function fuzzes clean and the broken one does not.
#include "hla/check/check.hpp"
#include "hla/engine/reference.hpp"
#include "hla_impl.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

size_t consumer_fuzz(bool broken, const std::string& dir);  // consumer_fuzz.cpp

int main(int argc, char** argv) try {
  hla::BatchProblem p;
  p.opt.variant = hla::Variant::hla2;
  p.opt.gamma = hla::Rational(7, 8);
  p.dtype = hla::DType::f32;
  p.batch = 1, p.heads = 2, p.kv_heads = 1, p.n = 24, p.d = 4, p.dv = 3;
  p.resize_buffers();
  // Small multiples of 1/8: exact in f32.
  for (size_t i = 0; i < p.q.size(); ++i) p.q[i] = static_cast<double>(static_cast<int>(i * 5 % 11) - 5) / 8;
  for (size_t i = 0; i < p.k.size(); ++i) p.k[i] = static_cast<double>(static_cast<int>(i * 3 % 7) - 3) / 8;
  for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = static_cast<double>(static_cast<int>(i * 7 % 9) - 4) / 8;

  const hla::engine::Reference ref = hla::engine::compute_reference(p);
  const hla::check::CheckOptions opt{.precision = hla::engine::Precision::f32};

  // A correct candidate: our streaming form evaluated in float, written as f32.
  const hla::engine::CandidateOutputs good = hla::engine::ours(p, hla::engine::Precision::f32, hla::Form::streaming, 64, hla::DType::f32);
  const hla::check::Report r_good = hla::check::check(p, ref, good, opt);

  // The same outputs with one element off by 1% of its magnitude (at least 1/64).
  hla::engine::CandidateOutputs bad = good;
  const size_t e = p.out_index(0, 1, 17, 2);
  bad.out[e] = static_cast<float>(bad.out[e] + std::max(0.01 * ref.mag_num[e], 1.0 / 64));
  const hla::check::Report r_bad = hla::check::check(p, ref, bad, opt);

  std::printf("hla_oracle consumer (C ABI %d.%d): reference in %d bits; correct candidate: %s, corrupted candidate: %s\n",
              HLA_IMPL_ABI_VERSION_MAJOR, HLA_IMPL_ABI_VERSION_MINOR, ref.bits, r_good.verdict().c_str(),
              r_bad.verdict().c_str());
  if (!r_good.pass) std::printf("%s\n", r_good.text().c_str());
  if (r_bad.pass || r_bad.inconclusive) std::printf("%s\n", r_bad.text().c_str());
  const std::string findings = argc > 1 ? argv[1] : "consumer-findings";
  const bool fuzz_ok = consumer_fuzz(false, findings + "/correct") == 0 && consumer_fuzz(true, findings + "/broken") > 0;
  return r_good.pass && !r_bad.pass && !r_bad.inconclusive && fuzz_ok ? 0 : 1;
} catch (const std::exception& ex) {
  std::fprintf(stderr, "consumer: %s\n", ex.what());
  return 2;
}
