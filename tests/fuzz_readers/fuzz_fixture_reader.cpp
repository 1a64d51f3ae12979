// libFuzzer target: the fixture reader on arbitrary bytes.
// parse_safetensors then fixture_from_safetensors; an hla::InputError is the
// expected rejection of a bad file. Anything else escaping — another exception
// type, a crash, a sanitizer report — is a bug in the reader.
#include "hla/io/fixture.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const auto file = hla::io::parse_safetensors(bytes, "fuzz");
    (void)hla::io::fixture_from_safetensors(file, "fuzz");
  } catch (const hla::InputError&) {
    // A rejection with a message: what the reader must do with a bad file.
  }
  return 0;
}
