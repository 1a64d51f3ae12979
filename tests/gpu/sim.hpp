// sim.hpp — runs the kernel's thread code (core.hpp's ThreadBackend, the code
// the GPU runs) on CPU threads: one std::thread per CUDA thread, a
// std::barrier per block for __syncthreads and per warp for mma.sync, whose
// result is formed from the fragments as the PTX ISA lays them out (written
// here from the ISA's formulas, independently of ThreadBackend's loads).
#pragma once

#include "core.hpp"
#include "emulate.hpp"
#include "host.hpp"

#include <atomic>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>

namespace hla_cuda::sim {

using detail::Params;

struct WarpStage {
  uint32_t a[32][4], b[32][2];
  float c[32][4], d[32][4];
};

struct Shared {
  explicit Shared(int threads) : nthreads(threads), block(threads), stages(static_cast<size_t>(threads / 32)) {
    for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  int nthreads;
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<WarpStage> stages;
};

inline float bf16_half(uint32_t reg, int half) { return detail::bf16_to_f32(static_cast<uint16_t>(half ? reg >> 16 : reg & 0xffffu)); }

// D = A·B + C of one mma.m16n8k16 (bf16 in, f32 accumulate) from the 32 lanes' fragments.
inline void mma_from_fragments(WarpStage& s) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, tig = lane % 4;
    for (int i = 0; i < 8; ++i) {  // a0..a7: row groupID for i < 2 or 4 <= i < 6, else groupID + 8
      const int row = (i < 2 || (i >= 4 && i < 6)) ? group : group + 8;
      const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = bf16_half(s.a[lane][i / 2], i % 2);
    }
    for (int i = 0; i < 4; ++i) {  // b0..b3: row threadID_in_group * 2 + (i & 1) (+8 for i >= 2), col groupID
      const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      B[row][group] = bf16_half(s.b[lane][i / 2], i % 2);
    }
    for (int i = 0; i < 4; ++i) C[group + (i >= 2 ? 8 : 0)][tig * 2 + (i & 1)] = s.c[lane][i];
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int group = lane >> 2, tig = lane % 4;
    for (int i = 0; i < 4; ++i) {
      const int m = group + (i >= 2 ? 8 : 0), n = tig * 2 + (i & 1);
      double sum = 0;
      for (int k = 0; k < 16; ++k) sum += static_cast<double>(A[m][k]) * static_cast<double>(B[k][n]);
      s.d[lane][i] = detail::mma_accumulate(C[m][n], sum);
    }
  }
}

struct Ctx {
  Shared* sh;
  int t;
  int tid() const { return t; }
  int nthreads() const { return sh->nthreads; }
  void sync() { sh->block.arrive_and_wait(); }
  void atomic_or(int* flag) { std::atomic_ref<int>(*flag).fetch_or(1); }
  void mma(float* acc, const uint32_t* a, const uint32_t* b) {
    const int w = t / 32, lane = t % 32;
    WarpStage& s = sh->stages[static_cast<size_t>(w)];
    for (int i = 0; i < 4; ++i) s.a[lane][i] = a[i], s.c[lane][i] = acc[i];
    for (int i = 0; i < 2; ++i) s.b[lane][i] = b[i];
    sh->warps[static_cast<size_t>(w)]->arrive_and_wait();
    if (lane == 0) mma_from_fragments(s);
    sh->warps[static_cast<size_t>(w)]->arrive_and_wait();
    for (int i = 0; i < 4; ++i) acc[i] = s.d[lane][i];
  }
};

// forward_emulated, but every block run by `threads` CPU threads through the device code path.
inline std::string forward_simulated(const Options& o, const Args& a, int threads) {
  if (std::string e = validate(o, a); !e.empty()) return e;
  Params P = detail::make_params(o, a, detail::kSmemSm90);
  if (P.plan.W == 0) return "does not fit";
  const int64_t blocks = detail::block_count(a);
  std::vector<float> ws(static_cast<size_t>(blocks) * static_cast<size_t>(P.plan.state));
  P.ws = ws.data();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    // Shared memory starts as garbage on a GPU: NaN here, so a read before a write shows.
    std::vector<float> smem(static_cast<size_t>(P.plan.total), std::numeric_limits<float>::quiet_NaN());
    Shared sh(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        Ctx ctx{&sh, t};
        detail::ThreadBackend<Ctx> be{ctx};
        detail::run_block(be, P, smem.data(), static_cast<int>(blk));
      });
    for (auto& th : pool) th.join();
  }
  return "";
}

}  // namespace hla_cuda::sim
