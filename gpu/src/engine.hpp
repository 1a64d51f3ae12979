// engine.hpp — what the C ABI wrapper (cabi.cpp) runs a problem on: the GPU
// (engine_cuda.cpp: copies to the device, forward(), copies back) or the CPU
// emulator (engine_emu.cpp). All pointers in `host` are host pointers.
#pragma once

#include "hla_cuda.hpp"

#include <string>

namespace hla_cuda::detail {
std::string engine_run(const Options& o, const Args& host);
}
