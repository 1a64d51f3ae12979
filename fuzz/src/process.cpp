#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

namespace hla::fuzz {

SharedMemory::SharedMemory(size_t bytes) : n_(bytes ? bytes : 1) {
  p_ = mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p_ == MAP_FAILED) throw std::runtime_error(std::string("mmap of shared memory failed: ") + std::strerror(errno));
  std::memset(p_, 0, n_);
}

SharedMemory::~SharedMemory() { munmap(p_, n_); }

Arena::Arena() : fd_(memfd_create("hla-fuzz-arena", MFD_CLOEXEC)) {
  if (fd_ < 0) throw std::runtime_error(std::string("memfd_create failed: ") + std::strerror(errno));
}

Arena::~Arena() {
  if (p_) munmap(p_, n_);
  close(fd_);
}

unsigned char* Arena::resize(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes > n_ || bytes < n_ / 4) {  // shrink too, so that one huge case does not pin its memory
    if (p_) munmap(p_, n_);
    p_ = nullptr, n_ = 0;
    if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0)
      throw std::runtime_error(std::string("cannot size shared memory to ") + std::to_string(bytes) + " bytes: " + std::strerror(errno));
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap of shared memory failed: ") + std::strerror(errno));
    p_ = p, n_ = bytes;
  }
  return data();
}

unsigned char* Arena::map(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes != n_) {
    if (p_) munmap(p_, n_);
    p_ = nullptr, n_ = 0;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return nullptr;
    p_ = p, n_ = bytes;
  }
  return data();
}

namespace {

// Whole messages on a stream socket: a 64-bit length, then the bytes.
bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w);
  }
  return true;
}

// Waits until fd is readable or the deadline passes (false then).
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return false;
    pollfd pf{fd, POLLIN, 0};
    const int r = poll(&pf, 1, static_cast<int>(std::min<long long>(std::chrono::ceil<std::chrono::milliseconds>(left).count(), INT_MAX)));
    if (r > 0) return true;
  }
}

// The running campaign's end (CampaignDeadline), as steady_clock ticks; 0: none.
std::atomic<std::chrono::steady_clock::rep> campaign_end{0};

// When a call given `seconds` must end: then, or at the campaign's end if sooner.
std::chrono::steady_clock::time_point deadline_in(double seconds) {
  const auto own = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  const auto end = campaign_end.load();
  return end == 0 ? own : std::min(own, std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(end)));
}

// Kills a child's process group and reaps it; how it ended.
ChildOutcome end_child(int pid, bool kill_first) {
  if (kill_first) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  untrack_child(pid);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) return {ChildOutcome::Kind::signaled, WTERMSIG(status)};
  return {ChildOutcome::Kind::exited, WEXITSTATUS(status)};
}

// Reads exactly n bytes; waits until `deadline` when one is given (false on
// timeout with *timed_out set, or on end of stream).
bool read_all(int fd, void* data, size_t n, const std::chrono::steady_clock::time_point* deadline, bool* timed_out) {
  char* p = static_cast<char*>(data);
  while (n) {
    if (deadline && !wait_readable(fd, *deadline)) return *timed_out = true, false;
    const ssize_t got = read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_message(int fd, const std::string& m) {
  const uint64_t n = m.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, m.data(), m.size());
}

bool read_message(int fd, std::string& m, const std::chrono::steady_clock::time_point* deadline, bool* timed_out) {
  uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n, deadline, timed_out)) return false;
  m.resize(n);
  return read_all(fd, m.data(), n, deadline, timed_out);
}

// Forks a child in its own process group that talks over one end of a
// socket pair (a write to a dead peer is then an error, not SIGPIPE); the
// child runs `child(its end)` and never returns. The parent gets {pid, its end}.
std::pair<int, int> spawn_connected(const std::function<void(int)>& child) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::runtime_error(std::string("socketpair failed: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]), close(sv[1]);
    throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    reset_signals_in_child();
    setpgid(0, 0);
    close(sv[0]);
    child(sv[1]);
    _exit(127);
  }
  setpgid(pid, pid);
  track_child(pid);
  close(sv[1]);
  return {pid, sv[0]};
}

}  // namespace

void Worker::start() {
  std::tie(pid_, fd_) = spawn_connected([&](int fd) {
    std::string request, reply;
    bool timed_out = false;
    while (read_message(fd, request, nullptr, &timed_out)) {
      reply.clear();
      try {
        serve_(request, reply);
      } catch (...) {
        _exit(125);
      }
      std::fflush(nullptr);
      if (!write_message(fd, reply)) break;
    }
    _exit(0);
  });
}

