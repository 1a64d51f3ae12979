// SHA-256 (FIPS 180-4), for the fixture MANIFEST: small and dependency free.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hla::io {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest; the object must not be updated afterwards.
  std::array<std::uint8_t, 32> finish();

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> block_{};
  std::size_t fill_ = 0;       // bytes in block_
  std::uint64_t length_ = 0;   // message length in bytes
};

std::string to_hex(const std::array<std::uint8_t, 32>& digest);
std::string sha256_hex(std::string_view bytes);
// Hashes a file in chunks; throws hla::InputError naming it when unreadable.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace hla::io
