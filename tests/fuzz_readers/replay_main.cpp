// Replays a libFuzzer target's corpus without libFuzzer: calls
// LLVMFuzzerTestOneInput on every regular file under each directory given
// (sorted, so runs are reproducible). Linked with one target; built by every
// normal build so that the committed corpus is a ctest (fuzz_readers_corpus).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
    return 2;
  }
  std::size_t count = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i]))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      std::fprintf(stderr, "%s: no files in %s (an empty corpus tests nothing)\n", argv[0], argv[i]);
      return 2;
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "%s: cannot read %s\n", argv[0], f.c_str());
        return 2;
      }
      // An empty std::string's data() is a valid pointer; libFuzzer may pass any pointer with size 0.
      try {
        LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
      } catch (const std::exception& e) {  // the target lets everything but InputError escape: a bug
        std::fprintf(stderr, "%s: %s: uncaught exception: %s\n", argv[0], f.c_str(), e.what());
        return 1;
      }
      ++count;
    }
  }
  std::printf("%s: %zu inputs replayed, no crash\n", argv[0], count);
  return 0;
}
