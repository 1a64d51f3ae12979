// `hla ref INPUTS --out FIXTURE [options]`: the certified reference of a
// user's own q, k, v, written as a fixture that `hla check` reads.
//
// INPUTS is a safetensors file with q, k, v (one float dtype: F64, F32, BF16
// or F16) in layout [B,H,T,D] (default) or FLA's [B,T,H,D] (--layout bthd),
// k and v with Hkv heads (H a multiple of Hkv), and optionally offsets or
// cu_seqlens (I64 or I32, [m+1], 0 = o_0 < … < o_m = T, with B = 1): packed
// sequences. The options (variant, mask, γ, normalization, ε, λ, scale) come
// from the command line, exact. With the upstream gradients do (shaped as the
// output, in the same layout) and optionally dden in the file, the fixture
// also carries the reference gradients (SPEC §9), as `hla gen --case
// ...,grad=true` writes them. The fixture is written atomically; any problem
// with the inputs or options is exit 2 with a message, before any work and
// with nothing written.
#include "commands.hpp"
#include "problem_options.hpp"
#include "progress.hpp"

#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/io/printable.hpp"
#include "hla/io/safetensors.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

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

// The problem (q, k, v, offsets, state) in [B,H,T,D] order and its upstream, if given.
struct Inputs {
  BatchProblem p;
  std::optional<io::Upstream> up;
};
Inputs read_inputs(const RefArgs& a, const Options& opt) {
  const io::Layout layout = io::parse_layout(a.layout);
  const auto tensors = io::read_safetensors(a.input).tensors;
  Inputs in{io::problem_from_tensors(tensors, opt, layout, a.input), std::nullopt};
  in.up = io::upstream_from_tensors(tensors, in.p, layout, a.input);
  return in;
}

// "X of Y gradient elements certified ..." over dq, dk, dv (and dstate).
std::string gradient_summary(const engine::GradientReference& g, double seconds) {
  size_t total = 0, ill = 0;
  for (const auto* f : {&g.dq_flags, &g.dk_flags, &g.dv_flags, &g.dstate_flags}) {
    total += f->size();
    for (uint8_t x : *f) ill += (x & engine::kIllConditioned) != 0;
  }
  const double pct = total ? 100.0 * static_cast<double>(total - g.uncertified) / static_cast<double>(total) : 100;
  char line[300];
  std::snprintf(line, sizeof line, "  gradients: %zu of %zu elements (dq, dk, dv%s) certified correctly rounded (%.4f%%; "
                "%zu ill-conditioned, not certified); %s; %.1f s",
                total - g.uncertified, total, g.dstate.empty() ? "" : ", dstate", pct, ill,
                g.bits == 0 ? "exact rationals" : "double-double, binary128 where it could not certify", seconds);
  return line;
}

int run_ref(const RefArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const Options opt = a.opt.options();
  check_output_file("--out", a.out);
  std::error_code ec;
  if (fs::equivalent(a.input, a.out, ec)) throw InputError("--out '" + printable(a.out) + "' is the input file itself");
  auto [p, up] = read_inputs(a, opt);
  Progress bar("hla ref: reference", progress_wanted(a.quiet, a.progress));
  engine::ReferenceOptions ro;
  ro.threads = a.threads;
  ro.progress = [&](double done, double total) { bar.update(done, total); };
  engine::Reference ref = engine::compute_reference(p, ro);
  const double forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string grad_line;
  if (up) {
    bar.set_label("hla ref: gradients");
    const auto g0 = std::chrono::steady_clock::now();
    ref.grad = engine::compute_gradient_reference(p, ref, std::move(up->dout), std::move(up->dden));
    grad_line = gradient_summary(*ref.grad, std::chrono::duration<double>(std::chrono::steady_clock::now() - g0).count());
  }
  char shape[200];
  std::snprintf(shape, sizeof shape, "B=%ld H=%ld Hkv=%ld n=%ld d=%ld dv=%ld %s", static_cast<long>(p.batch), static_cast<long>(p.heads),
                static_cast<long>(p.kv_heads), static_cast<long>(p.n), static_cast<long>(p.d), static_cast<long>(p.dv),
                to_string(p.dtype).c_str());
  const std::string extra = std::string(p.offsets.empty() ? "" : ", " + std::to_string(p.offsets.size() - 1) + " packed sequences") +
                            (p.has_state() ? ", from an initial state (" + to_string(p.state_dtype) + ")" : "") +
                            (!ref.grad ? "" : ref.grad->dden.empty() ? ", with gradients for the upstream do" : ", with gradients for the upstream do, dden");
  const engine::Reference::Stats s = ref.stats;
  const int bits = ref.bits;
  bar.set_label("hla ref: writing");
  check::FixtureMeta meta;
  meta.suite = "user";
  meta.case_name = a.name.empty() ? fs::path(a.input).stem().string() : a.name;
  io::write_fixture(a.out, check::make_fixture(std::move(p), std::move(ref), meta));  // p, ref: moved, not read below
  bar.finish();
  const double certified = s.elements ? 100.0 * static_cast<double>(s.elements - s.uncertified) / static_cast<double>(s.elements) : 100;
  std::printf("hla ref: wrote %s: %s, %s%s\n", printable(a.out).c_str(), opt.describe().c_str(), shape, extra.c_str());
  std::printf("  reference: %zu of %zu elements certified correctly rounded (%.4f%%); heads×sequences: %zu double-double "
              "(%zu with a prefix recomputed in binary128), %zu binary128, %zu exact rationals; reference_bits %d; %.1f s\n",
              s.elements - s.uncertified, s.elements, certified, s.fast, s.recomputed, s.binary128, s.exact, bits, forward_s);
  if (!grad_line.empty()) std::printf("%s\n", grad_line.c_str());
  return 0;
}

}  // namespace

void add_ref(CLI::App& app, Action& action) {
  auto a = std::make_shared<RefArgs>();
  CLI::App* c = app.add_subcommand("ref", "compute the certified reference of your own q, k, v and write a fixture for `hla check`");
  c->add_option("INPUTS", a->input, "safetensors file with q, k, v (and optionally offsets or cu_seqlens, initial_state.<part>, and the upstream do, dden: "
                 "then the fixture carries the reference gradients)")->required()->check(non_empty);
  c->add_option("--out", a->out, "fixture file to write")->required()->check(non_empty);
  c->add_option("--layout", a->layout, "bhtd: [B,H,T,D] (default), or bthd: FLA's [B,T,H,D]")->check(non_empty);
  a->opt.add_to(c);
  c->add_option("--name", a->name, "case name stored in the fixture (default: the input's file name)")->check(non_empty);
  c->add_option("--threads", a->threads, "worker threads (default: every core)")->check(integer_in(1, 1024));
  add_progress_flags(c, a->quiet, a->progress);
  c->callback([a, &action] { action = [a] { return run_ref(*a); }; });
}

}  // namespace hla::cli
