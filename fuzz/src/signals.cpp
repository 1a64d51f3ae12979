// StopSignals and the registry of the candidate's process groups it kills.
// The handler reads the registry, so it holds lock-free atomics only.
#include "hla/fuzz/signals.hpp"

#include "process.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace hla::fuzz {
namespace {

// Process groups of the running children (0: a free slot). A campaign has one
// or two children at a time; more than 64 are not tracked (never happens).
constexpr int kChildSlots = 64;
std::atomic<pid_t> child_groups[kChildSlots];
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
std::atomic<int> received_signal{0};
std::atomic<bool> handlers_installed{false};
struct sigaction previous_term, previous_int;

// Processes that stop by themselves on the signal (forward_stop_signal).
std::atomic<pid_t> forwarded[kChildSlots];

void kill_child_groups() {
  for (auto& g : child_groups)
    if (const pid_t p = g.load(); p > 0) kill(-p, SIGKILL);
}

void on_stop_signal(int sig) {
  const int saved_errno = errno;
  kill_child_groups();
  for (auto& f : forwarded)
    if (const pid_t p = f.load(); p > 0) kill(p, sig);
  int none = 0;
  if (!received_signal.compare_exchange_strong(none, sig)) {
    // A second signal: the default action, delivered when this handler returns.
    signal(sig, SIG_DFL);
    raise(sig);
  }
  errno = saved_errno;
}

}  // namespace

void track_child(int pgid) {
  for (auto& g : child_groups) {
    pid_t free = 0;
    if (g.compare_exchange_strong(free, pgid)) break;
  }
  if (received_signal.load()) kill(-pgid, SIGKILL);  // the signal came between the fork and here
}

void untrack_child(int pgid) {
  for (auto& g : child_groups) {
    pid_t p = pgid;
    if (g.compare_exchange_strong(p, 0)) break;
  }
}

void reset_signals_in_child() {
  if (!handlers_installed.load()) return;
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
}

void forward_stop_signal(int pid) {
  for (auto& f : forwarded) {
    pid_t free = 0;
    if (f.compare_exchange_strong(free, pid)) break;
  }
  if (const int sig = received_signal.load()) kill(pid, sig);  // the signal came between the fork and here
}

void unforward_stop_signal(int pid) {
  for (auto& f : forwarded) {
    pid_t p = pid;
    if (f.compare_exchange_strong(p, 0)) break;
  }
}

StopSignals::StopSignals() {
  received_signal = 0;
  for (auto& f : forwarded) f = 0;  // a forked child's copy of its parent's registry is not its own
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &previous_term);
  sigaction(SIGINT, &sa, &previous_int);
  handlers_installed = true;
}

StopSignals::~StopSignals() {
  handlers_installed = false;
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
}

int StopSignals::received() const { return received_signal.load(); }

void StopSignals::reraise() const {
  const int sig = received();
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(128 + sig);  // not reached: the default action of SIGTERM and SIGINT ends the process
}

int stop_signal() { return received_signal.load(); }

}  // namespace hla::fuzz
