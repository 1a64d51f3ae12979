// `hla select DIR --variants … --dtypes … --features … [--d 64,128] [--dv …|d] [--n-multiple B]
// [--max-n N] [--unit-gamma-only] [--equal-heads-only]`: lists the fixtures in
// DIR that a kernel with that support can run (one path per line), so that a
// kernel that supports, say, only γ = 1, H = Hkv and d = dv ∈ {64, 128} runs
// exactly the golden fixtures inside its support. Exit 0, or 2 on bad input.
#include "commands.hpp"

#include "hla/fuzz/adapter.hpp"
#include "hla/fuzz/features.hpp"

#include "hla/io/fixture.hpp"
#include "hla/io/printable.hpp"

#include <algorithm>
#include <filesystem>
#include <iostream>

namespace hla::cli {
namespace {

struct SelectArgs {
  std::string dir, variants = variant_csv(), dtypes = dtype_csv(), features = "all", d, dv;
  Index max_n = 0, n_multiple = 1;
  bool verbose = false;
};

std::vector<Index> dims(const std::string& s, const char* what) {
  std::vector<Index> out;
  for (const auto& x : fuzz::split_list(s)) {
    try {
      size_t used = 0;
      const long long v = std::stoll(x, &used);
      if (used != x.size() || v < 1) throw std::invalid_argument("");
      out.push_back(v);
    } catch (const std::exception&) {
      throw InputError(std::string(what) + ": '" + io::printable(x) + "' is not a positive integer");
    }
  }
  return out;
}

int run_select(const SelectArgs& a) {
  if (!std::filesystem::is_directory(a.dir)) throw InputError("'" + io::printable(a.dir) + "': not a directory");
  std::vector<Variant> variants;
  for (const auto& v : fuzz::split_list(a.variants)) variants.push_back(parse_variant(v));
  std::vector<DType> dtypes;
  for (const auto& t : fuzz::split_list(a.dtypes)) dtypes.push_back(parse_dtype(t));
  const uint32_t features = a.features == "none" ? 0 : fuzz::parse_features(a.features);
  fuzz::Supports s;
  s.variants = variants, s.dtypes = dtypes, s.features = features;
  s.max_n = a.max_n > 0 ? a.max_n : kMaxTokens, s.max_d = s.max_dv = kMaxDim;
  s.d_values = dims(a.d, "--d");
  if (a.dv == "d") s.dv_equals_d = true;
  else s.dv_values = dims(a.dv, "--dv");
  s.n_multiple = a.n_multiple;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(a.dir))
    if (e.path().extension() == ".safetensors" && e.path().filename().string()[0] != '.') files.push_back(e.path());
  std::sort(files.begin(), files.end());
  size_t inside = 0;
  size_t unprintable = 0;
  for (const auto& path : files) {
    // Stdout is one path per line for scripts: a name holding a newline or an
    // escape sequence would break the list or the terminal. Say so instead.
    if (io::printable(path.string(), std::string::npos) != path.string()) {
      std::cerr << "skipped: " << io::printable(path.string()) << " (its name holds control characters)\n";
      ++unprintable;
      continue;
    }
    const io::Fixture f = io::read_fixture(path);
    const std::string why = s.outside(f.problem);
    if (why.empty()) {
      ++inside;
      std::cout << path.string() << "\n";
    } else if (a.verbose) {
      std::cerr << "outside: " << path.filename().string() << " (" << why << ")\n";
    }
  }
  std::cerr << "hla select: " << inside << " of " << files.size() - unprintable << " fixtures inside the declared support";
  if (unprintable) std::cerr << " (" << unprintable << " skipped for their names)";
  std::cerr << "\n";
  return 0;
}

}  // namespace

void add_select(CLI::App& app, Action& action) {
  auto a = std::make_shared<SelectArgs>();
  CLI::App* c = app.add_subcommand("select", "list the fixtures of a folder inside a declared support (one path per line)");
  c->add_option("DIR", a->dir, "folder of fixtures (e.g. fixtures/)")->required()->check(non_empty);
  c->add_option("--variants", a->variants, "variants the kernel supports (comma list)")->check(comma_list);
  c->add_option("--dtypes", a->dtypes, "input dtypes it supports (f64,f32,bf16,f16)")->check(comma_list);
  c->add_option("--features", a->features,
                "unmasked,normalize,clamp,decay,ridge,scale,gqa,varlen,den, all or none (decay: γ < 1; gqa: H > Hkv)")
      ->check(comma_list);
  c->add_option("--d", a->d, "head sizes d it supports (comma list; default any)")->check(comma_list);
  c->add_option("--dv", a->dv, "value sizes dv it supports (comma list, or d: dv = d only; default any)")->check(comma_list);
  c->add_option("--n-multiple", a->n_multiple, "sequence lengths must be a multiple of this block size")->check(integer_in(1, 1 << 20));
  c->add_option("--max-n", a->max_n, "longest sequence it takes (default any)")->check(integer_in(1, 1u << 30));
  c->add_flag("--verbose", a->verbose, "say on stderr why each other fixture is outside");
  c->callback([a, &action] { action = [a] { return run_select(*a); }; });
}

}  // namespace hla::cli
