#include "process.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace hla::fuzz {

SharedMemory::SharedMemory(size_t bytes) : n_(bytes ? bytes : 1) {
  p_ = mmap(nullptr, n_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p_ == MAP_FAILED) throw std::runtime_error(std::string("mmap of shared memory failed: ") + std::strerror(errno));
  std::memset(p_, 0, n_);
}

SharedMemory::~SharedMemory() { munmap(p_, n_); }

std::string ChildOutcome::describe() const {
  switch (kind) {
    case Kind::exited: return "exited with status " + std::to_string(code);
    case Kind::signaled: return std::string("killed by signal ") + std::to_string(code) + " (" + strsignal(code) + ")";
    case Kind::timed_out: return "timed out";
  }
  return "?";
}

ChildOutcome run_in_child(const std::function<int()>& body, double timeout_s) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
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
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto nap = std::chrono::microseconds(50);
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) throw std::runtime_error(std::string("waitpid failed: ") + std::strerror(errno));
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return {ChildOutcome::Kind::timed_out, 0};
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(5000));
  }
  if (WIFSIGNALED(status)) return {ChildOutcome::Kind::signaled, WTERMSIG(status)};
  return {ChildOutcome::Kind::exited, WEXITSTATUS(status)};
}

}  // namespace hla::fuzz
