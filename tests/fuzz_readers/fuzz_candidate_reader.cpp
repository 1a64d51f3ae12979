// libFuzzer target: the candidate reader on arbitrary bytes,
// against one fixed golden fixture (hla3 n = 8, d = 4, B = 1, H = 2, read once)
// to which a state tensor is added in memory so that the `state.<name>` path
// is reachable (no golden fixture carries a state). An hla::InputError is the
// expected rejection; anything else escaping is a bug.
#include "hla/io/candidate.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

#ifndef HLA_SOURCE_DIR
#error "HLA_SOURCE_DIR must name the repository root (the golden fixture is read from it)"
#endif

namespace {

const hla::io::Fixture& golden() {
  static const hla::io::Fixture fx = [] {
    try {
      // A golden fixture with a final state (state.<part>: the candidate's are read against it).
      return hla::io::read_fixture(HLA_SOURCE_DIR "/fixtures/hla3-raw-f32-small_int-n8-d4-B1H2K1.safetensors");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_candidate_reader: cannot load the golden fixture: %s\n", e.what());
      std::abort();
    }
  }();
  return fx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const hla::io::Fixture& fx = golden();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto file = hla::io::parse_safetensors(bytes, "fuzz");
    (void)hla::io::candidate_from_safetensors(file, fx, "fuzz");
  } catch (const hla::InputError&) {
    // Expected rejection of a bad candidate file.
  }
  return 0;
}
