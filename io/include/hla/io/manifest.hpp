// MANIFEST.json of a fixture directory: every *.safetensors file below it
// (recursively; paths relative, '/'-separated, sorted) with its sha256 and
// size, so that a copied or regenerated fixture set can be verified.
//
//   {"files": {"a/x.safetensors": {"sha256": "…", "size": 123}, …},
//    "format": "hla-oracle-manifest", "format_version": "1"}
//
// Written deterministically (sorted keys, 2-space indent, trailing newline)
// and atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace hla::io {

inline constexpr const char* kManifestName = "MANIFEST.json";

struct ManifestEntry {
  std::string sha256;  // lowercase hex
  std::uint64_t size = 0;
  bool operator==(const ManifestEntry&) const = default;
};

// The *.safetensors files below `dir`, hashed.
std::map<std::string, ManifestEntry> scan_fixture_dir(const std::filesystem::path& dir);
std::string manifest_json(const std::map<std::string, ManifestEntry>& files);
// Scans `dir` and writes dir/MANIFEST.json; returns what it listed.
std::map<std::string, ManifestEntry> write_manifest(const std::filesystem::path& dir);

struct ManifestReport {
  std::vector<std::string> mismatched;  // "path: what differs"
  std::vector<std::string> missing;     // listed, not on disk
  std::vector<std::string> extra;       // on disk, not listed
  bool ok() const { return mismatched.empty() && missing.empty() && extra.empty(); }
  std::string describe() const;         // one line per finding; "" when ok
};

// Reads dir/MANIFEST.json (InputError when absent or malformed) and compares
// it with the directory as it is now.
ManifestReport verify_manifest(const std::filesystem::path& dir);

}  // namespace hla::io
