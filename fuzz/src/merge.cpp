#include "hla/fuzz/merge.hpp"

#include "hla/io/atomic_file.hpp"
#include "hla/io/printable.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <set>
#include <tuple>

namespace hla::fuzz {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json read_summary(const fs::path& dir) {
  const fs::path file = dir / "summary.json";
  if (!fs::is_directory(dir)) throw InputError("fuzz-merge: " + io::printable(dir.string()) + ": no such folder");
  if (!fs::is_regular_file(file))
    throw InputError("fuzz-merge: " + io::printable(dir.string()) + " holds no summary.json (a findings folder of hla fuzz)");
  try {
    json j = json::parse(io::read_file_bytes(file));
    for (const char* key : {"cases", "findings", "groups", "probes"})
      if (!j.contains(key)) throw InputError(std::string("it has no '") + key + "'");
    return j;
  } catch (const json::exception& e) {
    throw InputError("fuzz-merge: " + io::printable(file.string()) + " is not a campaign's summary: " + e.what());
  } catch (const InputError& e) {
    throw InputError("fuzz-merge: " + io::printable(file.string()) + " is not a campaign's summary: " + e.what());
  }
}

Finding finding_of(const json& f) {
  Finding x;
  x.kind = f.at("kind"), x.message = f.at("message"), x.case_index = f.at("case_index"), x.cases_run = f.at("cases_run");
  x.seconds = f.at("seconds"), x.original = f.at("original"), x.shrunk = f.at("shrunk"), x.shrink_steps = f.at("shrink_steps");
  x.precision = f.at("precision"), x.form_class = f.at("form_class"), x.needs = f.at("needs");
  x.rules = f.value("rules", ""), x.tensor = f.value("tensor", ""), x.cause = f.value("cause", "");
  return x;
}

// The campaigns' totals (not their findings).
void add_totals(Summary& s, const json& j) {
  s.cases += j.at("cases").get<size_t>();
  s.inconclusive += j.value("inconclusive", size_t(0));
  s.seconds += j.value("seconds", 0.0);
  if (j.contains("phases")) {
    s.phases.reference += j["phases"].value("reference", 0.0);
    s.phases.candidate += j["phases"].value("candidate", 0.0);
    s.phases.check += j["phases"].value("check", 0.0);
  }
  for (const auto& [probe, n] : j.at("probes").items()) s.probes[probe] += n.get<size_t>();
  const json cov = j.value("coverage", json::object());
  for (auto [key, to] : {std::pair{"variants", &s.coverage.variants}, {"dtypes", &s.coverage.dtypes}, {"options", &s.coverage.options}}) {
    const json counts = cov.value(key, json::object());
    for (const auto& [x, n] : counts.items()) (*to)[x] += n.get<size_t>();
  }
}

// The campaigns' streams, after checking that they are shards of one
// campaign: one candidate support, and no case run twice (two streams of one
// seed overlap when their shards agree modulo the gcd of their counts).
std::vector<Stream> streams_of(const std::vector<std::string>& dirs, const std::vector<json>& summaries, Summary& s) {
  std::vector<std::pair<Stream, size_t>> all;  // stream, folder
  for (size_t d = 0; d < dirs.size(); ++d) {
    const json& j = summaries[d];
    const std::string support = j.value("support", "");
    if (d == 0) s.candidate = j.value("candidate", ""), s.support = support;
    if (support != s.support)
      throw InputError("fuzz-merge: " + io::printable(dirs[d]) + " fuzzed another support than " + io::printable(dirs[0]) + " (" +
                       io::printable(support) + " against " + io::printable(s.support) + "): not shards of one campaign");
    for (const json& x : j.value("streams", json::array())) all.push_back({{x.at("seed"), x.at("shard"), x.at("shards")}, d});
  }
  for (size_t a = 0; a < all.size(); ++a)
    for (size_t b = a + 1; b < all.size(); ++b) {
      const Stream &x = all[a].first, &y = all[b].first;
      if (x.seed == y.seed && x.shard % std::gcd(x.shards, y.shards) == y.shard % std::gcd(x.shards, y.shards))
        throw InputError("fuzz-merge: " + io::printable(dirs[all[a].second]) + " and " + io::printable(dirs[all[b].second]) +
                         " ran the same cases (seed " + std::to_string(x.seed) + ", shards " + std::to_string(x.shard) + "/" +
                         std::to_string(x.shards) + " and " + std::to_string(y.shard) + "/" + std::to_string(y.shards) + ")");
    }
  std::vector<Stream> out;
  for (const auto& [x, d] : all) out.push_back(x);
  return out;
}

// Streams that together make a coarser one as that one: the cases i ≡ r
// (mod M) of a seed, when every shard r + M·k of N (M dividing N) is there.
// The shards of a campaign (or the jobs of a shard) merge into it.
std::vector<Stream> coarsen(std::vector<Stream> s) {
  for (bool merged = true; merged;) {
    merged = false;
    std::sort(s.begin(), s.end());
    for (size_t i = 0; i < s.size() && !merged; ++i)
      for (size_t M = 1; M < s[i].shards && !merged; ++M) {
        if (s[i].shards % M) continue;
        std::vector<Stream> parts;
        for (size_t k = 0; k < s[i].shards / M; ++k) parts.push_back({s[i].seed, s[i].shard % M + M * k, s[i].shards});
        if (!std::all_of(parts.begin(), parts.end(), [&](const Stream& x) { return std::binary_search(s.begin(), s.end(), x); })) continue;
        std::erase_if(s, [&](const Stream& x) { return std::binary_search(parts.begin(), parts.end(), x); });
        s.push_back({parts[0].seed, parts[0].shard, M});
        merged = true;
      }
  }
  return s;
}

// A source example's files (fixture, then candidate if any), found relative to
// its findings folder: the campaign may have run elsewhere (another machine,
// another cwd). Empty when the finding is not an example with files.
std::vector<fs::path> example_files(const fs::path& src_dir, const json& src) {
  if (!src.value("example", false) || src.value("fixture", "").empty()) return {};
  const fs::path from = fs::path(src.at("fixture").get<std::string>());
  const fs::path base = src_dir / from.parent_path().filename();
  std::vector<fs::path> files{base / from.filename()};
  if (const std::string cand = src.value("candidate", ""); !cand.empty()) files.push_back(base / fs::path(cand).filename());
  return files;
}

// Before anything is written: every example a summary lists has its files, so
// that a damaged or forged folder is refused with nothing left in --out.
void check_examples(const std::vector<std::string>& dirs, const std::vector<json>& summaries) {
  for (size_t d = 0; d < dirs.size(); ++d)
    for (const json& src : summaries[d].at("findings"))
      for (const fs::path& file : example_files(dirs[d], src))
        if (!fs::is_regular_file(file))
          throw InputError("fuzz-merge: " + io::printable(dirs[d]) + "/summary.json lists an example whose file " +
                           io::printable(file.string()) + " is missing");
}

// Copies a source example's files into its merged group's folder; false when it has none.
bool copy_example(Finding& f, const fs::path& src_dir, const json& src, const Group& g, const fs::path& out) {
  const std::vector<fs::path> files = example_files(src_dir, src);
  if (files.empty()) return false;
  fs::create_directories(out / g.dir);
  std::string stem = f.kind + "-" + std::to_string(f.case_index);
  for (int k = 1; fs::exists(out / g.dir / (stem + ".safetensors")); ++k)
    stem = f.kind + "-" + std::to_string(f.case_index) + "-" + std::to_string(k);
  fs::copy_file(files[0], out / g.dir / (stem + ".safetensors"));
  f.fixture = (out / g.dir / (stem + ".safetensors")).string();
  if (files.size() > 1) {
    fs::copy_file(files[1], out / g.dir / (stem + ".candidate.safetensors"));
    f.candidate = (out / g.dir / (stem + ".candidate.safetensors")).string();
  }
  return true;
}

}  // namespace

