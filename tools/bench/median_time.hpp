// The benchmarks' clock: the median wall time of repeated runs, in seconds
// (the median, not the mean, so one descheduled run on a shared machine does
// not move a ratio).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace hla::bench {

template <class F> double median_seconds(F&& f, int reps) {
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ts.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace hla::bench
