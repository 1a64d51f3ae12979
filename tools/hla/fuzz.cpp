// `hla fuzz (--lib LIB.so | --exec 'CMD {in} {out}' | --exec-server CMD) …`: finds the inputs on
// which a kernel is wrong and writes each, shrunk, as a fixture.
// Exit 0 no findings, 1 findings, 2 usage or input error.
#include "commands.hpp"
#include "progress.hpp"

#include "hla/fuzz/campaign.hpp"
#include "hla/fuzz/features.hpp"
#include "hla/fuzz/merge.hpp"
#include "hla/fuzz/signals.hpp"
#include "hla_impl.h"

#include "hla/io/fixture.hpp"
#include "hla/io/printable.hpp"

#include <unistd.h>

#include <chrono>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

namespace hla::cli {
namespace {

struct FuzzArgs {
  std::string lib, exec, exec_server, variants = variant_csv(false), dtypes = "f32", features, precision = "f32", form_class = "masked", shard = "0/1", replay;
  std::string d_values, dv_values;
  Index max_n = 0, n_multiple = 1;  // max_n 0: not given (an exec candidate: 4096; a --lib: its declared max_n)
  double timeout = 10, startup_timeout = 120, budget = 600;
  std::string worker = "persistent";
  fuzz::CampaignOptions campaign;
  bool json = false, no_progress = false, force_progress = false;  // fuzz: progress lines unless --no-progress
  unsigned jobs = 1;                                               // processes, each a sub-shard of this shard, merged at the end
  std::vector<std::string> exec_only_given;  // options that describe an exec candidate, given on the command line
  bool lists_given = false;                  // --variants or --dtypes given (a --lib: narrows its declared lists)
};

// "i/N" with 0 <= i < N, plain digits (std::stoul would take "-1", " 1" or "1x").
void parse_shard(const std::string& s, fuzz::CampaignOptions& c) {
  const auto slash = s.find('/');
  auto number = [](const std::string& x, size_t& v) {
    if (x.empty() || x.size() > 9 || x.find_first_not_of("0123456789") != std::string::npos) return false;
    v = std::stoul(x);
    return true;
  };
  if (slash == std::string::npos || !number(s.substr(0, slash), c.shard) || !number(s.substr(slash + 1), c.shards) ||
      c.shards == 0 || c.shard >= c.shards)
    throw InputError("--shard must look like i/N with 0 <= i < N (e.g. 0/4), got '" + io::printable(s) + "'");
}

// Head dimensions: "64,128" (dv also takes "d": dv = d only), and the block:
// what every adapter takes from the command line.
void parse_sizes(const FuzzArgs& a, fuzz::Supports& s) {
  auto dims = [](const std::string& option, const std::string& text) {
    std::vector<Index> out;
    for (const auto& x : fuzz::split_list(text)) {
      if (x.empty() || x.size() > 6 || x.find_first_not_of("0123456789") != std::string::npos || std::stol(x) < 1)
        throw InputError(option + " must list positive head dimensions (e.g. 64,128), got '" + io::printable(text) + "'");
      out.push_back(std::stol(x));
    }
    return out;
  };
  s.d_values = dims("--d", a.d_values);
  if (a.dv_values == "d") s.dv_equals_d = true;
  else s.dv_values = dims("--dv", a.dv_values);
  s.n_multiple = a.n_multiple;
}

std::unique_ptr<fuzz::Adapter> make_adapter(const FuzzArgs& a) {
  if (!a.lib.empty() + !a.exec.empty() + !a.exec_server.empty() != 1)
    throw InputError("give exactly one of --lib LIB.so, --exec 'CMD {in} {out}' and --exec-server 'CMD'");
  fuzz::Supports s;
  parse_sizes(a, s);
  s.startup_timeout = a.startup_timeout;
  s.max_n = a.max_n;  // a --lib: 0 keeps its declared max_n
  if (!a.lib.empty() && a.lists_given) {  // a --lib: empty lists keep its declared ones
    for (const auto& v : fuzz::split_list(a.variants)) s.variants.push_back(parse_variant(v));
    for (const auto& t : fuzz::split_list(a.dtypes)) s.dtypes.push_back(parse_dtype(t));
  }
  if (!a.lib.empty()) {
    if (!a.exec_only_given.empty())
      throw InputError(a.exec_only_given.front() + " describes an --exec candidate; a --lib declares its support in hla_impl_info");
    if (!std::filesystem::exists(a.lib)) throw InputError("--lib " + io::printable(a.lib) + ": no such file");
    if (std::filesystem::is_directory(a.lib)) throw InputError("--lib " + io::printable(a.lib) + " is a directory");
    return fuzz::make_cabi_adapter(std::filesystem::absolute(a.lib).string(), a.timeout, a.worker == "persistent", &s);
  }
  s.name = a.exec.empty() ? a.exec_server : a.exec;
  for (const auto& v : fuzz::split_list(a.variants)) s.variants.push_back(parse_variant(v));
  for (const auto& t : fuzz::split_list(a.dtypes)) s.dtypes.push_back(parse_dtype(t));
  if (s.variants.empty() || s.dtypes.empty()) throw InputError("--variants and --dtypes must name at least one each");
  s.features = a.features == "none" ? 0 : fuzz::parse_features(a.features);
  s.precision = engine::parse_precision_map(a.precision);
  if (s.precision.empty()) throw InputError("--precision must name a precision (e.g. f32, or bf16=f32,f32=f32)");
  s.max_n = a.max_n > 0 ? a.max_n : 4096;
  s.form_class = engine::parse_form_class(a.form_class);
  if (!s.d_values.empty()) s.max_d = *std::max_element(s.d_values.begin(), s.d_values.end());
  if (!s.dv_values.empty()) s.max_dv = *std::max_element(s.dv_values.begin(), s.dv_values.end());
  s.validate();
  return fuzz::make_exec_adapter(s.name, s, a.timeout, !a.exec_server.empty());
}

// The campaign's reports on stderr: notes always; with progress, each finding
// and a progress line (redrawn on a terminal, every 10 s otherwise). Returns
// what clears the line at the end.
std::function<void()> report_on_stderr(fuzz::CampaignOptions& o, bool progress) {
  o.on_note = [](const std::string& m) { std::fprintf(stderr, "hla fuzz: %s\n", m.c_str()); };
  const bool tty = progress && isatty(2);
  if (!progress) return [] {};
  o.on_finding = [tty](const fuzz::Finding& f) { std::fprintf(stderr, "%s%s\n", tty ? "\r\033[K" : "", f.headline().c_str()); };
  o.on_progress = [tty, last = -1.0](const fuzz::Progress& p) mutable {
    if (p.seconds - last <= (tty ? 0.25 : 10.0)) return;
    last = p.seconds;
    std::fprintf(stderr, tty ? "\r\033[K%s" : "%s\n", p.text().c_str());
  };
  return [tty] {
    if (tty) std::fprintf(stderr, "\r\033[K");
  };
}

void print_header(const FuzzArgs& a, const fuzz::Supports& s) {
  std::cerr << "hla fuzz: candidate '" << io::printable(s.name, 1000) << "' (precision " << s.precision.str() << ", form class "
            << engine::to_string(s.form_class) << (s.sizes_text().empty() ? "" : "; " + s.sizes_text()) << "), seed " << a.campaign.seed
            << ", shard " << a.shard << ", up to " << a.campaign.max_cases << " cases"
            << (a.campaign.max_seconds > 0 ? " or " + std::to_string(a.campaign.max_seconds) + " s" : "")
            << (a.jobs > 1 ? ", " + std::to_string(a.jobs) + " jobs" : "") << "\n";
}

int print_summary(const FuzzArgs& a, const fuzz::Summary& sum) {
  if (a.json) {
    // Messages quote the candidate's output, which may not be UTF-8.
    std::cout << sum.json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    // Messages quote the candidate's output: no escape sequence reaches the terminal.
    std::cout << io::printable_message(sum.text(), size_t(1) << 24);
  }
  return sum.findings.empty() ? 0 : 1;
}

int run_jobs(FuzzArgs a);

int run_campaign_or_replay(FuzzArgs a) {
  parse_shard(a.shard, a.campaign);
  // Findings go there: a folder that cannot take them is an error now, not
  // after the first finding.
  if (a.replay.empty()) check_output_dir("--findings", a.campaign.findings_dir);
  if (a.jobs > 1 && a.replay.empty()) return run_jobs(std::move(a));
  // The fixture to replay is read before the adapter exists (an exec adapter
  // makes a temporary folder).
  const std::optional<io::Fixture> replay = a.replay.empty() ? std::nullopt : std::optional(io::read_fixture(a.replay));
  auto adapter = make_adapter(a);
  const auto& s = adapter->supports();
  if (replay) {
    fuzz::FuzzCase c;
    const io::Fixture& f = *replay;
    c.p = f.problem;
    c.exact_tier = f.exact_tier;
    if (!c.p.all_finite()) c.probe = fuzz::Probe::nan_causality;
    // A fixture with gradients runs the backward too, where the candidate has one.
    if (f.gradients && s.has(HLA_FEAT_BACKWARD) && c.probe == fuzz::Probe::plain) c.grad = true, c.dout = f.dout, c.dden = f.dden;
    const fuzz::Verdict v = fuzz::judge(*adapter, c, a.budget);
    std::cout << "hla fuzz --replay " << io::printable(a.replay) << ": "
              << (v.kind.empty() ? "passes" : "[" + v.kind + "] " + io::printable_message(v.message)) << "\n";
    return v.kind.empty() ? 0 : 1;
  }
  print_header(a, s);
  const auto clear_line = report_on_stderr(a.campaign, !a.no_progress);
  const fuzz::Summary sum = fuzz::run_campaign(*adapter, a.campaign);
  clear_line();
  return print_summary(a, sum);
}

// SIGTERM or SIGINT (a CI timeout, Ctrl-C) ends the candidate's processes at
// once and the campaign after its current step; its summary is printed, the
// adapter's temporary folder removed (the adapter is gone by then), and the
// signal raised again: the exit status says how `hla fuzz` ended.
int run_fuzz(FuzzArgs a) {
  fuzz::StopSignals signals;
  auto end_if_signalled = [&] {
    if (!signals.received()) return;
    std::cout.flush();
    std::fflush(nullptr);
    signals.reraise();
  };
  try {
    const int rc = run_campaign_or_replay(std::move(a));
    end_if_signalled();
    return rc;
  } catch (...) {
    end_if_signalled();  // whatever failed, failed because of it
    throw;
  }
}

struct MergeArgs {
  std::vector<std::string> dirs;
  std::string out;
  size_t examples_per_group = 3;
  bool json = false;
};

int run_fuzz_merge(const MergeArgs& a) {
  check_output_dir("--out", a.out);
  const fuzz::Summary sum = fuzz::merge_findings(a.dirs, a.out, a.examples_per_group);
  if (a.json) std::cout << sum.json().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  else std::cout << io::printable_message(sum.text(), size_t(1) << 24);
  return sum.findings.empty() ? 0 : 1;
}

// --jobs J: J processes sharing this shard's cases (fuzz::run_jobs); the
// adapter is made once here first, so that an input error is said once.
int run_jobs(FuzzArgs a) {
  print_header(a, make_adapter(a)->supports());
  const auto clear_line = report_on_stderr(a.campaign, !a.no_progress);
  fuzz::Jobs jobs;
  jobs.count = a.jobs;
  jobs.make_adapter = [&a] { return make_adapter(a); };
  const auto t0 = std::chrono::steady_clock::now();
  const fuzz::Summary sum = fuzz::run_jobs(jobs, a.campaign);
  clear_line();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!sum.signal) std::fprintf(stderr, "hla fuzz: %u jobs, %.1f s wall (the summary's seconds add up the jobs')\n", a.jobs, wall);
  return print_summary(a, sum);  // after a stop signal, run_fuzz raises it again
}

}  // namespace

