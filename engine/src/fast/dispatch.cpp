#include "hla/fast/kernels.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace hla::fast {
namespace generic {
extern const Kernels table;
}
#if HLA_FAST_X86
namespace avx2 {
extern const Kernels table;
}
namespace avx512 {
extern const Kernels table;
}
#endif

const Kernels* kernels_named(const char* name) {
  if (std::strcmp(name, "generic") == 0) return &generic::table;
#if HLA_FAST_X86
  __builtin_cpu_init();
  if (std::strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2::table;
  if (std::strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
    return &avx512::table;
#endif
  return nullptr;
}

namespace {
std::atomic<const Kernels*> forced_table{nullptr};
}

void use_kernels(const Kernels* k) { forced_table = k; }

const Kernels& kernels() {
  if (const Kernels* f = forced_table.load(std::memory_order_relaxed)) return *f;
  static const Kernels* chosen = [] {
    if (const char* forced = std::getenv("HLA_FAST_KERNELS"); forced && *forced)
      if (const Kernels* k = kernels_named(forced)) return k;
    for (const char* name : {"avx512", "avx2"})
      if (const Kernels* k = kernels_named(name)) return k;
    return &generic::table;
  }();
  return *chosen;
}

}  // namespace hla::fast
