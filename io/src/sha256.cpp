// SHA-256 written from FIPS 180-4 §4.1.2 (functions), §4.2.2 (constants),
// §5.1.1 (padding), §5.3.3 (initial hash) and §6.2.2 (computation).
#include "hla/io/sha256.hpp"

#include "hla/error.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace hla::io {
namespace {

constexpr std::array<std::uint32_t, 64> K = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
constexpr std::uint32_t ch(std::uint32_t x, std::uint32_t y, std::uint32_t z) { return (x & y) ^ (~x & z); }
constexpr std::uint32_t maj(std::uint32_t x, std::uint32_t y, std::uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
constexpr std::uint32_t big_sigma0(std::uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
constexpr std::uint32_t big_sigma1(std::uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
constexpr std::uint32_t small_sigma0(std::uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
constexpr std::uint32_t small_sigma1(std::uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

#if defined(__x86_64__)
// The same compression with the x86 SHA extensions (Intel SHA-NI), where the
// CPU has them: SHA256RNDS2 does two rounds on the state split as (A, B, E, F)
// and (C, D, G, H); SHA256MSG1/MSG2 extend the message schedule four words at
// a time (W[t−16] + σ0(W[t−15]) + W[t−7] + σ1(W[t−2])). Same digest, several
// times faster on the large fixtures (every read and write hashes the whole file).
__attribute__((target("sha,sse4.1,ssse3"))) void compress_shani(std::array<std::uint32_t, 8>& h, const std::uint8_t* b) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);  // big-endian words
  __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h.data()));
  __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h.data() + 4));
  // Lanes (low to high): abef = [f, e, b, a], cdgh = [h, g, d, c].
  const __m128i badc = _mm_shuffle_epi32(abcd, 0xB1);
  const __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);
  __m128i abef = _mm_alignr_epi8(badc, hgfe, 8);
  __m128i cdgh = _mm_blend_epi16(hgfe, badc, 0xF0);
  const __m128i abef0 = abef, cdgh0 = cdgh;
  __m128i w[4];
  for (int i = 0; i < 4; ++i) w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 16 * i)), swap);
  for (int g = 0; g < 16; ++g) {  // rounds 4g .. 4g+3
    __m128i& cur = w[g & 3];
    if (g >= 4) {
      // cur holds W[4g−16 .. 4g−13]; the other three the words after it.
      const __m128i w12 = w[(g + 1) & 3], w8 = w[(g + 2) & 3], w4 = w[(g + 3) & 3];
      cur = _mm_add_epi32(_mm_sha256msg1_epu32(cur, w12), _mm_alignr_epi8(w4, w8, 4));
      cur = _mm_sha256msg2_epu32(cur, w4);
    }
    __m128i m = _mm_add_epi32(cur, _mm_loadu_si128(reinterpret_cast<const __m128i*>(K.data() + 4 * g)));
    cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
    m = _mm_shuffle_epi32(m, 0x0E);
    abef = _mm_sha256rnds2_epu32(abef, cdgh, m);
  }
  abef = _mm_add_epi32(abef, abef0);
  cdgh = _mm_add_epi32(cdgh, cdgh0);
  // Back to (a, b, c, d) and (e, f, g, h).
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  abcd = _mm_blend_epi16(feba, dchg, 0xF0);
  efgh = _mm_alignr_epi8(dchg, feba, 8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h.data()), abcd);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h.data() + 4), efgh);
}

// CPUID: SHA (leaf 7, EBX bit 29), SSE4.1 and SSSE3 (leaf 1, ECX bits 19 and 9).
bool have_shani() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 19) & 1) || !((c >> 9) & 1)) return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 29) & 1)) return false;
    return std::getenv("HLA_NO_SHANI") == nullptr;
  }();
  return yes;
}
#endif

}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const std::uint8_t* b) {
#if defined(__x86_64__)
  if (have_shani()) return compress_shani(h_, b);
#endif
  std::array<std::uint32_t, 64> w;
  for (int t = 0; t < 16; ++t)
    w[t] = (std::uint32_t{b[4 * t]} << 24) | (std::uint32_t{b[4 * t + 1]} << 16) | (std::uint32_t{b[4 * t + 2]} << 8) |
           std::uint32_t{b[4 * t + 3]};
  for (int t = 16; t < 64; ++t) w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];
  auto [a, bb, c, d, e, f, g, h] = h_;
  for (int t = 0; t < 64; ++t) {
    const std::uint32_t t1 = h + big_sigma1(e) + ch(e, f, g) + K[t] + w[t];
    const std::uint32_t t2 = big_sigma0(a) + maj(a, bb, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = bb;
    bb = a;
    a = t1 + t2;
  }
  h_[0] += a;
  h_[1] += bb;
  h_[2] += c;
  h_[3] += d;
  h_[4] += e;
  h_[5] += f;
  h_[6] += g;
  h_[7] += h;
}

void Sha256::update(const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  length_ += size;
  while (size > 0) {
    if (fill_ == 0 && size >= block_.size()) {  // whole blocks straight from the input
      compress(p);
      p += block_.size();
      size -= block_.size();
      continue;
    }
    const std::size_t take = std::min(size, block_.size() - fill_);
    std::memcpy(block_.data() + fill_, p, take);
    fill_ += take;
    p += take;
    size -= take;
    if (fill_ == block_.size()) {
      compress(block_.data());
      fill_ = 0;
    }
  }
}

std::array<std::uint8_t, 32> Sha256::finish() {
  // Padding: a 1 bit, zeros up to 56 mod 64 bytes, then the bit length (big endian).
  const std::uint64_t bits = length_ * 8;
  const std::uint8_t one = 0x80;
  update(&one, 1);
  const std::uint8_t zero = 0;
  while (fill_ != 56) update(&zero, 1);
  std::uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
  update(len, 8);
  std::array<std::uint8_t, 32> out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::uint8_t>(h_[i] >> (24 - 8 * j));
  return out;
}

std::string to_hex(const std::array<std::uint8_t, 32>& digest) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (std::uint8_t x : digest) {
    s.push_back(hex[x >> 4]);
    s.push_back(hex[x & 15]);
  }
  return s;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return to_hex(h.finish());
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open '" + path.string() + "': " + std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw InputError("cannot read '" + path.string() + "'");
  return to_hex(h.finish());
}

}  // namespace hla::io
