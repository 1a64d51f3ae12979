// hla_sample_fixtures DIR: writes a few small hla2 fixtures and MANIFEST.json
// into DIR, with the exact reference (naive form in rational arithmetic, per
// head and sequence, rounded once to float64). They give the fixture readers
// (C++ and Python) real files until `hla gen` writes the golden set.
#include "hla/evaluate.hpp"
#include "hla/io/fixture.hpp"
#include "hla/io/manifest.hpp"

#include <cstdint>
#include <iostream>

namespace {

using namespace hla;
using namespace hla::io;

constexpr const char* kGeneratorVersion = "hla_sample_fixtures 1";

// splitmix64: a fixed, portable sequence (std distributions differ between libraries).
struct SplitMix {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // m/4 with m ∈ [-8, 8]: exact in every dtype.
  double entry() { return static_cast<double>(static_cast<int>(next() % 17) - 8) / 4.0; }
};

struct Case {
  std::string name;
  Index batch, heads, kv_heads, n, d, dv;
  DType dtype;
  Options opt;
  std::vector<std::int64_t> offsets;
  std::uint64_t seed;
  bool flags;  // store an all-zero flags tensor (the exact reference is certified)
};

Fixture make(const Case& c) {
  Fixture f;
  BatchProblem& p = f.problem;
  p.opt = c.opt;
  p.dtype = c.dtype;
  p.batch = c.batch;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.n = c.n;
  p.d = c.d;
  p.dv = c.dv;
  p.offsets = c.offsets;
  SplitMix rng{c.seed};
  for (auto* x : {&p.q, &p.k, &p.v}) {
    const Index last = x == &p.v ? c.dv : c.d;
    const Index hs = x == &p.q ? c.heads : c.kv_heads;
    x->resize(static_cast<std::size_t>(c.batch * hs * c.n * last));
    for (double& e : *x) e = rng.entry();
  }
  p.validate();

  const std::size_t outs = static_cast<std::size_t>(c.batch * c.heads * c.n * c.dv);
  const std::size_t dens = static_cast<std::size_t>(c.batch * c.heads * c.n);
  f.ref_out.resize(outs);
  f.mag_num.resize(outs);
  f.ref_den.resize(dens);
  f.mag_den.resize(dens);
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (const auto& [t0, t1] : p.sequences()) {
        const Problem<Rational> head = p.head<Rational>(b, h, t0, t1);
        const Output<Rational> ref = evaluate(head, Form::naive);
        const Output<Rational> mag = magnitude(head);
        for (Index t = 0; t < t1 - t0; ++t) {
          const std::size_t di = static_cast<std::size_t>((b * c.heads + h) * c.n + t0 + t);
          f.ref_den[di] = to_double(ref.den(t));
          f.mag_den[di] = to_double(mag.den(t));
          for (Index col = 0; col < c.dv; ++col) {
            const std::size_t oi = p.out_index(b, h, t0 + t, col);
            f.ref_out[oi] = to_double(ref.out(t, col));
            f.mag_num[oi] = to_double(mag.num(t, col));
          }
        }
      }
  if (c.flags) f.flags.assign(outs, 0);
  f.suite = "sample";
  f.case_name = c.name;
  f.seed = c.seed;
  f.generator_version = kGeneratorVersion;
  f.reference_bits = 0;  // exact rational evaluation
  f.exact_tier = false;
  return f;
}

// Seeds chosen so that each normalized case has negative denominators: the
// clamp convention sign(den)·max(|den|, ε) differs from max(den, ε) only there.
std::vector<Case> cases() {
  std::vector<Case> cs;
  Options o;
  o.variant = Variant::hla2;
  o.gamma = Rational(3, 4);
  o.lambda = Rational(1, 2);
  o.scale = Rational(1, 2);
  cs.push_back({"hla2_masked_gqa_f32", 2, 4, 2, 5, 3, 2, DType::f32, o, {}, 1, true});

  o = Options{};
  o.masked = false;
  o.normalize = true;
  o.eps_mode = EpsMode::clamp;
  o.eps = Rational(1, 1000);
  o.gamma = Rational(1, 2);
  o.lambda = Rational(1, 4);
  cs.push_back({"hla2_unmasked_packed_bf16_clamp", 1, 2, 1, 7, 2, 3, DType::bf16, o, {0, 3, 7}, 7, false});

  o = Options{};
  o.normalize = true;
  o.eps = Rational(1, 1000);
  cs.push_back({"hla2_masked_f16_add", 1, 1, 1, 6, 2, 2, DType::f16, o, {}, 8, false});
  return cs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " DIR\n  writes small hla2 sample fixtures and MANIFEST.json into DIR\n";
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    for (const Case& c : cases()) write_fixture(dir / (c.name + ".safetensors"), make(c));
    for (const auto& [name, e] : write_manifest(dir)) std::cout << e.sha256 << "  " << name << "\n";
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
