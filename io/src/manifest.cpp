#include "hla/io/manifest.hpp"

#include "hla/io/atomic_file.hpp"
#include "hla/io/sha256.hpp"
#include "hla/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace hla::io {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr const char* kFormat = "hla-oracle-manifest";
constexpr const char* kVersion = "1";
}  // namespace

std::map<std::string, ManifestEntry> scan_fixture_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("'" + dir.string() + "' is not a directory");
  std::map<std::string, ManifestEntry> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".safetensors") continue;
    const std::string rel = e.path().lexically_relative(dir).generic_string();
    files[rel] = ManifestEntry{sha256_file_hex(e.path()), static_cast<std::uint64_t>(e.file_size())};
  }
  return files;
}

std::string manifest_json(const std::map<std::string, ManifestEntry>& files) {
  json j = {{"format", kFormat}, {"format_version", kVersion}, {"files", json::object()}};
  for (const auto& [name, e] : files) j["files"][name] = {{"sha256", e.sha256}, {"size", e.size}};
  return j.dump(2) + "\n";
}

std::map<std::string, ManifestEntry> write_manifest(const fs::path& dir) {
  auto files = scan_fixture_dir(dir);
  write_file_atomically(dir / kManifestName, manifest_json(files));
  return files;
}

std::string ManifestReport::describe() const {
  std::string s;
  for (const auto& m : mismatched) s += "mismatch: " + m + "\n";
  for (const auto& m : missing) s += "missing (listed in the manifest, not on disk): " + m + "\n";
  for (const auto& m : extra) s += "extra (on disk, not in the manifest): " + m + "\n";
  return s;
}

ManifestReport verify_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  auto fail = [&](const std::string& what) { return InputError(path.string() + ": " + what); };
  json j;
  try {
    j = json::parse(read_file_bytes(path));
  } catch (const json::exception& e) {
    throw fail(std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || j.value("format", "") != kFormat || j.value("format_version", "") != kVersion ||
      !j.contains("files") || !j["files"].is_object())
    throw fail(std::string("not an hla-oracle manifest (expected {\"format\": \"") + kFormat +
               "\", \"format_version\": \"" + kVersion + "\", \"files\": {...}})");
  std::map<std::string, ManifestEntry> listed;
  for (const auto& [name, e] : j["files"].items()) {
    if (!e.is_object() || !e.contains("sha256") || !e["sha256"].is_string() || !e.contains("size") ||
        !e["size"].is_number_unsigned())
      throw fail("entry '" + name + "' must be {\"sha256\": string, \"size\": non-negative integer}");
    listed[name] = ManifestEntry{e["sha256"].get<std::string>(), e["size"].get<std::uint64_t>()};
  }
  const auto actual = scan_fixture_dir(dir);
  ManifestReport r;
  for (const auto& [name, want] : listed) {
    const auto it = actual.find(name);
    if (it == actual.end()) {
      r.missing.push_back(name);
    } else if (!(it->second == want)) {
      std::string what = name + ":";
      if (it->second.size != want.size)
        what += " size " + std::to_string(it->second.size) + " (manifest: " + std::to_string(want.size) + ")";
      if (it->second.sha256 != want.sha256) what += " sha256 " + it->second.sha256 + " (manifest: " + want.sha256 + ")";
      r.mismatched.push_back(what);
    }
  }
  for (const auto& [name, e] : actual)
    if (!listed.count(name)) r.extra.push_back(name);
  return r;
}

}  // namespace hla::io