// `hla fuzz-merge DIR... --out DIR`: the findings of several campaigns (shards
// on several machines) in one folder, grouped and without duplicates.
void add_fuzz_merge(CLI::App& app, Action& action) {
  auto a = std::make_shared<MergeArgs>();
  CLI::App* c = app.add_subcommand("fuzz-merge",
                                   "merge the findings folders of several hla fuzz campaigns (shards), grouped by signature, "
                                   "duplicates dropped (exit 0 no findings, 1 findings, 2 input error)");
  c->add_option("dirs", a->dirs, "findings folders (each with the summary.json hla fuzz writes)")->required()->check(non_empty);
  c->add_option("--out", a->out, "the merged findings folder")->required()->check(non_empty);
  c->add_option("--examples-per-group", a->examples_per_group, "findings written per group (default 3)")->check(integer_in(1, 1000000));
  c->add_flag("--json", a->json, "print the merged summary as JSON");
  c->callback([a, &action] { action = [a] { return run_fuzz_merge(*a); }; });
}

void add_fuzz(CLI::App& app, Action& action) {
  auto a = std::make_shared<FuzzArgs>();
  std::vector<CLI::Option*> exec_only;
  CLI::App* c = app.add_subcommand("fuzz", "fuzz a candidate implementation (exit 0 no findings, 1 findings, 2 input error)");
  c->add_option("--lib", a->lib, "shared library implementing include/hla_impl.h (run in a child process)")->check(non_empty);
  c->add_option("--exec", a->exec, "command reading the fixture {in} and writing the candidate file {out}")->check(non_empty);
  c->add_option("--exec-server", a->exec_server,
                "command started once that answers each line 'run<TAB>IN<TAB>OUT' on stdin with 'ok' or 'error <message>' "
                "on stdout (docs/fuzzing.md: exec server)")
      ->check(non_empty);
  CLI::Option* variants = c->add_option("--variants", a->variants, "variants it supports (comma list; a --lib: some of those it declares)");
  CLI::Option* dtypes =
      c->add_option("--dtypes", a->dtypes, "input dtypes it supports (f64,f32,bf16,f16; a --lib: some of those it declares)");
  variants->check(comma_list), dtypes->check(comma_list);
  exec_only.push_back(c->add_option("--features", a->features, "exec: unmasked,normalize,clamp,decay,ridge,scale,gqa,varlen,den,state,backward, all (all but state and backward) "
                                    "or none (default none); state: the command takes {state_in} and writes {state_out}; backward: "
                                    "where the fixture carries do (and dden), the candidate file also holds dq, dk, dv (docs/fuzzing.md: exec adapter)")
                          ->check(comma_list));
  exec_only.push_back(c->add_option("--precision", a->precision,
                                    "exec: declared compute precision, one (f32) or per input dtype (bf16=f32,f16=f32,f32=f32,f64=f64)")
                          ->check(comma_list));
  exec_only.push_back(
      c->add_option("--form-class", a->form_class,
                    "exec: masked (default), state_difference (subtracts unmasked partial sums), flat (every term added one "
                    "by one into one accumulator) or flat:W (so inside chunks of width W)")
          ->check(non_empty));
  c->add_option("--max-n", a->max_n, "the longest sequence it takes (default 4096; a --lib: its declared max_n, or less)")
      ->check(integer_in(1, 1 << 20));
  // Sizes, for every adapter (a --lib: within its hla_impl_info, which has no fields for them).
  c->add_option("--d", a->d_values, "the head dimensions d it takes (e.g. 64,128; default: any up to 64, or a --lib's max_d)")
      ->check(comma_list);
  c->add_option("--dv", a->dv_values, "the value dimensions dv it takes (e.g. 64,128), or d: dv = d only")->check(comma_list);
  c->add_option("--n-multiple", a->n_multiple, "every sequence length (and state split) a multiple of this block size")
      ->check(integer_in(1, 1 << 20));
  c->add_option("--seed", a->campaign.seed, "seed of the case stream")->check(integer_in(0, kAnyU64));
  c->add_option("--max-cases", a->campaign.max_cases, "cases to run (this shard)")->check(integer_in(1, 1000000000000));
  c->add_option("--time", a->campaign.max_seconds, "stop after this many seconds (0: no limit)")->check(seconds_in(0, 1e7, false));
  c->add_option("--shard", a->shard, "i/N: run the i-th of N disjoint deterministic case streams")->check(non_empty);
  c->add_option("--jobs", a->jobs,
                "processes that share this shard's cases (one a core; the same cases and findings as one process, merged "
                "into --findings; --time and --stop-after hold per job)")
      ->check(integer_in(1, 64));  // StopSignals passes a stop signal on to 64 processes at most
  c->add_option("--stop-after", a->campaign.stop_after, "stop after this many findings (0: never)")->check(integer_in(0, 1000000000));
  c->add_option("--findings", a->campaign.findings_dir, "directory for the shrunk failing cases")->check(non_empty);
  c->add_option("--timeout", a->timeout, "seconds per candidate call (a timeout is replayed once before it is reported)")
      ->check(seconds_in(0, 1e6, true));
  c->add_option("--startup-timeout", a->startup_timeout,
                "seconds more for the first call of a (re)started worker or --exec-server (imports, JIT, device "
                "initialisation; default 120)")
      ->check(seconds_in(0, 1e6, false));
  c->add_option("--worker", a->worker,
                "--lib: persistent (default: one process keeps the library loaded, restarted after a crash, a hang or an "
                "error) or fork (a fresh process per call)")
      ->check(CLI::IsMember({"persistent", "fork"}));
  c->add_option("--budget", a->budget, "--replay: seconds the reference may take (default 600)")->check(seconds_in(0, 1e7, true));
  c->add_option("--shrink-attempts", a->campaign.shrink_attempts, "shrinking budget per finding")->check(integer_in(0, 1000000000));
  c->add_option("--examples-per-group", a->campaign.examples_per_group,
                "findings written per group of one signature (kind, rules, tensor, needs; default 3), the rest counted")
      ->check(integer_in(1, 1000000));
  c->add_option("--exact-max-n", a->campaign.exact_max_n,
                "heads up to this long (d, dv <= 16) are judged against exact rationals, longer ones against "
                "the certified double-double engine; 0: the engine for all (faster on small cases)")
      ->capture_default_str()
      ->check(integer_in(0, 1 << 20));
  c->add_option("--replay", a->replay, "run the candidate on one fixture (e.g. a finding) and report")->check(non_empty);
  c->add_flag("--json", a->json, "print the summary as JSON");
  add_progress_flags(c, a->no_progress, a->force_progress);
  c->callback([a, exec_only, variants, dtypes, &action] {
    for (const CLI::Option* o : exec_only)
      if (o->count() > 0) a->exec_only_given.push_back(o->get_name());
    a->lists_given = variants->count() > 0 || dtypes->count() > 0;
    action = [a] { return run_fuzz(*a); };
  });
}

}  // namespace hla::cli
