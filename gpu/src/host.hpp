// host.hpp — host-side pieces shared by the device launcher, the emulator and
// the C ABI wrapper: the launch parameters and the shared-memory plan.
#pragma once

#include "hla_cuda.hpp"
#include "params.hpp"

#include <cstddef>

namespace hla_cuda::detail {

// Dynamic shared memory a block may use on sm_90 (H100/H200: 227 KB); the
// emulator plans with it so that it runs the chunk width an H200 runs.
constexpr size_t kSmemSm90 = 232448;

int order_of(Variant v);  // 1 for la1, 2 for hla2/ahla, 3 for hla3
// The buffers of one block for chunk width W (16, 32 or 64).
Plan make_plan(Variant v, int64_t D, int64_t Dv, int W);
// Launch parameters; plan.W = 0 when not even W = 16 fits smem_limit bytes.
// Pointers are copied from `a` as they are (device or host).
Params make_params(const Options& o, const Args& a, size_t smem_limit);
// Blocks of one launch: (sequence or batch entry) x query heads.
int64_t block_count(const Args& a);

}  // namespace hla_cuda::detail
