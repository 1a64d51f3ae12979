// `hla gen [--suite NAME] [--seed S] --out DIR`: writes one fixture file per
// case of the suite and DIR/MANIFEST.json. Deterministic: the same suite,
// seed and generator version give byte-identical files.
// `hla gen --case SPEC --out FILE`: one fixture of a described case (SPEC:
// key=value pairs, e.g. variant=hla2,gamma=99/100,normalize=add,dtype=bf16,
// dist=gaussian,B=2,H=8,Hkv=8,n=4096,d=128,dv=128,seed=1), written atomically.
//
// DIR must end up holding one run's fixtures and a manifest that describes
// them, so: a lock keeps a second `hla gen` out while one writes; fixtures of
// another suite or seed already in DIR are refused (re-running the same suite
// and seed into it is how the golden set is regenerated, and is fine); a
// killed run's temporary files are removed (atomic_file.hpp).
#include "commands.hpp"
#include "problem_options.hpp"
#include "progress.hpp"

#include "hla/check/fixture.hpp"
#include "hla/check/gradient.hpp"
#include "hla/gen/suite.hpp"
#include "hla/io/atomic_file.hpp"
#include "hla/io/manifest.hpp"
#include "hla/io/printable.hpp"
#include "hla/io/safetensors.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hla::cli {
namespace {

namespace fs = std::filesystem;
using io::printable;

struct GenArgs {
  std::string suite = "default";
  uint64_t seed = 1;
  std::string out;
  std::string filter;
  std::string one_case;
  bool list = false;
  bool quiet = false;
  bool progress = false;
};

engine::Reference reference_with_progress(const BatchProblem& p, Progress* bar) {
  engine::ReferenceOptions ro;
  if (bar) ro.progress = [bar](double done, double total) { bar->update(done, total); };
  return engine::compute_reference(p, ro);
}

void write_case_fixture(const fs::path& file, const gen::Case& c, const std::string& suite, Progress* bar = nullptr) {
  engine::Reference ref = reference_with_progress(c.problem, bar);
  if (c.grad) ref.grad = engine::compute_gradient_reference(c.problem, ref, c.dout, c.dden);
  io::write_fixture(file, check::make_fixture(c.problem, ref, {suite, c.name, c.seed, c.exact_tier}));
}

// A described case: key=value pairs separated by commas (docs/using.md "Your own inputs").
gen::Case parse_case(const std::string& spec) {
  ProblemOptionArgs opt;
  const std::string keys = option_names() + ", dtype, dist, B, H, Hkv, n, d, dv, seed, state, grad, dden";
  std::string dtype = "f32", dist = "gaussian";
  Index B = 1, H = 1, Hkv = 0, n = 64, d = 64, dv = 0, state = 0;
  uint64_t seed = 1;
  std::string grad = "false", dden = "auto";
  auto integer = [](const std::string& key, const std::string& v, uint64_t hi) {
    if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
      throw InputError("--case: " + key + "=" + printable(v) + " is not a whole number");
    const unsigned long long x = std::stoull(v);
    if (x > hi) throw InputError("--case: " + key + "=" + printable(v) + " is above " + std::to_string(hi));
    return static_cast<uint64_t>(x);
  };
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, end - at);
    at = end + 1;
    const size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos || eq == 0)
      throw InputError("--case: '" + printable(item) + "' is not key=value (keys: " + keys + ")");
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    const Index dim_max = Index{1} << 31;
    if (opt.set(key, val)) continue;
    if (key == "dtype") dtype = val;
    else if (key == "dist") dist = val;
    else if (key == "B") B = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "H") H = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "Hkv") Hkv = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "n") n = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "d") d = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "dv") dv = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "seed") seed = integer(key, val, kAnyU64);
    else if (key == "state") state = static_cast<Index>(integer(key, val, dim_max));
    else if (key == "grad") grad = val;
    else if (key == "dden") dden = val;
    else throw InputError("--case: unknown key '" + printable(key) + "' (keys: " + keys + ")");
  }
  gen::Case c;
  BatchProblem& p = c.problem;
  p.opt = opt.options();
  p.dtype = parse_dtype(dtype);
  c.dist = gen::parse_dist(dist);
  p.batch = B, p.heads = H, p.kv_heads = Hkv ? Hkv : H, p.n = n, p.d = d, p.dv = dv ? dv : d;
  // Sizes before any allocation (validate() checks them again with the buffers).
  for (const auto& [name, x] : {std::pair{"B", B}, {"H", H}, {"Hkv", p.kv_heads}, {"n", n}, {"d", p.d}, {"dv", p.dv}})
    if (x < 1 && !(std::string(name) == "n" && x == 0)) throw InputError("--case: " + std::string(name) + " must be at least 1");
  const double elements = static_cast<double>(B) * static_cast<double>(H) * static_cast<double>(n) * static_cast<double>(std::max(p.d, p.dv));
  if (elements > 0x1p28)
    throw InputError("--case: B·H·n·max(d, dv) = " + std::to_string(static_cast<long long>(elements)) + " is above 2^28 elements per tensor");
  p.resize_buffers();
  p.validate();
  c.seed = seed;
  gen::Rng rng(seed);
  gen::fill(p, c.dist, rng);
  c.exact_tier = c.dist == gen::Dist::small_int && gen::qualifies_exact_tier(p) && state == 0;
  if (state > 0) gen::fill_state(p, c.dist, rng, state);
  auto flag = [](const std::string& key, const std::string& v) {
    if (v == "true" || v == "1") return true;
    if (v == "false" || v == "0") return false;
    throw InputError("--case: " + key + "=" + printable(v) + " is not true or false");
  };
  if (flag("grad", grad)) {
    if (!has_backward(p.opt.variant)) throw InputError("--case: grad=true, but variant " + to_string(p.opt.variant) + " has no backward form");
    // dden by default where den is divided by (normalize): it then has a gradient of its own.
    gen::fill_upstream(c, dden == "auto" ? p.opt.normalize : flag("dden", dden));
  } else if (dden != "auto") {
    throw InputError("--case: dden=" + printable(dden) + " needs grad=true");
  }
  std::string norm = p.opt.normalize ? to_string(p.opt.eps_mode) : "raw";
  c.name = "case-" + to_string(p.opt.variant) + (p.opt.masked ? "" : "-unmasked") + "-g" + to_string(p.opt.gamma) + "-" + norm + "-" +
           to_string(p.dtype) + "-" + gen::to_string(c.dist) + "-n" + std::to_string(n) + "-d" + std::to_string(p.d) + "-dv" +
           std::to_string(p.dv) + "-B" + std::to_string(B) + "H" + std::to_string(H) + "K" + std::to_string(p.kv_heads) + "-seed" +
           std::to_string(seed) + (state > 0 ? "-state" + std::to_string(state) : "") + (c.grad ? "-grad" : "");
  return c;
}

