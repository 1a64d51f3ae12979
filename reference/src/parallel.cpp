#include "hla/parallel.hpp"

#include <cstdlib>

namespace hla {

int worker_threads(int requested) {
  if (requested > 0) return requested;
  if (const char* e = std::getenv("HLA_THREADS"); e && *e) {
    const long v = std::strtol(e, nullptr, 10);
    if (v > 0 && v <= 1024) return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace hla
