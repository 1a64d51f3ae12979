// hla_lib_check LIB FIXTURE... [--candidates DIR] [--json]
//
// `hla check` for a C ABI library (include/hla_impl.h): loads LIB once in this
// process (a CUDA library then creates its context once, not once per fixture
// as a child per call would), runs it on every fixture inside what it declares
// (hla_impl_info), and judges each output with the checker (check_fixture,
// the declared precision and form class): the same verdict `hla check FIXTURE
// CANDIDATE --precision P --form-class C` gives on the written candidate.
// Prints one line per fixture and a summary: fixtures in support, passed,
// inconclusive (too little to judge, e.g. an all-zero output would pass: no failure),
// failed, the worst rule-3 ratio (score / the worst of our honest orders) per
// variant. --candidates DIR: also writes each candidate file there.
// Exact-tier fixtures demand bit equality only of a library declaring f32 or
// f64 for their dtype (as `hla fuzz` generates exact-tier cases).
// Exit 0 when every fixture in support passes (and at least one is), 1 when one
// fails or is inconclusive, 2 on bad input.
#include "hla_impl.h"

#include "hla/check/fixture.hpp"
#include "hla/fuzz/features.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/fixture.hpp"
#include "hla/io/float_bits.hpp"
#include "hla/io/safetensors.hpp"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace hla;

struct Lib {
  decltype(&hla_impl_info_get) info = nullptr;
  decltype(&hla_impl_run) run = nullptr;
};

// Why the library does not take this fixture's problem, or "".
std::string outside(const hla_impl_info& in, const BatchProblem& p) {
  if (!(in.variants >> static_cast<unsigned>(p.opt.variant) & 1u)) return "variant";
  if (!(in.dtypes >> static_cast<unsigned>(p.dtype) & 1u)) return "dtype";
  if (const uint32_t missing = fuzz::required_features(p) & ~in.features) return "features " + fuzz::feature_names(missing);
  if ((in.max_n && p.n > in.max_n) || (in.max_d && p.d > in.max_d) || (in.max_dv && p.dv > in.max_dv)) return "size";
  return "";
}

// A buffer of 64-byte aligned bytes (hla_impl.h promises aligned buffers).
struct Aligned {
  std::vector<unsigned char> raw;
  unsigned char* p = nullptr;
  explicit Aligned(size_t n) : raw(n + 64) { p = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64; }
};

Aligned encode(const std::vector<double>& x, DType t) {
  const std::string bytes = io::float_tensor(t, {static_cast<int64_t>(x.size())}, x, "input").bytes;
  Aligned a(bytes.size());
  std::memcpy(a.p, bytes.data(), bytes.size());
  return a;
}

// What the fixtures came to.
struct Tally {
  size_t supported = 0, passed = 0, skipped = 0, inconclusive = 0;  // inconclusive: too little to judge, not a failure
  std::map<std::string, double> worst_ratio;                        // per variant
  std::map<std::string, size_t> skip_reasons;
  double seconds_run = 0;
};

