#include "engine.hpp"

namespace hla_cuda::detail {
std::string engine_run(const Options& o, const Args& host) { return forward_emulated(o, host); }
}  // namespace hla_cuda::detail
