// Strings that came from a file or the command line, made safe to print: a
// hostile fixture must not drive the terminal (escape sequences) nor flood a
// message (a 10,000-digit gamma).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hla::io {

// Control bytes (< 0x20, 0x7f) written as \xHH; longer than `max` bytes:
// the first `max` bytes and "…(N more bytes)".
std::string printable(std::string_view s, std::size_t max = 120);

// Whether s holds a control byte (what printable() escapes).
bool has_control_bytes(std::string_view s);

}  // namespace hla::io