// Runs the library on one fixture and judges its outputs into t (throws on an unreadable fixture).
void check_one(const Lib& lib, const hla_impl_info& in, const engine::PrecisionMap& declared, const std::string& path,
               const std::string& cand_dir, Tally& t) {
  io::Fixture f = io::read_fixture(path);
  // Exact tier (bit equality) holds for f32 and f64 arithmetic only: as the fuzzer does, demand it
  // only of a library declaring one of them for this dtype (check_fixture would demand it of any).
  const auto prec = declared.of(f.problem.dtype);
  if (f.exact_tier && !(prec == engine::Precision::f32 || prec == engine::Precision::f64)) f.exact_tier = false;
  const BatchProblem& p = f.problem;
  if (std::string why = outside(in, p); !why.empty()) {
    ++t.skipped, ++t.skip_reasons[why];
    return;
  }
  ++t.supported;
  const std::vector<std::string> exact{to_string(p.opt.gamma), to_string(p.opt.eps), to_string(p.opt.lambda), to_string(p.opt.scale)};
  hla_problem hp{};
  hp.abi_version = in.abi_version;
  hp.variant = static_cast<int32_t>(p.opt.variant);
  hp.masked = p.opt.masked;
  hp.normalize = p.opt.normalize;
  hp.eps_mode = p.opt.eps_mode == EpsMode::add ? HLA_EPS_ADD : HLA_EPS_CLAMP;
  hp.gamma = to_double(p.opt.gamma), hp.eps = to_double(p.opt.eps), hp.lambda = to_double(p.opt.lambda), hp.scale = to_double(p.opt.scale);
  hp.gamma_exact = exact[0].c_str(), hp.eps_exact = exact[1].c_str(), hp.lambda_exact = exact[2].c_str(), hp.scale_exact = exact[3].c_str();
  hp.batch = p.batch, hp.heads = p.heads, hp.kv_heads = p.kv_heads, hp.n = p.n, hp.d = p.d, hp.dv = p.dv;
  hp.dtype = static_cast<int32_t>(p.dtype);
  const Aligned q = encode(p.q, p.dtype), k = encode(p.k, p.dtype), v = encode(p.v, p.dtype);
  Aligned offsets(p.offsets.size() * sizeof(int64_t));
  if (!p.offsets.empty()) std::memcpy(offsets.p, p.offsets.data(), p.offsets.size() * sizeof(int64_t));
  hp.q = q.p, hp.k = k.p, hp.v = v.p;
  hp.offsets = p.offsets.empty() ? nullptr : reinterpret_cast<const int64_t*>(offsets.p);
  hp.num_offsets = static_cast<int64_t>(p.offsets.size());
  const size_t nout = static_cast<size_t>(p.batch * p.heads * p.n * p.dv), nden = static_cast<size_t>(p.batch * p.heads * p.n);
  const size_t w = p.dtype == DType::f64 ? 8 : p.dtype == DType::f32 ? 4 : 2;
  Aligned out(nout * w), den(nden * sizeof(double));
  hp.out = out.p;
  hp.den = (in.features & HLA_FEAT_DEN) ? reinterpret_cast<double*>(den.p) : nullptr;
  char msg[1024] = "";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = lib.run(&hp, msg, sizeof msg);
  t.seconds_run += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0) {
    std::cout << "FAIL " << path << ": hla_impl_run: " << msg << "\n";
    return;
  }
  io::Candidate c;
  c.out_dtype = p.dtype;
  c.out.resize(nout);
  for (size_t i = 0; i < nout; ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, out.p + i * w, w);
    c.out[i] = io::decode_float(p.dtype, bits);
  }
  if (hp.den) c.den = std::vector<double>(hp.den, hp.den + nden), c.den_dtype = DType::f64;
  if (!cand_dir.empty())
    io::write_candidate(std::filesystem::path(cand_dir) / (std::filesystem::path(path).stem().string() + ".candidate.safetensors"), c, f);
  check::CheckOptions opt;
  opt.precision = declared.of(p.dtype);
  opt.form_class = engine::form_class_from_code(in.form_class);
  const check::Report r = check::check_fixture(f, c, opt);
  const std::string var = to_string(p.opt.variant);
  if (r.inconclusive) ++t.inconclusive;
  if (r.pass) {
    ++t.passed;
    t.worst_ratio[var] = std::max(t.worst_ratio[var], r.baseline_ratio);
  }
  std::printf("%s %s: max score %.3g (bound %.3g), ratio %.3g (limit %.3g)%s\n", r.verdict().c_str(),
              std::filesystem::path(path).filename().c_str(), r.max_score, r.bound, r.baseline_ratio, r.ratio_limit,
              r.pass ? "" : ("\n" + r.text()).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> fixtures;
  std::string lib_path, cand_dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--candidates" && i + 1 < argc) cand_dir = argv[++i];
    else if (lib_path.empty()) lib_path = a;
    else fixtures.push_back(a);
  }
  if (lib_path.empty() || fixtures.empty()) {
    std::cerr << "usage: hla_lib_check LIB FIXTURE... [--candidates DIR]\n";
    return 2;
  }
  void* h = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::cerr << "hla_lib_check: dlopen: " << dlerror() << "\n";
    return 2;
  }
  Lib lib{reinterpret_cast<decltype(&hla_impl_info_get)>(dlsym(h, "hla_impl_info_get")),
          reinterpret_cast<decltype(&hla_impl_run)>(dlsym(h, "hla_impl_run"))};
  if (!lib.info || !lib.run) {
    std::cerr << "hla_lib_check: " << lib_path << " does not export hla_impl_info_get and hla_impl_run\n";
    return 2;
  }
  const hla_impl_info& in = *lib.info();
  const engine::PrecisionMap declared = [&] {
    engine::PrecisionMap m = engine::parse_precision_map(in.precision_by_dtype ? in.precision_by_dtype : "");
    if (!m.all) m.all = engine::parse_precision(in.precision ? in.precision : "f32");
    return m;
  }();
  std::cout << "hla_lib_check: " << (in.name ? in.name : lib_path) << ", precision " << declared.str() << "\n";

  Tally t;
  for (const std::string& path : fixtures) {
    try {
      check_one(lib, in, declared, path, cand_dir, t);
    } catch (const std::exception& e) {
      std::cout << "ERROR " << path << ": " << e.what() << "\n";
      ++t.supported;
    }
  }
  std::cout << "hla_lib_check: " << t.supported << " fixtures in support, " << t.passed << " passed, "
            << t.supported - t.passed - t.inconclusive << " failed, " << t.inconclusive << " inconclusive; " << t.skipped
            << " outside support (";
  for (const auto& [why, count] : t.skip_reasons) std::cout << " " << why << ": " << count;
  std::printf(" ); library time %.2f s\n", t.seconds_run);
  for (const auto& [var, r] : t.worst_ratio) std::printf("  worst ratio %s: %.3g\n", var.c_str(), r);
  return t.supported > 0 && t.passed > 0 && t.passed + t.inconclusive == t.supported ? 0 : 1;
}
