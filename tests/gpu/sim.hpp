// sim.hpp — runs the kernel's thread code (core.hpp's ThreadBackend, the code
// the GPU runs) as one cooperative CPU thread (a ucontext fiber with its own
// stack) per CUDA thread, with a barrier per block for __syncthreads and per
// warp for mma.sync, whose result is formed from the fragments as the PTX ISA
// lays them out (written here from the ISA's formulas, independently of
// ThreadBackend's loads). Fibers, not OS threads: a block of 256 threads on a
// 2-core machine spent most of its time in futex waits and context switches
// (gpu_host 8 s wall, 9 s of system time; now well under a second). Between
// two barriers the threads of a block run one after another, in an order drawn
// anew for every phase from a seed: device code whose result depends on the
// order of its threads within a phase (a race) differs from the emulator.
#pragma once

#include "core.hpp"
#include "emulate.hpp"
#include "host.hpp"

#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <vector>

namespace hla_cuda::sim {

using detail::Params;

// The fibers of one block and their barriers. A fiber runs until it waits at
// a barrier (or ends); when every participant has arrived the barrier opens.
struct Barrier {
  int participants = 0, arrived = 0;
  std::vector<int> waiting;
};

struct Fibers {
  struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    bool runnable = true, done = false;
  };
  static constexpr size_t kStack = 256 * 1024;
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  int current = -1;

  // Arrive at b and switch to the scheduler until b opens.
  void wait(Barrier& b) {
    if (++b.arrived == b.participants) {
      for (int f : b.waiting) fibers[static_cast<size_t>(f)].runnable = true;
      b.waiting.clear();
      b.arrived = 0;
      return;  // the last to arrive goes on
    }
    b.waiting.push_back(current);
    fibers[static_cast<size_t>(current)].runnable = false;
    swapcontext(&fibers[static_cast<size_t>(current)].ctx, &scheduler);
  }

  // Runs body(t) for t = 0..n-1, each on its own fiber, until all end; the
  // runnable fibers of each round in an order drawn from rng. False when every
  // fiber left waits at a barrier that cannot open (divergent barriers: a hang on a GPU).
  template <class Body> bool run(int n, Body& body, std::mt19937_64& rng) {
    fibers = std::vector<Fiber>(static_cast<size_t>(n));
    struct Start {
      Fibers* self;
      Body* body;
    } start{this, &body};
    for (int t = 0; t < n; ++t) {
      Fiber& f = fibers[static_cast<size_t>(t)];
      f.stack = std::make_unique_for_overwrite<char[]>(kStack);  // untouched pages stay unmapped
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = f.stack.get();
      f.ctx.uc_stack.ss_size = kStack;
      f.ctx.uc_link = &scheduler;
      // makecontext passes ints: the pointer in two halves.
      const auto p = reinterpret_cast<std::uintptr_t>(&start);
      makecontext(&f.ctx, reinterpret_cast<void (*)()>(&trampoline<Start>), 3, static_cast<unsigned>(p >> 32),
                  static_cast<unsigned>(p & 0xffffffffu), t);
    }
    std::vector<int> order;
    for (;;) {
      order.clear();
      for (int t = 0; t < n; ++t)
        if (fibers[static_cast<size_t>(t)].runnable && !fibers[static_cast<size_t>(t)].done) order.push_back(t);
      if (order.empty()) break;
      std::shuffle(order.begin(), order.end(), rng);
      for (int t : order) {
        current = t;
        swapcontext(&scheduler, &fibers[static_cast<size_t>(t)].ctx);
      }
    }
    current = -1;
    return std::all_of(fibers.begin(), fibers.end(), [](const Fiber& f) { return f.done; });
  }

 private:
  template <class Start> static void trampoline(unsigned hi, unsigned lo, int t) {
    auto* s = reinterpret_cast<Start*>((static_cast<std::uintptr_t>(hi) << 32) | lo);
    (*s->body)(t);
    s->self->fibers[static_cast<size_t>(t)].done = true;
  }  // returns to uc_link: the scheduler
};

struct WarpStage {
  uint32_t a[32][4], b[32][2];
  float c[32][4], d[32][4];
};

struct Shared {
  explicit Shared(int threads) : nthreads(threads), warps(static_cast<size_t>(threads / 32)), stages(static_cast<size_t>(threads / 32)) {
    block.participants = threads;
    for (Barrier& w : warps) w.participants = 32;
  }
  int nthreads;
  Fibers fibers;
  Barrier block;
  std::vector<Barrier> warps;
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
  void sync() { sh->fibers.wait(sh->block); }
  void atomic_or(int* flag) { std::atomic_ref<int>(*flag).fetch_or(1); }
  void mma(float* acc, const uint32_t* a, const uint32_t* b) {
    const int w = t / 32, lane = t % 32;
    WarpStage& s = sh->stages[static_cast<size_t>(w)];
    for (int i = 0; i < 4; ++i) s.a[lane][i] = a[i], s.c[lane][i] = acc[i];
    for (int i = 0; i < 2; ++i) s.b[lane][i] = b[i];
    sh->fibers.wait(sh->warps[static_cast<size_t>(w)]);
    if (lane == 0) mma_from_fragments(s);
    sh->fibers.wait(sh->warps[static_cast<size_t>(w)]);
    for (int i = 0; i < 4; ++i) acc[i] = s.d[lane][i];
  }
};

// forward_emulated, but every block run by `threads` fibers through the device
// code path, each phase's threads in an order drawn from `seed`.
inline std::string forward_simulated(const Options& o, const Args& a, int threads, uint64_t seed) {
  if (std::string e = validate(o, a); !e.empty()) return e;
  Params P = detail::make_params(o, a, detail::kSmemSm90);
  if (P.plan.W == 0) return "does not fit";
  const int64_t blocks = detail::block_count(a);
  std::vector<float> ws(static_cast<size_t>(blocks) * static_cast<size_t>(P.plan.state));
  P.ws = ws.data();
  std::mt19937_64 rng(seed);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    // Shared memory starts as garbage on a GPU: NaN here, so a read before a write shows.
    std::vector<float> smem(static_cast<size_t>(P.plan.total), std::numeric_limits<float>::quiet_NaN());
    Shared sh(threads);
    auto body = [&](int t) {
      Ctx ctx{&sh, t};
      detail::ThreadBackend<Ctx> be{ctx};
      detail::run_block(be, P, smem.data(), static_cast<int>(blk));
    };
    if (!sh.fibers.run(threads, body, rng)) return "block " + std::to_string(blk) + ": threads wait at barriers that cannot open";
  }
  return "";
}

}  // namespace hla_cuda::sim