ChildOutcome Worker::reap(bool kill_first) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (pid_ <= 0) return {};
  const ChildOutcome o = end_child(pid_, kill_first);
  pid_ = -1;
  return o;
}

void Worker::stop() { reap(true); }

ChildOutcome Worker::call(const std::string& request, std::string& reply, double timeout_s) {
  const auto deadline = deadline_in(timeout_s);
  if (pid_ <= 0) start();
  bool timed_out = false;
  if (write_message(fd_, request) && read_message(fd_, reply, &deadline, &timed_out)) return {};
  if (timed_out) {
    reap(true);
    return {ChildOutcome::Kind::timed_out, 0};
  }
  // The child closed its end: it died (or exited) with the request.
  ChildOutcome o = reap(false);
  if (o.kind == ChildOutcome::Kind::exited && o.code == 0) o.code = 125;  // ended without answering
  return o;
}

std::string ChildOutcome::describe() const {
  switch (kind) {
    case Kind::exited: return "exited with status " + std::to_string(code);
    case Kind::signaled: return std::string("killed by signal ") + std::to_string(code) + " (" + strsignal(code) + ")";
    case Kind::timed_out: return "timed out";
  }
  return "?";
}

void LineServer::stop() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  pending_.clear();
  if (pid_ > 0) end_child(pid_, true);
  pid_ = -1;
}

bool LineServer::call(const std::string& line, std::string& answer, double timeout_s, ChildOutcome& ended) {
  const auto deadline = deadline_in(timeout_s);
  if (pid_ <= 0)
    std::tie(pid_, fd_) = spawn_connected([&](int fd) {  // stdin and stdout are the socket
      const int log = open(log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 0), dup2(fd, 1);
      if (log >= 0) dup2(log, 2);
      execl("/bin/sh", "sh", "-c", cmd_.c_str(), static_cast<char*>(nullptr));
    });
  const std::string msg = line + "\n";
  if (write_all(fd_, msg.data(), msg.size())) {
    for (;;) {
      const size_t nl = pending_.find('\n');
      if (nl != std::string::npos) {
        answer = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        return true;
      }
      if (!wait_readable(fd_, deadline)) {
        stop();
        ended = {ChildOutcome::Kind::timed_out, 0};
        return false;
      }
      char buf[4096];
      const ssize_t got = read(fd_, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      pending_.append(buf, static_cast<size_t>(got));
    }
  }
  // It closed its end: it died (or exited) without answering.
  close(fd_);
  fd_ = -1;
  pending_.clear();
  ended = end_child(pid_, false);
  pid_ = -1;
  return false;
}

CampaignDeadline::CampaignDeadline(double seconds) {
  if (seconds > 0) campaign_end = deadline_in(seconds).time_since_epoch().count();
}

CampaignDeadline::~CampaignDeadline() { campaign_end = 0; }

ChildOutcome run_in_child(const std::function<int()>& body, double timeout_s) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    reset_signals_in_child();
    setpgid(0, 0);
    int rc = 125;
    try {
      rc = body();
    } catch (...) {
    }
    std::fflush(nullptr);
    _exit(rc);
  }
  setpgid(pid, pid);  // also from here: no race with the child's own call
  track_child(pid);
  const auto deadline = deadline_in(timeout_s);
  // Wake when the child exits (a pidfd becomes readable then), not on a timer:
  // a nap loop made each call up to 5 ms late. Without pidfds, naps.
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // glibc 2.36's <sys/pidfd.h> lacks extern "C"
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    // Whether it ended, without reaping it yet (end_child reaps it, untracked first).
    siginfo_t info{};
    const int r = waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid) break;
    if (r < 0 && errno != EINTR) {
      if (pidfd >= 0) close(pidfd);
      end_child(pid, true);
      throw std::runtime_error(std::string("waitid failed: ") + std::strerror(errno));
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      end_child(pid, true);
      if (pidfd >= 0) close(pidfd);
      return {ChildOutcome::Kind::timed_out, 0};
    }
    if (pidfd >= 0) {
      const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
      pollfd p{pidfd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(std::min<long long>(ms, INT_MAX)));
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(5000));
    }
  }
  if (pidfd >= 0) close(pidfd);
  return end_child(pid, false);
}

}  // namespace hla::fuzz
