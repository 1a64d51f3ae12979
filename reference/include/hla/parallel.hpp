// Work shared out over the machine's cores: every library's large loops (the
// engines' heads, the checker's scoring, decoding and encoding tensors).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace hla {

// Worker threads to use: requested > 0, else HLA_THREADS, else every core.
int worker_threads(int requested = 0);

// Runs fn(i) for i in [0, count) on `threads` workers (this one included);
// after an exception no new item starts, and the first one is rethrown.
template <class F> void parallel_for(std::size_t count, int threads, F&& fn) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < count;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < std::min<int>(threads, static_cast<int>(count)); ++i) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// fn(begin, end) over [0, count) in slices of at least `grain` items, on every
// core when count is large (one slice, this thread, when it is not).
template <class F> void parallel_slices(std::size_t count, std::size_t grain, F&& fn) {
  const std::size_t slices = std::max<std::size_t>(1, std::min<std::size_t>(count / std::max<std::size_t>(grain, 1), 64));
  if (slices == 1) {
    if (count) fn(std::size_t{0}, count);
    return;
  }
  parallel_for(slices, worker_threads(), [&](std::size_t s) { fn(count * s / slices, count * (s + 1) / slices); });
}

// The smallest i in [0, count) with bad(i), or count: a scan in slices on
// every core that names the same element as a sequential one.
template <class Bad> std::size_t first_where(std::size_t count, Bad&& bad) {
  constexpr std::size_t grain = std::size_t{1} << 18;
  std::vector<std::size_t> first((count + grain - 1) / grain, count);
  parallel_slices(first.size(), 1, [&](std::size_t s0, std::size_t s1) {
    for (std::size_t s = s0; s < s1; ++s)
      for (std::size_t i = s * grain, end = std::min(count, i + grain); i < end; ++i)
        if (bad(i)) {
          first[s] = i;
          break;
        }
  });
  for (std::size_t f : first)
    if (f < count) return f;
  return count;
}

}  // namespace hla