int run_case(const GenArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  if (a.out.empty()) throw InputError("--out FILE is required with --case");
  if (a.list || !a.filter.empty()) throw InputError("--case makes one fixture: --list and --filter apply to suites");
  check_output_file("--out", a.out);
  const gen::Case c = parse_case(a.one_case);
  Progress bar("hla gen: reference", progress_wanted(a.quiet, a.progress));
  write_case_fixture(a.out, c, "case", &bar);
  bar.finish();
  std::printf("hla gen: wrote %s (%s%s), %.2f MB, %.1f s\n", printable(a.out).c_str(), c.name.c_str(), c.exact_tier ? ", exact tier" : "",
              static_cast<double>(fs::file_size(a.out)) / 1e6, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

// An exclusive, non-blocking flock on DIR/.hla-gen.lock, which holds the
// owner's pid (for the message a second run prints). Removed on exit; a lock
// file left by a killed run is harmless (the kernel released its lock).
class DirLock {
 public:
  DirLock(const fs::path& dir, const std::string& shown) : path_(dir / ".hla-gen.lock") {
    for (int attempt = 0;; ++attempt) {
      fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) throw InputError("cannot create the lock file '" + printable(path_.string()) + "': " + std::strerror(errno));
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char buf[32] = {};
        const ssize_t got = ::pread(fd_, buf, sizeof buf - 1, 0);
        ::close(fd_);
        fd_ = -1;
        if (err != EWOULDBLOCK)
          throw InputError("cannot lock '" + printable(path_.string()) + "': " + std::strerror(err));
        const long pid = got > 0 ? std::strtol(buf, nullptr, 10) : 0;
        throw InputError(shown + " is being written by another hla gen" +
                         (pid > 0 ? " (pid " + std::to_string(pid) + ")" : "") + "; wait for it or use another --out");
      }
      // The previous owner may have removed the file between our open and our
      // lock: then we hold a lock nobody else can see. Only the file still at
      // the path counts.
      struct stat mine {}, there {};
      if (::fstat(fd_, &mine) == 0 && ::stat(path_.c_str(), &there) == 0 && mine.st_ino == there.st_ino &&
          mine.st_dev == there.st_dev)
        break;
      ::close(fd_);
      fd_ = -1;
      if (attempt == 100) throw InputError("cannot lock '" + printable(path_.string()) + "': it keeps being replaced");
    }
    on_signal_.emplace(path_);
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      // The lock holds without the pid; only the message of a second run is poorer.
    }
  }
  ~DirLock() {
    ::unlink(path_.c_str());  // before the unlock: a run that opens it now sees the inode change
    ::close(fd_);
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  fs::path path_;
  int fd_ = -1;
  std::optional<io::RemoveOnSignal> on_signal_;
};

