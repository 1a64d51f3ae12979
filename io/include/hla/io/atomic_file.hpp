// Atomic file writes: a file is either written completely or not at all.
// The bytes go to a temporary file in the target's directory (same file
// system, so the final rename is atomic), which is fsynced and then renamed
// over the target; the directory is fsynced after the rename. On any error,
// including an exception thrown by the caller's fill function, the temporary
// file is removed and an existing target is left untouched.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace hla::io {

// Appends bytes to the file being written; throws hla::InputError on an I/O
// error (the message names the file and the OS error).
using ByteSink = std::function<void(const void* data, std::size_t size)>;

// Writes `path` with the bytes that `fill` passes to its sink. Throws
// hla::InputError when the directory cannot take the file or a write, fsync or
// rename fails; rethrows whatever `fill` throws. Either way no temporary file
// remains and `path` is as it was.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(const ByteSink&)>& fill);
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// The whole file as bytes; throws hla::InputError naming the file when it
// cannot be opened or read.
std::string read_file_bytes(const std::filesystem::path& path);

}  // namespace hla::io
