// `hla ref INPUTS --out FIXTURE [options]`: the certified reference of a
// user's own q, k, v, written as a fixture that `hla check` reads.
//
// INPUTS is a safetensors file with q, k, v (one float dtype: F64, F32, BF16
// or F16) in layout [B,H,T,D] (default) or FLA's [B,T,H,D] (--layout bthd),
// k and v with Hkv heads (H a multiple of Hkv), and optionally offsets or
// cu_seqlens (I64 or I32, [m+1], 0 = o_0 < … < o_m = T, with B = 1): packed
// sequences. The options (variant, mask, γ, normalization, ε, λ, scale) come
// from the command line, exact. The fixture is written atomically; any
// problem with the inputs or options is exit 2 with a message, before any
// work and with nothing written.
#include "commands.hpp"
#include "problem_options.hpp"
#include "progress.hpp"

#include "hla/check/fixture.hpp"
#include "hla/io/printable.hpp"
#include "hla/io/safetensors.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace hla::cli {
namespace {

namespace fs = std::filesystem;
using io::printable;

struct RefArgs {
  std::string input, out, layout = "bhtd", name;
  ProblemOptionArgs opt;
  int threads = 0;
  bool quiet = false, progress = false;
};

std::vector<int64_t> offsets_of(const io::Tensor& t, const std::string& name) {
  if (t.shape.size() != 1) throw InputError(name + " has shape " + io::shape_string(t.shape) + "; expected one dimension [m+1]");
  if (t.dtype == io::StDType::I64) return io::i64_values(t, name);
  if (t.dtype == io::StDType::I32) {
    std::vector<int64_t> out(t.bytes.size() / 4);
    for (size_t i = 0; i < out.size(); ++i) {
      uint32_t u = 0;
      for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(t.bytes[4 * i + static_cast<size_t>(b)]);
      out[i] = static_cast<int32_t>(u);
    }
    return out;
  }
  throw InputError(name + " has dtype " + io::to_string(t.dtype) + "; expected I64 or I32");
}

// Reads q, k, v (and offsets) into a BatchProblem in [B,H,T,D] order.
BatchProblem read_inputs(const RefArgs& a, const Options& opt) {
  if (a.layout != "bhtd" && a.layout != "bthd")
    throw InputError("--layout '" + printable(a.layout) + "' is not bhtd ([B,H,T,D]) or bthd (FLA's [B,T,H,D])");
  const bool fla = a.layout == "bthd";
  const io::SafetensorsFile f = io::read_safetensors(a.input);
  const std::string src = "'" + printable(a.input) + "'";
  for (const auto& [name, t] : f.tensors) {
    if (name == "q" || name == "k" || name == "v" || name == "offsets" || name == "cu_seqlens") continue;
    if (name.find("state") != std::string::npos || name == "h0")
      throw InputError(src + " holds '" + printable(name) + "': an initial state is not supported yet (the reference starts every sequence from zero)");
    throw InputError(src + " holds a tensor '" + printable(name) + "'; expected q, k, v and optionally offsets or cu_seqlens");
  }
  for (const char* name : {"q", "k", "v"})
    if (!f.tensors.count(name)) throw InputError(src + " has no tensor '" + std::string(name) + "' (it needs q, k and v)");
  if (f.tensors.count("offsets") && f.tensors.count("cu_seqlens"))
    throw InputError(src + " holds both offsets and cu_seqlens; give one");
  const io::Tensor &q = f.tensors.at("q"), &k = f.tensors.at("k"), &v = f.tensors.at("v");
  const auto dq = io::float_dtype(q.dtype), dk = io::float_dtype(k.dtype), dv = io::float_dtype(v.dtype);
  for (const auto& [name, t, d] : {std::tuple{"q", &q, dq}, std::tuple{"k", &k, dk}, std::tuple{"v", &v, dv}}) {
    if (!d) throw InputError(std::string(name) + " has dtype " + io::to_string(t->dtype) + "; expected F64, F32, BF16 or F16");
    if (t->shape.size() != 4)
      throw InputError(std::string(name) + " has shape " + io::shape_string(t->shape) + "; expected 4 dimensions " +
                       (fla ? "[B,T,H,D] (--layout bthd)" : "[B,H,T,D] (or FLA's [B,T,H,D] with --layout bthd)"));
  }
  if (*dq != *dk || *dq != *dv)
    throw InputError("q, k and v must have one dtype; got " + io::to_string(q.dtype) + ", " + io::to_string(k.dtype) + ", " +
                     io::to_string(v.dtype));
  // [B, H, T, D] dims of each, whatever the layout.
  auto dims = [&](const io::Tensor& t) {
    return fla ? std::array<int64_t, 4>{t.shape[0], t.shape[2], t.shape[1], t.shape[3]}
               : std::array<int64_t, 4>{t.shape[0], t.shape[1], t.shape[2], t.shape[3]};
  };
  const auto sq = dims(q), sk = dims(k), sv = dims(v);
  const std::string lay = fla ? "[B,T,H,D]" : "[B,H,T,D]";
  if (sk[0] != sq[0] || sv[0] != sq[0]) throw InputError("q, k, v disagree on the batch size B (layout " + lay + ")");
  if (sk[2] != sq[2] || sv[2] != sq[2]) throw InputError("q, k, v disagree on the number of tokens T (layout " + lay + ")");
  if (sk[3] != sq[3]) throw InputError("q and k disagree on the head dimension D (layout " + lay + ")");
  if (sk[1] != sv[1]) throw InputError("k and v disagree on the number of K/V heads (layout " + lay + ")");
  BatchProblem p;
  p.opt = opt;
  p.dtype = *dq;
  p.batch = sq[0], p.heads = sq[1], p.kv_heads = sk[1], p.n = sq[2], p.d = sq[3], p.dv = sv[3];
  if (p.heads < 1 || p.kv_heads < 1 || p.heads % p.kv_heads != 0)
    throw InputError("q has " + std::to_string(p.heads) + " heads and k, v " + std::to_string(p.kv_heads) +
                     ": the query heads must be a positive multiple of the K/V heads");
  auto load = [&](const io::Tensor& t, const char* name, Index heads, Index width) {
    std::vector<double> x = io::float_values(t, name);
    if (!fla) return x;
    std::vector<double> y(x.size());
    for (Index b = 0; b < p.batch; ++b)
      for (Index tt = 0; tt < p.n; ++tt)
        for (Index h = 0; h < heads; ++h)
          std::memcpy(&y[static_cast<size_t>(((b * heads + h) * p.n + tt) * width)],
                      &x[static_cast<size_t>(((b * p.n + tt) * heads + h) * width)], static_cast<size_t>(width) * sizeof(double));
    return y;
  };
  p.q = load(q, "q", p.heads, p.d);
  p.k = load(k, "k", p.kv_heads, p.d);
  p.v = load(v, "v", p.kv_heads, p.dv);
  for (const char* name : {"offsets", "cu_seqlens"})
    if (f.tensors.count(name)) p.offsets = offsets_of(f.tensors.at(name), name);
  p.validate(/*allow_nonfinite=*/true);
  return p;
}

int run_ref(const RefArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const Options opt = a.opt.options();
  check_output_file("--out", a.out);
  std::error_code ec;
  if (fs::equivalent(a.input, a.out, ec)) throw InputError("--out '" + printable(a.out) + "' is the input file itself");
  const BatchProblem p = read_inputs(a, opt);
  Progress bar("hla ref: reference", progress_wanted(a.quiet, a.progress));
  check::ReferenceOptions ro;
  ro.threads = a.threads;
  ro.progress = [&](double done, double total) { bar.update(done, total); };
  const check::Reference ref = check::compute_reference(p, ro);
  bar.set_label("hla ref: writing");
  check::FixtureMeta meta;
  meta.suite = "user";
  meta.case_name = a.name.empty() ? fs::path(a.input).stem().string() : a.name;
  io::write_fixture(a.out, check::make_fixture(p, ref, meta));
  bar.finish();
  const auto& s = ref.stats;
  const double certified = s.elements ? 100.0 * static_cast<double>(s.elements - s.uncertified) / static_cast<double>(s.elements) : 100;
  std::printf("hla ref: wrote %s: %s, B=%ld H=%ld Hkv=%ld n=%ld d=%ld dv=%ld %s%s\n", printable(a.out).c_str(),
              opt.describe().c_str(), static_cast<long>(p.batch), static_cast<long>(p.heads), static_cast<long>(p.kv_heads),
              static_cast<long>(p.n), static_cast<long>(p.d), static_cast<long>(p.dv), to_string(p.dtype).c_str(),
              p.offsets.empty() ? "" : (", " + std::to_string(p.offsets.size() - 1) + " packed sequences").c_str());
  std::printf("  reference: %zu of %zu elements certified correctly rounded (%.4f%%); heads×sequences: %zu double-double "
              "(%zu with a prefix recomputed in binary128), %zu binary128, %zu exact rationals; reference_bits %d; %.1f s\n",
              s.elements - s.uncertified, s.elements, certified, s.fast, s.recomputed, s.binary128, s.exact, ref.bits,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

void add_ref(CLI::App& app, Action& action) {
  auto a = std::make_shared<RefArgs>();
  CLI::App* c = app.add_subcommand("ref", "compute the certified reference of your own q, k, v and write a fixture for `hla check`");
  c->add_option("INPUTS", a->input, "safetensors file with q, k, v (and optionally offsets or cu_seqlens)")->required()->check(non_empty);
  c->add_option("--out", a->out, "fixture file to write")->required()->check(non_empty);
  c->add_option("--layout", a->layout, "bhtd: [B,H,T,D] (default), or bthd: FLA's [B,T,H,D]")->check(non_empty);
  a->opt.add_to(c);
  c->add_option("--name", a->name, "case name stored in the fixture (default: the input's file name)")->check(non_empty);
  c->add_option("--threads", a->threads, "worker threads (default: every core)")->check(integer_in(1, 1024));
  c->add_flag("--quiet", a->quiet, "no progress bar");
  c->add_flag("--progress", a->progress, "draw the progress bar even when stderr is not a terminal");
  c->callback([a, &action] { action = [a] { return run_ref(*a); }; });
}

}  // namespace hla::cli