Summary merge_findings(const std::vector<std::string>& dirs, const std::string& out_dir, size_t examples_per_group) {
  if (dirs.empty()) throw InputError("fuzz-merge: give at least one findings folder");
  std::vector<json> summaries;
  for (const auto& d : dirs) summaries.push_back(read_summary(d));
  const fs::path out(out_dir);
  if (fs::exists(out / "summary.json")) throw InputError("fuzz-merge: --out " + io::printable(out_dir) + " already holds a summary.json");
  check_examples(dirs, summaries);
  Summary s;
  s.streams = coarsen(streams_of(dirs, summaries, s));
  fs::create_directories(out);
  std::set<std::tuple<std::string, std::string, std::string>> seen;  // kind, shrunk, message
  // In case order across the folders: shards of one campaign (`hla fuzz --shard`, `--jobs`) then merge into
  // what the campaign finds in one process, the same groups and examples (ties keep the folders' order).
  std::vector<std::pair<size_t, const json*>> all;
  for (size_t d = 0; d < dirs.size(); ++d) {
    add_totals(s, summaries[d]);
    for (const json& src : summaries[d].at("findings")) all.emplace_back(d, &src);
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& x, const auto& y) {
    return x.second->at("case_index").template get<size_t>() < y.second->at("case_index").template get<size_t>();
  });
  for (const auto& [d, src_ptr] : all) {
    const json& src = *src_ptr;
    Finding f = finding_of(src);
    if (!seen.insert({f.kind, f.shrunk, f.message}).second) continue;  // the same finding from another campaign
    Group& group = s.groups[group_finding(s.groups, f)];
    if (takes_example(group, s.findings, f, examples_per_group) && copy_example(f, dirs[d], src, group, out)) {
      f.example = true;
      group.examples.push_back(s.findings.size());
    }
    ++group.count;
    ++s.by_kind[f.kind];
    s.findings.push_back(std::move(f));
  }
  io::write_file_atomically(out / "summary.json", s.json().dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  return s;
}

}  // namespace hla::fuzz