// Every *.safetensors below DIR ends up in MANIFEST.json: each must be a
// fixture of this suite and seed (a later `hla gen` overwrites it with the
// same bytes, or it stays as this run would have written it). Reads only the
// safetensors header's metadata, so that fixtures of an older format do not
// block regenerating a set.
void refuse_other_runs(const fs::path& dir, const std::string& shown, const std::vector<gen::Case>& suite,
                       const std::string& suite_name, uint64_t seed) {
  std::map<std::string, uint64_t> seeds;  // file name -> the case's seed
  for (const auto& c : suite) seeds[c.name + ".safetensors"] = c.seed;
  const std::string use = "; use an empty directory, or the same --suite and --seed";
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != ".safetensors" || !it->is_regular_file()) continue;
    const std::string name = p.filename().string();
    const auto s = seeds.find(name);
    if (it.depth() > 0 || s == seeds.end())
      throw InputError(shown + " holds " + printable(p.lexically_relative(dir).string()) + ", which is not in suite '" +
                       suite_name + "'; use an empty directory");
    std::map<std::string, std::string> md;
    try {
      md = io::read_safetensors(p).metadata;
    } catch (const InputError& e) {
      throw InputError(shown + " holds " + printable(name) + ", which cannot be read (" + e.what() + ")" + use);
    }
    const std::string want = std::to_string(s->second);
    if (md["suite"] != suite_name || md["seed"] != want)
      throw InputError(shown + " holds " + printable(name) + " of suite '" + printable(md["suite"]) + "' case seed " +
                       printable(md["seed"]) + ", not of suite '" + suite_name + "' --seed " + std::to_string(seed) +
                       " (case seed " + want + ")" + use);
  }
  if (ec) throw InputError("cannot list " + shown + ": " + ec.message());
}

int run_gen(const GenArgs& a) {
  if (!a.one_case.empty()) return run_case(a);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<gen::Case> suite = gen::make_suite(a.suite, a.seed);
  std::vector<gen::Case> cases = suite;
  if (!a.filter.empty()) {
    std::erase_if(cases, [&](const gen::Case& c) { return c.name.find(a.filter) == std::string::npos; });
    if (cases.empty())
      throw InputError("--filter '" + printable(a.filter) + "' matches no case of suite '" + a.suite + "' (--list shows them)");
  }
  if (a.list) {
    for (const auto& c : cases) std::cout << c.name << (c.exact_tier ? "  [exact tier]" : "") << "\n";
    return 0;
  }
  if (a.out.empty()) throw InputError("--out DIR is required (or --list)");
  const fs::path dir(a.out);
  const std::string shown = "--out '" + printable(a.out) + "'";
  check_output_dir("--out", dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(shown + ": cannot create it: " + ec.message());
  const DirLock lock(dir, shown);
  if (const size_t n = io::remove_stale_temp_files(dir))
    std::fprintf(stderr, "hla gen: removed %zu temporary file(s) left by a killed run\n", n);
  refuse_other_runs(dir, shown, suite, a.suite, a.seed);
  size_t bytes = 0;
  // Progress: the cases done, weighted by their work (tokens · d · (d + dv) · heads).
  Progress bar("hla gen: " + std::to_string(cases.size()) + " fixtures", progress_wanted(a.quiet, a.progress));
  auto work = [](const gen::Case& c) {
    const BatchProblem& p = c.problem;
    return 1e3 + static_cast<double>(p.batch * p.heads * p.n) * static_cast<double>(p.d * (p.d + p.dv));
  };
  double total = 0, done = 0;
  for (const auto& c : cases) total += work(c);
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path file = dir / (cases[i].name + ".safetensors");
    bar.update(done, total);
    write_case_fixture(file, cases[i], a.suite);
    bytes += fs::file_size(file);
    done += work(cases[i]);
  }
  bar.finish();
  const auto listed = io::write_manifest(dir);
  std::printf("hla gen: suite '%s' seed %llu: %zu fixtures, %.2f MB, MANIFEST.json lists %zu files, %.1f s\n",
              a.suite.c_str(), static_cast<unsigned long long>(a.seed), cases.size(), bytes / 1e6, listed.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

void add_gen(CLI::App& app, Action& action) {
  auto a = std::make_shared<GenArgs>();
  CLI::App* c = app.add_subcommand("gen", "write a suite of golden fixture files");
  c->add_option("--suite", a->suite, "golden | default")->check(CLI::IsMember(gen::suite_names()));
  c->add_option("--seed", a->seed, "seed of the suite's inputs")->check(integer_in(0, kAnyU64));
  c->add_option("--out", a->out, "output directory")->check(non_empty);
  c->add_option("--filter", a->filter, "only cases whose name contains this text (it must match one; omit it for all)")
      ->check(non_empty);
  c->add_flag("--list", a->list, "list the suite's cases and exit");
  c->add_option("--case", a->one_case,
                "one custom fixture instead of a suite: key=value,... with keys " + option_names() +
                    " (as hla ref's options, docs/using.md), dtype, dist, B, H, Hkv, n, d, dv, seed, state (an initial state: the state "
                    "after that many earlier tokens), grad (true: with upstream "
                    "gradients and the reference dq, dk, dv, and with state the initial state's dstate), dden (with grad: true|false, "
                    "default: normalize); --out is then the file")
      ->check(non_empty);
  add_progress_flags(c, a->quiet, a->progress);
  c->callback([a, &action] { action = [a] { return run_gen(*a); }; });
}

}  // namespace hla::cli
