// Child processes with a deadline: a candidate that crashes or hangs becomes
// a finding, never a fault of the fuzzer.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

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

// Forks; the child runs body() and _exits with its result (its own process
// group, so a timeout kills everything it started). Waits at most timeout_s.
ChildOutcome run_in_child(const std::function<int()>& body, double timeout_s);

}  // namespace hla::fuzz
