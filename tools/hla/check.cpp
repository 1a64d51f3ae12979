// `hla check FIXTURE CANDIDATE [--json] [--html FILE]`: judges a kernel's
// outputs against a fixture (--html: also the report as one HTML page). Exit 0 pass, 1 fail, 2 usage or input error (also a fixture whose
// reference does not belong to its inputs), 4 inconclusive (too little scored).
#include "commands.hpp"
#include "progress.hpp"

#include "hla/check/fixture.hpp"
#include "hla/io/candidate.hpp"
#include "hla/io/printable.hpp"

#include <iostream>

namespace hla::cli {
namespace {

struct CheckArgs {
  std::string fixture, candidate, precision, form_class = "masked", html;
  bool json = false, verify_inputs = false, quiet = false, progress = false, require_grad = false;
  size_t worst = 10;
  double budget = 600;
};

int run_check(const CheckArgs& a) {
  // An unwritable --html path is refused before any work (exit 2); the page is written atomically.
  if (!a.html.empty()) check_output_file("--html", a.html);
  Progress bar("hla check: reading", progress_wanted(a.quiet, a.progress));
  bar.update(0, 1);
  io::Fixture f = io::read_fixture(a.fixture);
  for (const auto& w : f.warnings) std::cerr << "hla: warning: " << io::printable(w, 400) << "\n";
  if (a.verify_inputs) check::verify_inputs(f, a.budget);
  io::Candidate c = io::read_candidate(a.candidate, f);
  check::CheckOptions opt;
  opt.precision = engine::parse_precision_map(a.precision).of(f.problem.dtype);
  opt.form_class = engine::parse_form_class(a.form_class);
  opt.interface = check::Interface::cli;
  opt.worst = a.worst;
  opt.require_gradients = a.require_grad;
  opt.progress = [&bar](const char* stage, double done, double total) {
    bar.set_label(std::string("hla check: ") + stage);
    bar.update(done, total);
  };
  // The tensors move into the check; f's problem and metadata stay for the report.
  const check::Report r = check::check_fixture(std::move(f), std::move(c), opt);
  bar.finish();
  if (a.json) {
    nlohmann::json j = r.json();
    j["fixture"] = a.fixture;
    j["candidate"] = a.candidate;
    j["case"] = f.case_name;
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";  // invalid UTF-8 from a file: U+FFFD
  } else {
    std::cout << "hla check " << io::printable(a.candidate) << " against " << io::printable(a.fixture) << "\n  case "
              << io::printable(f.case_name) << ": "
              << f.problem.opt.describe() << ", B=" << f.problem.batch << " H=" << f.problem.heads
              << " Hkv=" << f.problem.kv_heads << " n=" << f.problem.n << " d=" << f.problem.d << " dv=" << f.problem.dv
              << " inputs " << to_string(f.problem.dtype) << "\n"
              << r.text();
  }
  if (!a.html.empty())
    check::write_html_report(a.html, r, "case " + f.case_name + ": " + f.problem.opt.describe() + ", B=" + std::to_string(f.problem.batch) +
                                            " H=" + std::to_string(f.problem.heads) + " Hkv=" + std::to_string(f.problem.kv_heads) +
                                            " n=" + std::to_string(f.problem.n) + " d=" + std::to_string(f.problem.d) +
                                            " dv=" + std::to_string(f.problem.dv) + ", inputs " + to_string(f.problem.dtype));
  return r.pass ? 0 : r.inconclusive ? 4 : 1;
}

}  // namespace

void add_check(CLI::App& app, Action& action) {
  auto a = std::make_shared<CheckArgs>();
  CLI::App* c = app.add_subcommand("check", "check a candidate's outputs against a fixture (exit 0 pass, 1 fail, 2 input error, 4 inconclusive)");
  c->add_option("FIXTURE", a->fixture, "fixture file written by `hla gen`")->required()->check(non_empty);
  c->add_option("CANDIDATE", a->candidate, "safetensors file with `out` [B,H,n,dv] (and optionally `den` [B,H,n]; gradients dq, dk, dv)")->required()->check(non_empty);
  c->add_option("--precision", a->precision,
                "declared compute precision: f64 | f32 | tf32 | bf16 | f16, or a tensor-core one (operands rounded, f32 accumulation): "
                "tf32 | bf16+f32 | f16+f32; or per input dtype: bf16=f32,f16=f32,f32=f32 "
                "(default: dtype of `out`)")
      ->check(non_empty);
  c->add_option("--form-class", a->form_class,
                "how the kernel accumulates its terms (docs/pass-rule.md): masked (default: nested sums of masked terms), "
                "state_difference (subtracts unmasked partial sums, S*C - G), flat (every term added one by one into one "
                "accumulator) or flat:W (intra-chunk terms so added, chunks of width W)")
      ->check(non_empty);
  c->add_flag("--json", a->json, "print the report as JSON");
  c->add_option("--html", a->html,
                "also write the report as one self-contained HTML page (heatmaps of where the error lies, hints) to this file")
      ->check(non_empty);
  c->add_flag("--require-grad", a->require_grad,
              "fail when the fixture carries gradients and the candidate lacks dq, dk or dv (else: reported as not checked)");
  c->add_flag("--verify-inputs", a->verify_inputs,
              "recompute the reference from the fixture's inputs and demand the stored one (slow: binary128 or exact)");
  c->add_option("--budget", a->budget, "seconds --verify-inputs may spend (default 600)")->check(seconds_in(0, 1e7, true));
  c->add_option("--worst", a->worst, "how many worst elements to list")->check(integer_in(0, 1000000));
  add_progress_flags(c, a->quiet, a->progress);
  c->callback([a, &action] { action = [a] { return run_check(*a); }; });
}

}  // namespace hla::cli
