// params.hpp — what one kernel launch needs, as a plain struct the host fills
// and every thread block reads (kernel argument on the device, a host struct in
// the emulator), and the shared-memory plan of one thread block.
#pragma once

#include <cstdint>

namespace hla_cuda::detail {

constexpr int kThreads = 256;                // threads per block (8 warps)
constexpr int kMaxChunk = 64;                // widest chunk
constexpr int kMaxPowers = 3 * kMaxChunk + 4;  // gamma^0 .. gamma^(3W+3)

// Shared memory of one block, offsets in floats (each a multiple of 4: 16-byte
// aligned). W: chunk width; dp = D rounded up to 16; wp = Dv + 1 rounded up to
// 16 (the value rows carry a trailing 1: the last used column is den).
struct Plan {
  int W = 0, dp = 0, wp = 0;
  int q = -1, k = -1, v = -1;   // chunk inputs [W][dp], [W][dp], [W][wp]
  int a = -1, a1 = -1, h = -1, r = -1;  // [W][W] scores
  int u = -1, x = -1;           // [W][dp]
  int g = -1, o = -1;           // [W][wp]
  int pw = -1;                  // gamma powers [3W + 4]
  int flag = -1;                // one int: the chunk holds a NaN/Inf input
  int vx = -1, vy = -1;         // [dp], [wp]: vectors of the streaming fallback
  int total = 0;                // floats
  // Running state per block (padded, in the workspace): slot0 [dp][dp] (S),
  // slot1 [dp][wp], slot2 [dp][wp]; -1 where the variant has none.
  int s0 = -1, s1 = -1, s2 = -1, state = 0;
};

struct Params {
  int32_t variant = 0, dtype = 0;
  int32_t parts_raw = 1;   // bf16 parts of an input value: bf16 1, f16 2, f32 3 (precision bf16: 1)
  int32_t parts_int = 3;   // bf16 parts of a computed value (precision f32: 3, bf16: 1)
  int32_t gamma_is_one = 1;
  int32_t normalize = 0, clamp = 0;
  int64_t B = 0, T = 0, H = 0, Hkv = 0, D = 0, Dv = 0;
  int64_t nseq = 0;        // sequences per head: num_seqs (packed) or B
  const int64_t* cu = nullptr;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  float* den = nullptr;
  const float* init = nullptr;
  float* fin = nullptr;
  float* ws = nullptr;     // Plan::state floats per block
  int64_t state_size = 0;  // public (unpadded) floats per block
  float lambda = 0, eps = 0;
  float out_scale = 1;     // scale^order, applied to num and den
  float powers[kMaxPowers] = {};
  Plan plan;
};

}  // namespace hla_cuda::detail
