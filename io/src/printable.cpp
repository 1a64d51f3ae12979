#include "hla/io/printable.hpp"

#include <cstdio>

namespace hla::io {

namespace {
bool control(unsigned char c) { return c < 0x20 || c == 0x7f; }
}  // namespace

bool has_control_bytes(std::string_view s) {
  for (unsigned char c : s)
    if (control(c)) return true;
  return false;
}

std::string printable(std::string_view s, std::size_t max) {
  const std::string_view head = s.substr(0, max);
  std::string out;
  out.reserve(head.size() + 24);
  for (unsigned char c : head) {
    if (control(c)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (s.size() > max) out += "...(" + std::to_string(s.size() - max) + " more bytes)";
  return out;
}

}  // namespace hla::io
