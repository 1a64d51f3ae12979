// Atomic file writes: a file is either written completely or not at all.
// The bytes go to a temporary file in the target's directory (same file
// system, so the final rename is atomic), which is fsynced and then renamed
// over the target; the directory is fsynced after the rename. On any error,
// including an exception thrown by the caller's fill function, the temporary
// file is removed and an existing target is left untouched.
//
// Temporary files are named ".NAME.tmp.<pid>.XXXXXX" (hidden, never
// *.safetensors). A writer killed by SIGTERM, SIGINT or SIGHUP removes its
// own (remove_temp_files_on_signals); one killed by SIGKILL cannot, so the
// first write into a directory removes the temporary files there whose writer
// process no longer exists (remove_stale_temp_files).
#pragma once

#include <cstddef>
#include <cstdint>
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
// cannot be opened or read, or is not a regular file (a directory, FIFO or
// device: reading those would hang or never end).
std::string read_file_bytes(const std::filesystem::path& path);
// A read-only descriptor (the caller closes it) of a regular file; a
// directory, FIFO, device or socket is an InputError naming the path (opening
// never blocks: a FIFO without a writer is refused, not waited for).
int open_regular_file(const std::filesystem::path& path);
// The size of an open file as fstat reports it (0 when it cannot tell): room
// to reserve before reading it.
std::uint64_t open_file_size(int fd);

// Installs, for SIGTERM, SIGINT and SIGHUP where their action is still the
// default, a handler that removes the files registered below (this process's
// open temporary files) and then lets the signal take its default action.
// For programs (main), not libraries: it changes process-wide state.
void remove_temp_files_on_signals();

// While it lives, `path` is removed if this process dies of one of those
// signals (after remove_temp_files_on_signals). A small fixed table: when it
// is full (or the path too long) the file is not registered — the stale-temp
// sweep still catches it. Async-signal-safe on the handler's side.
class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const std::filesystem::path& path);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

 private:
  int slot_ = -1;
};

// Removes the ".*.tmp.<pid>.XXXXXX" files in `dir` whose <pid> is no longer a
// process (kill(pid, 0) fails with ESRCH). Best effort: errors are ignored.
// Returns how many it removed.
std::size_t remove_stale_temp_files(const std::filesystem::path& dir);

}  // namespace hla::io
