// Strings from files and command lines, made safe to print: a fixture's case
// name, a path or a candidate's log may hold terminal escape sequences
// (ESC [ …), other control characters, invalid UTF-8 or megabytes of text.
// Every message that quotes such a string should quote printable(string).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hla::io {

// `s` with every C0 control character, DEL, C1 control (U+0080–U+009F),
// bidirectional override (U+202A–U+202E, U+2066–U+2069) and byte that is not
// part of valid UTF-8 written as an escape ("\x1b", "\n", "\t", "\u009b",
// "\u202e"; a byte that is not UTF-8: "\xff"); longer than `max_bytes`
// input bytes: cut there (at a character boundary) and "…(N more bytes)"
// appended. Printable text, including non-ASCII UTF-8, is kept as it is.
std::string printable(std::string_view s, std::size_t max_bytes = 200);

// The same for a whole message of ours that quotes such strings: newlines and
// tabs are kept (messages may span lines), the length limit is larger.
std::string printable_message(std::string_view s, std::size_t max_bytes = 4000);

// Whether printable() would escape anything in s (a fixture's metadata must not need it).
bool has_control_bytes(std::string_view s);

}  // namespace hla::io
