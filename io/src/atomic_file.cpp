#include "hla/io/atomic_file.hpp"

#include "hla/io/printable.hpp"
#include "hla/error.hpp"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace hla::io {
namespace fs = std::filesystem;

namespace {

InputError os_error(const std::string& what, const fs::path& p, int err) {
  return InputError(what + " '" + printable(p.string()) + "': " + std::strerror(err));
}

// Files to remove when a fatal signal arrives. The handler may run at any
// point of any thread, so: a fixed table, plain char arrays, and a lock-free
// state per slot (0 free, 1 being filled or emptied, 2 live).
struct SignalSlot {
  std::atomic<int> state{0};
  pid_t owner = 0;  // a forked child inherits the table; only the owner removes
  char path[4096] = {};
};
constexpr int kSignalSlots = 64;
SignalSlot g_slots[kSignalSlots];
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void remove_registered_and_reraise(int sig) {
  const int saved = errno;
  const pid_t me = ::getpid();
  for (SignalSlot& s : g_slots)
    if (s.state.load() == 2 && s.owner == me) ::unlink(s.path);
  errno = saved;
  // SA_RESETHAND restored the default action: the signal now ends the process
  // (it is delivered when this handler returns) with the status it would have had.
  ::raise(sig);
}

// Owns the temporary file until it has been renamed; removes it otherwise.
struct TempFile {
  fs::path path;
  int fd = -1;
  bool renamed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!renamed && !path.empty()) ::unlink(path.c_str());
  }
};

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw os_error("cannot open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory; the rename itself has happened.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) throw os_error("cannot fsync directory", dir, err);
}

// The pid in ".NAME.tmp.<pid>.XXXXXX", or 0 when `name` is not such a name.
pid_t temp_owner(const std::string& name) {
  constexpr std::size_t suffix = 7;  // ".XXXXXX" (mkstemp uses letters and digits)
  if (name.size() < 1 + 5 + 1 + suffix || name[0] != '.') return 0;
  const std::size_t dot = name.size() - suffix;
  if (name[dot] != '.') return 0;
  for (std::size_t i = dot + 1; i < name.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return 0;
  std::size_t p = dot;
  while (p > 0 && std::isdigit(static_cast<unsigned char>(name[p - 1]))) --p;
  if (p == dot || dot - p > 9 || p < 6 || name.compare(p - 5, 5, ".tmp.") != 0) return 0;
  return static_cast<pid_t>(std::stol(name.substr(p, dot - p)));
}

// Sweeps each directory once per process: the first write there pays a listing.
void sweep_once(const fs::path& dir) {
  static std::mutex m;
  static std::set<std::string> swept;
  std::error_code ec;
  const std::string key = fs::absolute(dir, ec).lexically_normal().string();
  {
    std::lock_guard<std::mutex> lock(m);
    if (!swept.insert(key).second) return;
  }
  remove_stale_temp_files(dir);
}

// Test hook (HLA_TEST_WRITE_DELAY_MS): pause with the temporary file written
// but not yet renamed, so that a test can kill a writer mid-write. Compiled
// only into test builds (CMake option HLA_TEST_HOOKS, on with BUILD_TESTING):
// an installed library or a wheel reads no such variable.
void test_write_delay() {
#ifdef HLA_TEST_HOOKS
  static const long ms = [] {
    const char* s = std::getenv("HLA_TEST_WRITE_DELAY_MS");
    return s ? std::strtol(s, nullptr, 10) : 0L;
  }();
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
#endif
}

}  // namespace

RemoveOnSignal::RemoveOnSignal(const fs::path& path) {
  const std::string& s = path.native();
  if (s.size() >= sizeof(SignalSlot::path)) return;
  for (int i = 0; i < kSignalSlots; ++i) {
    int free = 0;
    if (!g_slots[i].state.compare_exchange_strong(free, 1)) continue;
    std::memcpy(g_slots[i].path, s.c_str(), s.size() + 1);
    g_slots[i].owner = ::getpid();
    g_slots[i].state.store(2);
    slot_ = i;
    return;
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  if (slot_ < 0) return;
  g_slots[slot_].state.store(1);
  g_slots[slot_].path[0] = '\0';
  g_slots[slot_].state.store(0);
}

void remove_temp_files_on_signals() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;  // keep SIG_IGN (nohup) and others' handlers
    struct sigaction sa {};
    sa.sa_handler = remove_registered_and_reraise;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    ::sigaction(sig, &sa, nullptr);
  }
}

std::size_t remove_stale_temp_files(const fs::path& dir) {
  std::size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const pid_t pid = temp_owner(it->path().filename().string());
    // ESRCH: no such process. EPERM means it exists (another user's): keep.
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH && ::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

void write_file_atomically(const fs::path& path, const std::function<void(const ByteSink&)>& fill) {
  if (path.filename().empty()) throw InputError("cannot write '" + printable(path.string()) + "': not a file name");
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  sweep_once(dir);
  TempFile tmp;
  // Hidden, and never *.safetensors: a listing cannot pick it up. The pid lets
  // a later run tell a dead writer's leftover from a live writer's file.
  std::string name = ".";
  name += path.filename().string();
  name += ".tmp." + std::to_string(::getpid()) + ".XXXXXX";
  const std::string templ = (dir / name).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  tmp.fd = ::mkstemp(buf.data());
  if (tmp.fd < 0) throw os_error("cannot create a temporary file in", dir, errno);
  tmp.path = buf.data();
  const RemoveOnSignal on_signal(tmp.path);
  if (::fchmod(tmp.fd, 0644) != 0) throw os_error("cannot set permissions of", tmp.path, errno);

  const ByteSink sink = [&](const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t w = ::write(tmp.fd, p, size);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw os_error("cannot write", path, errno);
      }
      p += w;
      size -= static_cast<std::size_t>(w);
    }
  };
  fill(sink);
  test_write_delay();
  if (::fsync(tmp.fd) != 0) throw os_error("cannot fsync", path, errno);
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) throw os_error("cannot close", path, errno);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) throw os_error("cannot rename the temporary file onto", path, errno);
  tmp.renamed = true;
  fsync_directory(dir);
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  write_file_atomically(path, [bytes](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

int open_regular_file(const fs::path& path) {
  // O_NONBLOCK: opening a FIFO without a writer must not wait for one.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw os_error("cannot open", path, errno);
  struct stat st {};
  const int rc = ::fstat(fd, &st);
  const int err = errno;
  if (rc != 0 || !S_ISREG(st.st_mode)) ::close(fd);
  if (rc != 0) throw os_error("cannot stat", path, err);
  if (S_ISDIR(st.st_mode)) throw InputError("cannot read '" + printable(path.string()) + "': it is a directory");
  if (!S_ISREG(st.st_mode))
    throw InputError("cannot read '" + printable(path.string()) + "': not a regular file (a FIFO, device or socket)");
  return fd;
}

std::uint64_t open_file_size(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

std::string read_file_bytes(const fs::path& path) {
  const int fd = open_regular_file(path);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  std::string bytes;
  bytes.reserve(static_cast<std::size_t>(open_file_size(fd)));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, chunk, sizeof chunk);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw os_error("cannot read", path, errno);
    }
    if (r == 0) break;
    bytes.append(chunk, static_cast<std::size_t>(r));
  }
  return bytes;
}

}  // namespace hla::io
