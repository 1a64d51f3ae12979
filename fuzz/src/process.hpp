// Child processes with a deadline: a candidate that crashes or hangs becomes
// a finding, never a fault of the fuzzer.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

namespace hla::fuzz {

// Anonymous shared memory that a forked child writes and the parent reads.
class SharedMemory {
 public:
  explicit SharedMemory(size_t bytes);
  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

struct ChildOutcome {
  enum class Kind { exited, signaled, timed_out } kind = Kind::exited;
  int code = 0;  // exit status, or the signal
  std::string describe() const;
};

// Memory that the parent and the children it forks later share (a memfd):
// the parent resizes it before a request; a child maps it at that size.
class Arena {
 public:
  Arena();
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  // Parent: at least `bytes` (contents not kept), mapped.
  unsigned char* resize(size_t bytes);
  // Child: the first `bytes` of what the parent sized (remapped when they grew).
  unsigned char* map(size_t bytes);
  unsigned char* data() const { return static_cast<unsigned char*>(p_); }
  size_t size() const { return n_; }

 private:
  int fd_ = -1;
  void* p_ = nullptr;
  size_t n_ = 0;
};

// A child process that answers requests until it is stopped or dies: a
// library stays loaded across calls instead of being loaded per call.
// Requests and replies are byte strings over a socket; bulk data travels in
// an Arena. A crash or a timeout ends the child; the next call starts a new one.
class Worker {
 public:
  // Runs in the child, once per request.
  using Serve = std::function<void(const std::string& request, std::string& reply)>;
  explicit Worker(Serve serve) : serve_(std::move(serve)) {}
  ~Worker() { stop(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Sends the request and waits at most timeout_s for the reply (exited, 0
  // when it came); otherwise how the child ended (it is gone then).
  ChildOutcome call(const std::string& request, std::string& reply, double timeout_s);
  // Kills the child, if any.
  void stop();
  bool running() const { return pid_ > 0; }

 private:
  void start();
  ChildOutcome reap(bool kill_first);
  Serve serve_;
  int pid_ = -1, fd_ = -1;
};

// A command (`sh -c`) that stays running and answers each request line on
// its stdin with one line on its stdout (hla fuzz --exec-server); its stderr
// goes to `log`. Started on the first call; a crash or a timeout ends it and
// the next call starts it again.
class LineServer {
 public:
  LineServer(std::string command, std::string log) : cmd_(std::move(command)), log_(std::move(log)) {}
  ~LineServer() { stop(); }
  LineServer(const LineServer&) = delete;
  LineServer& operator=(const LineServer&) = delete;
  // Sends `line` (no newline in it) and waits at most timeout_s for the
  // answer line (newline removed): true when it came; else `ended` says how
  // the server ended (a timeout kills it).
  bool call(const std::string& line, std::string& answer, double timeout_s, ChildOutcome& ended);
  void stop();
  bool running() const { return pid_ > 0; }

 private:
  std::string cmd_, log_, pending_;
  int pid_ = -1, fd_ = -1;
};

// The start-up allowance (Supports::startup_timeout): added to the limit of the
// call that starts the process, the first time and after allow() (before a
// timeout's replay); other restarts get the plain limit.
class StartupAllowance {
 public:
  double limit(double timeout_s, double startup_s, bool running) {
    return timeout_s + (!running && std::exchange(allowed_, false) ? startup_s : 0);
  }
  void allow() { allowed_ = true; }

 private:
  bool allowed_ = true;
};

// Forks; the child runs body() and _exits with its result (its own process
// group, so a timeout kills everything it started). Waits at most timeout_s.
ChildOutcome run_in_child(const std::function<int()>& body, double timeout_s);

// While one exists, every call above ends by `seconds` from its making at
// the latest (a timeout then), whatever its own timeout: a campaign's
// --time is a hard limit. One at a time (the campaign's thread).
class CampaignDeadline {
 public:
  explicit CampaignDeadline(double seconds);  // 0: no limit
  ~CampaignDeadline();
  CampaignDeadline(const CampaignDeadline&) = delete;
  CampaignDeadline& operator=(const CampaignDeadline&) = delete;
};

// The process groups StopSignals' handler kills (signals.cpp): every child
// above is tracked from its fork until just before it is reaped (so that its
// number is never another process's), and runs with the default actions of
// SIGTERM and SIGINT.
void track_child(int pgid);
void untrack_child(int pgid);
void reset_signals_in_child();

}  // namespace hla::fuzz
