// SHA-256 against the FIPS 180-4 / NIST example vectors, MANIFEST.json
// writing and verification, and atomic writes under failure.
#include "hla/io/atomic_file.hpp"
#include "hla/io/manifest.hpp"
#include "hla/io/sha256.hpp"
#include "io_util.hpp"

#include <fstream>

using namespace hla;
using namespace hla::io;
using hla::test::require_input_error;
using hla::test::ScratchDir;

TEST_CASE("sha256: FIPS 180-4 example vectors", "[io][sha256]") {
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST_CASE("sha256: pieces of any size hash like the whole, at lengths around the padding boundary", "[io][sha256]") {
  std::string msg;
  for (int i = 0; i < 300; ++i) msg.push_back(static_cast<char>(i * 7 + 3));
  for (std::size_t len : {55, 56, 57, 63, 64, 65, 119, 120, 128, 300}) {
    const std::string m = msg.substr(0, len);
    const std::string whole = sha256_hex(m);
    for (std::size_t piece : {1, 3, 63, 64, 100}) {
      Sha256 h;
      for (std::size_t at = 0; at < m.size(); at += piece) h.update(m.substr(at, piece));
      INFO("len " << len << " piece " << piece);
      CHECK(to_hex(h.finish()) == whole);
    }
  }
  ScratchDir dir;
  write_file_atomically(dir / "f", std::string(1000000, 'a'));
  CHECK(sha256_file_hex(dir / "f") == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("manifest: lists *.safetensors recursively, sorted, with hash and size", "[io][manifest]") {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "sub");
  write_file_atomically(dir / "b.safetensors", "abc");
  write_file_atomically(dir / "sub/a.safetensors", "");
  write_file_atomically(dir / "notes.txt", "ignored");
  write_manifest(dir.path);
  const std::string text = read_file_bytes(dir / kManifestName);
  CHECK(text ==
        "{\n"
        "  \"files\": {\n"
        "    \"b.safetensors\": {\n"
        "      \"sha256\": \"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\",\n"
        "      \"size\": 3\n"
        "    },\n"
        "    \"sub/a.safetensors\": {\n"
        "      \"sha256\": \"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\",\n"
        "      \"size\": 0\n"
        "    }\n"
        "  },\n"
        "  \"format\": \"hla-oracle-manifest\",\n"
        "  \"format_version\": \"1\"\n"
        "}\n");
  write_manifest(dir.path);
  CHECK(read_file_bytes(dir / kManifestName) == text);
  CHECK(verify_manifest(dir.path).ok());
}

TEST_CASE("manifest: verification reports changed, missing and extra files", "[io][manifest]") {
  ScratchDir dir;
  write_file_atomically(dir / "a.safetensors", "aaa");
  write_file_atomically(dir / "b.safetensors", "bbb");
  write_file_atomically(dir / "c.safetensors", "ccc");
  write_manifest(dir.path);
  write_file_atomically(dir / "a.safetensors", "aab");   // same size, other bytes
  write_file_atomically(dir / "c.safetensors", "cccc");  // other size
  std::filesystem::remove(dir / "b.safetensors");
  write_file_atomically(dir / "d.safetensors", "ddd");
  const ManifestReport r = verify_manifest(dir.path);
  CHECK_FALSE(r.ok());
  REQUIRE(r.mismatched.size() == 2);
  CHECK(r.mismatched[0].rfind("a.safetensors: sha256 ", 0) == 0);
  CHECK(r.mismatched[1].rfind("c.safetensors: size 4 (manifest: 3)", 0) == 0);
  CHECK(r.missing == std::vector<std::string>{"b.safetensors"});
  CHECK(r.extra == std::vector<std::string>{"d.safetensors"});
  CHECK(r.describe().find("missing (listed in the manifest, not on disk): b.safetensors") != std::string::npos);
}

TEST_CASE("manifest: a missing or malformed manifest is an input error", "[io][manifest][hardening]") {
  ScratchDir dir;
  require_input_error([&] { (void)verify_manifest(dir.path); }, {"cannot open", kManifestName});
  write_file_atomically(dir / kManifestName, "{\"files\": ");
  require_input_error([&] { (void)verify_manifest(dir.path); }, {"MANIFEST.json: not valid JSON"});
  write_file_atomically(dir / kManifestName, "{\"files\": {}}");
  require_input_error([&] { (void)verify_manifest(dir.path); }, {"not an hla-oracle manifest"});
  write_file_atomically(dir / kManifestName,
                        R"({"format":"hla-oracle-manifest","format_version":"1","files":{"a.safetensors":{"size":-1,"sha256":"x"}}})");
  require_input_error([&] { (void)verify_manifest(dir.path); }, {"entry 'a.safetensors'"});
  require_input_error([] { (void)write_manifest("/nonexistent/dir"); }, {"'/nonexistent/dir' is not a directory"});
}

TEST_CASE("atomic write: a failure mid-write leaves no file and no temporary file", "[io][atomic]") {
  ScratchDir dir;
  const auto path = dir / "x.safetensors";
  auto failing = [](const ByteSink& sink) {
    sink("half a file", 11);
    throw std::runtime_error("writer failed");
  };
  CHECK_THROWS_WITH(write_file_atomically(path, failing), "writer failed");
  CHECK(dir.listing().empty());

  // An existing file survives a failed rewrite untouched.
  write_file_atomically(path, "old contents");
  CHECK_THROWS_WITH(write_file_atomically(path, failing), "writer failed");
  CHECK(dir.listing() == std::vector<std::string>{"x.safetensors"});
  CHECK(read_file_bytes(path) == "old contents");
}

TEST_CASE("atomic write: unwritable places are input errors naming them", "[io][atomic]") {
  require_input_error([] { write_file_atomically("/nonexistent/dir/x.safetensors", "x"); },
                      {"cannot create a temporary file in '/nonexistent/dir'"});
  ScratchDir dir;
  std::filesystem::create_directories(dir / "taken");
  // rename() cannot replace a directory with a file: the temporary file must go too.
  require_input_error([&] { write_file_atomically(dir / "taken", "x"); }, {"cannot rename the temporary file onto", "taken"});
  CHECK(dir.listing() == std::vector<std::string>{"taken"});
  require_input_error([&] { (void)read_file_bytes(dir / "taken"); }, {"it is a directory"});
}
