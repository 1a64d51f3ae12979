#include "hla/io/printable.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>

namespace hla::io {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] and its code point, or
// 0 when the bytes there are not valid UTF-8 (overlong, surrogate, > U+10FFFF).
std::size_t utf8_sequence(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t len;
  std::uint32_t min;
  if (c < 0x80) return cp = c, 1;
  if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
  else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
  else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool hidden(std::uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

std::string escape(std::string_view s, std::size_t max_bytes, bool keep_newlines) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 16);
  std::size_t i = 0;
  char buf[16];
  while (i < s.size()) {
    std::uint32_t cp = 0;
    std::size_t len = utf8_sequence(s, i, cp);
    if (i + std::max<std::size_t>(len, 1) > max_bytes) break;
    if (len == 0) {  // not UTF-8: the byte itself
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      i += 1;
      continue;
    }
    if (keep_newlines && (cp == '\n' || cp == '\t')) out += static_cast<char>(cp);
    else if (cp == '\n') out += "\\n";
    else if (cp == '\t') out += "\\t";
    else if (cp == '\r') out += "\\r";
    else if (hidden(cp)) {  // \u for C1: "\x9b" reads as a raw byte
      std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  if (i < s.size()) out += "…(" + std::to_string(s.size() - i) + " more bytes)";
  return out;
}

}  // namespace

std::string printable(std::string_view s, std::size_t max_bytes) { return escape(s, max_bytes, false); }

std::string printable_message(std::string_view s, std::size_t max_bytes) { return escape(s, max_bytes, true); }

bool has_control_bytes(std::string_view s) { return escape(s, s.size(), false) != s; }

}  // namespace hla::io
