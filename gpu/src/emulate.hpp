// emulate.hpp — the tensor-core arithmetic on the CPU: a serial backend for
// core.hpp (SerialBackend) and the accumulation model the emulator and the
// thread simulator share. Host only.
#pragma once

#include "core.hpp"

#include <cstddef>
#include <vector>

namespace hla_cuda::detail {

// The model of one mma.m16n8k16 step on an accumulator element: the 16 bf16
// products are exact, their sum is formed in double and added to the f32
// accumulator, and the result is rounded toward zero (tensor cores truncate
// when they align and normalize; round-to-nearest would flatter the kernel).
float mma_accumulate(float acc, double products_sum);

struct SerialBackend {
  template <class F> void for_each(int n, F&& f) {
    for (int i = 0; i < n; ++i) f(i);
  }
  void sync() {}
  void set_flag(int* flag) { *flag = 1; }
  void gemm(const GemmArgs& g);

 private:
  std::vector<float> a_parts_, b_parts_;
};

// Counts matrix-product FLOPs instead of computing (for_each does nothing).
struct CountingBackend {
  double useful = 0, mma = 0;
  template <class F> void for_each(int, F&&) {}
  void sync() {}
  void set_flag(int*) {}
  void gemm(const GemmArgs& g);
};

}  // namespace hla_cuda::detail
