// `hla gen [--suite NAME] [--seed S] --out DIR`: writes one fixture file per
// case of the suite and DIR/MANIFEST.json. Deterministic: the same suite,
// seed and generator version give byte-identical files.
#include "commands.hpp"

#include "hla/check/fixture.hpp"
#include "hla/io/manifest.hpp"
#include "suite.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

namespace hla::cli {
namespace {

namespace fs = std::filesystem;

struct GenArgs {
  std::string suite = "default";
  uint64_t seed = 1;
  std::string out;
  std::string filter;
  bool list = false;
  bool quiet = false;
};

void write_case_fixture(const fs::path& file, const gen::Case& c, const std::string& suite) {
  const check::Reference ref = check::compute_reference(c.problem);
  io::write_fixture(file, check::make_fixture(c.problem, ref, {suite, c.name, c.seed, c.exact_tier}));
}

int run_gen(const GenArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<gen::Case> cases = gen::make_suite(a.suite, a.seed);
  if (!a.filter.empty())
    std::erase_if(cases, [&](const gen::Case& c) { return c.name.find(a.filter) == std::string::npos; });
  if (a.list) {
    for (const auto& c : cases) std::cout << c.name << (c.exact_tier ? "  [exact tier]" : "") << "\n";
    return 0;
  }
  if (a.out.empty()) throw InputError("--out DIR is required (or --list)");
  const fs::path dir(a.out);
  if (fs::exists(dir) && !fs::is_directory(dir)) throw InputError("--out " + a.out + " exists and is not a directory");
  fs::create_directories(dir);
  // A stale fixture would end up in the manifest: refuse a directory holding others.
  std::set<std::string> mine;
  for (const auto& c : cases) mine.insert(c.name + ".safetensors");
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors" && !mine.count(e.path().filename().string()))
      throw InputError(a.out + " holds " + e.path().filename().string() + ", which is not in suite '" + a.suite +
                       "'; use an empty directory");
  size_t bytes = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto c0 = std::chrono::steady_clock::now();
    const fs::path file = dir / (cases[i].name + ".safetensors");
    write_case_fixture(file, cases[i], a.suite);
    bytes += fs::file_size(file);
    if (!a.quiet)
      std::fprintf(stderr, "[%4zu/%zu] %-70s %7.2f s\n", i + 1, cases.size(), cases[i].name.c_str(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count());
  }
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
  c->add_option("--seed", a->seed, "seed of the suite's inputs");
  c->add_option("--out", a->out, "output directory");
  c->add_option("--filter", a->filter, "only cases whose name contains this text");
  c->add_flag("--list", a->list, "list the suite's cases and exit");
  c->add_flag("--quiet", a->quiet, "no per-case progress lines");
  c->callback([a, &action] { action = [a] { return run_gen(*a); }; });
}

}  // namespace hla::cli
