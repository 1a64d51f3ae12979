// core.hpp — the kernel's algorithm, written once for three executors:
//   - the CUDA device (kernel.cu: ThreadBackend<DeviceCtx>, mma.sync on tensor cores),
//   - a simulator that runs the same thread code on CPU threads
//     (tests/gpu: ThreadBackend<SimCtx>, mma emulated from the PTX fragment layout),
//   - a serial CPU emulator (emulate.cpp: SerialBackend), fast enough for `hla fuzz`.
// One thread block handles one (sequence, query head): it walks the sequence
// chunk by chunk, computes each chunk's outputs from the carried state and the
// chunk itself (SPEC §5) and folds the chunk into the state (SPEC §4, in the
// corrected-state form). Every step is a block-wide collective: a matrix
// product (Backend::gemm) or an element-wise loop (Backend::for_each); each
// ends with a block barrier, so a step sees everything the previous ones wrote.
// gpu/README.md derives the formulas and lists the buffers.
#pragma once

#include "params.hpp"

#include <cstdint>
#include <cstring>
#if !defined(__CUDACC__)
#include <math.h>  // fmaf, fabsf, rintf in the global namespace, as on the device
#endif

// Device code under nvcc (this header is only instantiated for the device
// there), plain inline C++ elsewhere.
#if defined(__CUDACC__)
#define HLA_HD __device__ inline
#else
#define HLA_HD inline
#endif
#if defined(__CUDACC__)
#define HLA_UNROLL _Pragma("unroll")
#else
#define HLA_UNROLL
#endif

namespace hla_cuda::detail {

// ---------------------------------------------------------------------------
// Bit-level float conversions, identical on host and device (the emulator and
// the simulator must round exactly as the kernel does).

HLA_HD uint32_t f2u(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
HLA_HD float u2f(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
HLA_HD bool finite(float x) { return (f2u(x) & 0x7f800000u) != 0x7f800000u; }

// x rounded to the nearest bf16 (ties to even), as a float; NaN stays NaN.
HLA_HD float bf16_round(float x) {
  uint32_t u = f2u(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return u2f(u | 0x00400000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return u2f(u & 0xffff0000u);
}
HLA_HD float bf16_to_f32(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }
HLA_HD uint16_t f32_to_bf16(float x) { return static_cast<uint16_t>(f2u(bf16_round(x)) >> 16); }

HLA_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m · 2^-24, exact in float
    const float f = static_cast<float>(m) * 5.9604644775390625e-08f;
    return u2f(f2u(f) | sign);
  }
  if (e == 31) return u2f(sign | 0x7f800000u | (m << 13) | (m ? 0x00400000u : 0u));
  return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

// Round to nearest even; overflow to inf (from 65520 on).
HLA_HD uint16_t f32_to_f16(float x) {
  const uint32_t u = f2u(x), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {  // below 2^-14: an f16 subnormal (or the smallest normal after rounding)
    const float scaled = u2f(a) * 16777216.0f;  // · 2^24, exact
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rintf(scaled)));
  }
  uint32_t h = (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// dtype codes as in hla_impl.h: 1 f32, 2 bf16, 3 f16.
HLA_HD float load_value(const void* base, int dtype, int64_t i) {
  if (dtype == 1) return static_cast<const float*>(base)[i];
  const uint16_t b = static_cast<const uint16_t*>(base)[i];
  return dtype == 2 ? bf16_to_f32(b) : f16_to_f32(b);
}
HLA_HD void store_value(void* base, int dtype, int64_t i, float x) {
  if (dtype == 1) static_cast<float*>(base)[i] = x;
  else static_cast<uint16_t*>(base)[i] = dtype == 2 ? f32_to_bf16(x) : f32_to_f16(x);
}

// x as parts bf16 numbers p[0] + p[1] + p[2] (hi, mid, lo), each the bf16
// rounding of what the previous ones leave: 3 parts hold any f32 exactly, 2 any
// f16, 1 any bf16 (|mid| <= 2^-9 |x|, |lo| <= 2^-17 |x|).
HLA_HD void split(float x, int parts, float* p) {
  p[0] = bf16_round(x);
  p[1] = p[2] = 0.0f;
  if (parts > 1) {
    const float r = x - p[0];
    p[1] = bf16_round(r);
    if (parts > 2) p[2] = bf16_round(r - p[1]);
  }
}
// Two bf16-valued floats as one register of an mma fragment (first element in the low half).
HLA_HD uint32_t pack2(float first, float second) { return (f2u(first) >> 16) | (f2u(second) & 0xffff0000u); }
// Part products kept: (i, j) with i + j <= 2, i.e. down to 2^-24 relative (hi·lo, mid·mid, lo·hi).
HLA_HD bool keep_pair(int i, int j) { return i + j <= 2; }

// ---------------------------------------------------------------------------
// Matrix products C = beta·C + alpha·diag(rs)·(A·B) on f32 matrices in memory.
// Operands: element (r, c) of a matrix stored row-major with leading dimension
// ld, or of the transpose of one (trans). M % 16 == 0, N % 8 == 0, K % 16 == 0.
// beta == 0: C is not read (it may hold anything, NaN included).

struct Operand {
  const float* p;
  int ld, trans, parts;
};
HLA_HD float at_a(const Operand& o, int m, int k) { return o.trans ? o.p[k * o.ld + m] : o.p[m * o.ld + k]; }  // A is M x K
HLA_HD float at_b(const Operand& o, int k, int n) { return o.trans ? o.p[n * o.ld + k] : o.p[k * o.ld + n]; }  // B is K x N

struct GemmArgs {
  int M, N, K;
  Operand a, b;
  float* c;
  int ldc;
  float alpha, beta;
  const float* rs;  // row scale, rs[m * rs_stride], or nullptr
  int rs_stride;
};

HLA_HD float epilogue(const GemmArgs& g, int m, int n, float acc) {
  const float s = g.rs ? g.alpha * g.rs[m * g.rs_stride] : g.alpha;
  const float v = s * acc;
  return g.beta == 0.0f ? v : fmaf(g.beta, g.c[m * g.ldc + n], v);
}

// The thread-level backend: `Ctx` supplies tid(), nthreads(), sync() (block
// barrier), atomic_or(int*) and mma(acc[4], a[4], b[2]) — one warp-wide
// mma.m16n8k16 bf16 with f32 accumulation, fragments as in the PTX ISA
// ("Matrix Fragments for mma.m16n8k16 with floating point type"):
//   lane = 4·group + tig;  A (16x16): reg r holds (row group + 8·(r&1), cols 2·tig + 8·(r>>1) + {0,1});
//   B (16x8): reg r holds (rows 2·tig + 8·r + {0,1}, col group);
//   C (16x8): element e is (row group + 8·(e>>1), col 2·tig + (e&1)).
template <class Ctx> struct ThreadBackend {
  Ctx& ctx;

  template <class F> HLA_HD void for_each(int n, F&& f) {
    for (int i = ctx.tid(); i < n; i += ctx.nthreads()) f(i);
    ctx.sync();
  }
  HLA_HD void sync() { ctx.sync(); }
  HLA_HD void set_flag(int* flag) { ctx.atomic_or(flag); }

  // Each warp computes 16 x 32 tiles of C (four m16n8 blocks sharing the A
  // fragment), or narrower ones when there are fewer tiles than warps. Accumulation (see gpu/README.md "Numerics"): tensor cores
  // truncate (round toward zero) when they add into an accumulator, so a
  // chained accumulator collects a biased error of up to one ulp per mma — and
  // adding a small part product (hi·mid, ...) to a large running sum costs
  // more than the part is worth. Hence: the hi·hi product of each 16-long
  // k-block is formed alone (C = 0: one truncation of the block sum) and added
  // to `big` in software (round to nearest); the smaller part products are
  // chained in `small`, whose truncations are 2^-8 smaller; C = big + small.
  HLA_HD void gemm(const GemmArgs& g) {
    const int lane = ctx.tid() & 31, warp = ctx.tid() >> 5, nwarps = ctx.nthreads() >> 5;
    const int group = lane >> 2, tig = lane & 3;
    // Tiles 16 x (8·width): width 4 shares each A fragment among four mma, narrower
    // tiles keep every warp busy on small products (W x W scores at W = 32: 2 wide tiles, 8 narrow).
    const int tiles_m = g.M / 16;
    int width = 4;
    while (width > 1 && tiles_m * ((g.N + 8 * width - 1) / (8 * width)) < nwarps) width /= 2;
    const int tiles_n = (g.N + 8 * width - 1) / (8 * width);
    for (int tile = warp; tile < tiles_m * tiles_n; tile += nwarps) {
      const int m0 = (tile / tiles_n) * 16, n0 = (tile % tiles_n) * 8 * width;
      const int nsub = (g.N - n0) / 8 < width ? (g.N - n0) / 8 : width;  // warp-uniform
      float big[4][4], small[4][4];
      for (int s = 0; s < 4; ++s)
        for (int e = 0; e < 4; ++e) big[s][e] = small[s][e] = 0.0f;
      for (int k0 = 0; k0 < g.K; k0 += 16) {
        uint32_t ar[3][4];
HLA_UNROLL
        for (int r = 0; r < 4; ++r) {
          const int row = m0 + group + 8 * (r & 1), col = k0 + 2 * tig + 8 * (r >> 1);
          float p0[3], p1[3];
          split(at_a(g.a, row, col), g.a.parts, p0);
          split(at_a(g.a, row, col + 1), g.a.parts, p1);
HLA_UNROLL
          for (int i = 0; i < 3; ++i) ar[i][r] = pack2(p0[i], p1[i]);
        }
HLA_UNROLL
        for (int s = 0; s < 4; ++s) {
          if (s >= nsub) break;
          uint32_t br[3][2];
HLA_UNROLL
          for (int r = 0; r < 2; ++r) {
            const int row = k0 + 2 * tig + 8 * r, col = n0 + 8 * s + group;
            float p0[3], p1[3];
            split(at_b(g.b, row, col), g.b.parts, p0);
            split(at_b(g.b, row + 1, col), g.b.parts, p1);
HLA_UNROLL
            for (int j = 0; j < 3; ++j) br[j][r] = pack2(p0[j], p1[j]);
          }
          float block[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          ctx.mma(block, ar[0], br[0]);
HLA_UNROLL
          for (int e = 0; e < 4; ++e) big[s][e] += block[e];
HLA_UNROLL
          for (int i = 0; i < 3; ++i)
HLA_UNROLL
            for (int j = 0; j < 3; ++j)
              if (i + j > 0 && i < g.a.parts && j < g.b.parts && keep_pair(i, j)) ctx.mma(small[s], ar[i], br[j]);
        }
      }
HLA_UNROLL
      for (int s = 0; s < 4; ++s) {
        if (s >= nsub) break;
HLA_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int m = m0 + group + 8 * (e >> 1), n = n0 + 8 * s + 2 * tig + (e & 1);
          g.c[m * g.ldc + n] = epilogue(g, m, n, big[s][e] + small[s][e]);
        }
      }
    }
    ctx.sync();
  }
};

// ---------------------------------------------------------------------------
// One thread block: sequence s, query head h (block index = s·H + h).

template <class BE> struct Block {
  BE& be;
  const Params& P;
  const Plan& pl;
  float* sm;
  int W, dp, wp, d, dv, w;  // w = dv + 1 (value columns and den)
  // Shared buffers.
  float *Q, *K, *V, *A, *A1, *Hs, *R, *U, *X, *G, *O, *pw, *vx, *vy;
  int* flag;
  // Running state (padded, f32, in the workspace).
  float *S0, *S1, *S2;
  int praw, pint, pks;

  HLA_HD Block(BE& b, const Params& p, float* smem, int block)
      : be(b), P(p), pl(p.plan), sm(smem), W(p.plan.W), dp(p.plan.dp), wp(p.plan.wp), d(static_cast<int>(p.D)),
        dv(static_cast<int>(p.Dv)), w(static_cast<int>(p.Dv) + 1) {
    auto at = [&](int off) { return off >= 0 ? sm + off : nullptr; };
    Q = at(pl.q), K = at(pl.k), V = at(pl.v), A = at(pl.a), A1 = at(pl.a1), Hs = at(pl.h), R = at(pl.r), U = at(pl.u);
    X = at(pl.x), G = at(pl.g), O = at(pl.o), pw = at(pl.pw), vx = at(pl.vx), vy = at(pl.vy);
    flag = reinterpret_cast<int*>(sm + pl.flag);
    float* ws = P.ws + static_cast<int64_t>(block) * pl.state;
    S0 = pl.s0 >= 0 ? ws + pl.s0 : nullptr;
    S1 = pl.s1 >= 0 ? ws + pl.s1 : nullptr;
    S2 = pl.s2 >= 0 ? ws + pl.s2 : nullptr;
    praw = P.parts_raw, pint = P.parts_int;
    pks = P.gamma_is_one ? praw : pint;  // decayed inputs are inputs when gamma = 1
  }

  HLA_HD void gemm(int M, int N, int Kd, Operand a, Operand b, float* c, int ldc, float beta, float alpha = 1.0f,
                   const float* rs = nullptr, int rs_stride = 1) {
    be.gemm(GemmArgs{M, N, Kd, a, b, c, ldc, alpha, beta, rs, rs_stride});
  }
  static HLA_HD Operand op(const float* p, int ld, int parts, bool trans = false) { return Operand{p, ld, trans ? 1 : 0, parts}; }

  // Public state layout <-> padded slots. Slot geometry: slot0 d x d in dp x dp,
  // slot1 and slot2 d x w in dp x wp.
  HLA_HD int padded_index(int64_t e) const {
    int64_t base = 0;
    if (pl.s0 >= 0) {
      if (e < static_cast<int64_t>(d) * d) return pl.s0 + static_cast<int>(e / d) * dp + static_cast<int>(e % d);
      base += static_cast<int64_t>(d) * d;
    }
    e -= base;
    const int64_t slot = static_cast<int64_t>(d) * w;
    if (e < slot) return pl.s1 + static_cast<int>(e / w) * wp + static_cast<int>(e % w);
    e -= slot;
    return pl.s2 + static_cast<int>(e / w) * wp + static_cast<int>(e % w);
  }

  HLA_HD void run(int block) {
    const int64_t s = block / P.H, h = block % P.H, hk = h / (P.H / P.Hkv);
    const int64_t b = P.cu ? 0 : s;
    const int64_t t_begin = P.cu ? P.cu[s] : 0, t_end = P.cu ? P.cu[s + 1] : P.T;
    float* ws = P.ws + static_cast<int64_t>(block) * pl.state;

    // Powers of gamma to shared memory; the state from initial_state (or zero), pads zero.
    be.for_each(3 * W + 4, [&](int i) { pw[i] = P.powers[i]; });
    be.for_each(pl.state, [&](int i) { ws[i] = 0.0f; });
    if (P.init) {
      const float* init = P.init + static_cast<int64_t>(block) * P.state_size;
      be.for_each(static_cast<int>(P.state_size), [&](int i) { ws[padded_index(i)] = init[i]; });
    }

    for (int64_t c0 = t_begin; c0 < t_end; c0 += W) {
      const int L = static_cast<int>(t_end - c0 < W ? t_end - c0 : W);
      const int Lp = (L + 15) / 16 * 16;
      load_chunk(b, h, hk, c0, L);
      const bool nonfinite = *flag != 0;
      if (nonfinite) {
        stream_chunk(L);
      } else {
        switch (P.variant) {
          case 0: la1(L, Lp); break;
          case 1: hla2(L, Lp); break;
          case 2: ahla(L, Lp); break;
          default: hla3(L, Lp); break;
        }
      }
      write_outputs(b, h, c0, L);
    }

    if (P.fin) {
      float* fin = P.fin + static_cast<int64_t>(block) * P.state_size;
      be.for_each(static_cast<int>(P.state_size), [&](int i) { fin[i] = ws[padded_index(i)]; });
    }
  }

  // Tokens [c0, c0 + L) of (b, h / hk) to Q, K, V (zero beyond L and beyond d,
  // dv; V's column dv is 1 on the chunk's tokens); *flag = whether any is NaN/Inf.
  HLA_HD void load_chunk(int64_t b, int64_t h, int64_t hk, int64_t c0, int L) {
    be.for_each(1, [&](int) { *flag = 0; });
    be.for_each(W * dp, [&](int e) {
      const int t = e / dp, c = e % dp;
      float qv = 0.0f, kv = 0.0f;
      if (t < L && c < d) {
        const int64_t tok = (b * P.T + c0 + t);
        qv = load_value(P.q, P.dtype, (tok * P.H + h) * P.D + c);
        kv = load_value(P.k, P.dtype, (tok * P.Hkv + hk) * P.D + c);
        if (!finite(qv) || !finite(kv)) be.set_flag(flag);
      }
      Q[e] = qv;
      K[e] = kv;
    });
    be.for_each(W * wp, [&](int e) {
      const int t = e / wp, c = e % wp;
      float x = 0.0f;
      if (t < L) {
        if (c < dv) {
          x = load_value(P.v, P.dtype, ((b * P.T + c0 + t) * P.Hkv + hk) * P.Dv + c);
          if (!finite(x)) be.set_flag(flag);
        } else if (c == dv) {
          x = 1.0f;
        }
      }
      V[e] = x;
    });
  }

  // out (and den) of the chunk's tokens from O: num·scale^p, den·scale^p, normalized.
  HLA_HD void write_outputs(int64_t b, int64_t h, int64_t c0, int L) {
    const float sp = P.out_scale, eps = P.eps;
    be.for_each(L * dv, [&](int e) {
      const int t = e / dv, c = e % dv;
      const float num = O[t * wp + c] * sp, den = O[t * wp + dv] * sp;
      float o = num;
      if (P.normalize) {
        if (!P.clamp) {
          o = num / (den + eps);
        } else {  // sign(den)·max(|den|, eps), sign(0) = +1; a NaN den stays NaN
          const float mag = fabsf(den) < eps ? eps : fabsf(den);
          o = num / (den < 0.0f ? -mag : mag);
        }
      }
      store_value(P.out, P.dtype, ((b * P.T + c0 + t) * P.H + h) * P.Dv + c, o);
    });
    if (P.den) be.for_each(L, [&](int t) { P.den[(b * P.T + c0 + t) * P.H + h] = O[t * wp + dv] * sp; });
  }

  // ---- Chunk forms (SPEC §5). Inside the chunk, tokens t, u, i, j in [0, L),
  // T = L - 1, ρ = γ^L; pw[e] = γ^e; the state slots hold the carry A.

  // A = Q Kᵀ; then A1[t][i] = γ^{t-i} a_ti (i <= t), and, with keep_masked, A[t][i] = a_ti (i <= t), both 0 elsewhere.
  HLA_HD void scores(int L, int Lp, bool keep_masked) {
    gemm(Lp, Lp, dp, op(Q, dp, praw), op(K, dp, praw, true), A, W, 0.0f);
    float* a1 = keep_masked ? A1 : A;
    be.for_each(Lp * Lp, [&](int e) {
      const int t = e / Lp, i = e % Lp;
      const bool in = i <= t && t < L;
      const float a = A[t * W + i];
      a1[t * W + i] = in ? pw[t - i] * a : 0.0f;
      if (keep_masked) A[t * W + i] = in ? a : 0.0f;
    });
  }
  // X[i] = γ^{T-i} k_i (the chunk's keys decayed to its end), 0 beyond L.
  HLA_HD void decayed(const float* src, int L, int Lp) {
    be.for_each(Lp * dp, [&](int e) {
      const int i = e / dp;
      X[e] = i < L ? pw[L - 1 - i] * src[e] : 0.0f;
    });
  }

  // la1: num_t = γ^{t+1} q_tᵀKV + Σ_{i<=t} γ^{t-i} a_ti v'_i;  KV <- ρ KV + Σ_i γ^{T-i} k_i v'_iᵀ.
  HLA_HD void la1(int L, int Lp) {
    float* KV = S1;
    scores(L, Lp, false);
    gemm(Lp, wp, dp, op(Q, dp, praw), op(KV, wp, pint), O, wp, 0.0f, 1.0f, pw + 1, 1);
    gemm(Lp, wp, Lp, op(A, W, pint), op(V, wp, praw), O, wp, 1.0f);
    decayed(K, L, Lp);
    gemm(dp, wp, Lp, op(X, dp, pks, true), op(V, wp, praw), KV, wp, pw[L]);
  }

  // The second-order pieces hla2 and hla3 share, with U = Q S_Aᵀ (S is
  // symmetric only up to rounding, and a state handed in may not be at all:
  // the recurrences use S q):
  //   Hs[t][u] = q_tᵀ S_u q_u = Σ_{i<=u} a_ti γ^{u-i} a_ui + γ^{u+1} q_tᵀ S_A q_u   (S_u: S at token u)
  //   U <- γ^{u+1} U (i.e. rows γ^{u+1} (S_A q_u)ᵀ).
  HLA_HD void second_order(int L, int Lp) {
    scores(L, Lp, true);
    gemm(Lp, dp, dp, op(Q, dp, praw), op(S0, dp, pint, true), U, dp, 0.0f);  // rows (S_A q_u)ᵀ
    be.for_each(Lp * dp, [&](int e) {
      const int u = e / dp;
      U[e] = u < L ? pw[u + 1] * U[e] : 0.0f;
    });
    gemm(Lp, Lp, Lp, op(A, W, pint), op(A1, W, pint, true), Hs, W, 0.0f);
    gemm(Lp, Lp, dp, op(Q, dp, praw), op(U, dp, pint, true), Hs, W, 1.0f);
  }
  // X[u] = γ^{e(T-u)} (S_u q_u)ᵀ = γ^{e(T-u)} (γ^{u+1} S_A q_u + Σ_{i<=u} γ^{u-i} a_ui k_i), e = 2 (hla2) or 3 (hla3).
  HLA_HD void state_rows(int L, int Lp, int e_pow) {
    gemm(Lp, dp, Lp, op(A1, W, pint), op(K, dp, praw), X, dp, 0.0f);
    be.for_each(Lp * dp, [&](int e) {
      const int u = e / dp;
      X[e] = u < L ? pw[e_pow * (L - 1 - u)] * (U[e] + X[e]) : 0.0f;
    });
  }

  // hla2 (masked, corrected state): num_t = γ^{2t+2} q_tᵀF_A + Σ_{u<=t} γ^{2(t-u)} Hs_tu v'_u
  //   + λ (γ^{t+1} q_tᵀC_A + Σ_{u<=t} γ^{t-u} (q_t·q_u) v'_u);
  // F <- ρ²F + Σ_u γ^{2(T-u)} (S_u q_u) v'_uᵀ,  C <- ρC + Σ γ^{T-u} q_u v'_uᵀ,  S <- ρS + Σ γ^{T-i} k_i k_iᵀ.
  HLA_HD void hla2(int L, int Lp) {
    float *S = S0, *C = S1, *F = S2;
    const float lambda = P.lambda;
    second_order(L, Lp);
    if (lambda != 0.0f) gemm(Lp, Lp, dp, op(Q, dp, praw), op(Q, dp, praw, true), R, W, 0.0f);
    be.for_each(Lp * Lp, [&](int e) {
      const int t = e / Lp, u = e % Lp;
      float x = 0.0f;
      if (u <= t && t < L) {
        x = pw[2 * (t - u)] * Hs[t * W + u];
        if (lambda != 0.0f) x += lambda * pw[t - u] * R[t * W + u];
      }
      Hs[t * W + u] = x;
    });
    gemm(Lp, wp, dp, op(Q, dp, praw), op(F, wp, pint), O, wp, 0.0f, 1.0f, pw + 2, 2);
    if (lambda != 0.0f) gemm(Lp, wp, dp, op(Q, dp, praw), op(C, wp, pint), O, wp, 1.0f, lambda, pw + 1, 1);
    gemm(Lp, wp, Lp, op(Hs, W, pint), op(V, wp, praw), O, wp, 1.0f);
    // Carry.
    state_rows(L, Lp, 2);
    gemm(dp, wp, Lp, op(X, dp, pint, true), op(V, wp, praw), F, wp, pw[2 * L]);
    decayed(Q, L, Lp);
    gemm(dp, wp, Lp, op(X, dp, pks, true), op(V, wp, praw), C, wp, pw[L]);
    decayed(K, L, Lp);
    gemm(dp, dp, Lp, op(X, dp, pks, true), op(K, dp, praw), S, dp, pw[L]);
  }

  // ahla: with G[i] = q_iᵀP_i = Σ_{j<=i} γ^{i-j} a_ij v'_j + γ^{i+1} q_iᵀP_A,
  // num_t = γ^{t+1} q_tᵀE_A + Σ_{i<=t} γ^{t-i} a_ti G[i];  E <- ρE + Σ_i γ^{T-i} k_i G[i],  P <- ρP + Σ γ^{T-i} k_i v'_iᵀ.
  HLA_HD void ahla(int L, int Lp) {
    float *P_ = S1, *E = S2;
    scores(L, Lp, false);
    gemm(Lp, wp, Lp, op(A, W, pint), op(V, wp, praw), G, wp, 0.0f);
    gemm(Lp, wp, dp, op(Q, dp, praw), op(P_, wp, pint), G, wp, 1.0f, 1.0f, pw + 1, 1);
    gemm(Lp, wp, dp, op(Q, dp, praw), op(E, wp, pint), O, wp, 0.0f, 1.0f, pw + 1, 1);
    gemm(Lp, wp, Lp, op(A, W, pint), op(G, wp, pint), O, wp, 1.0f);
    decayed(K, L, Lp);
    gemm(dp, wp, Lp, op(X, dp, pks, true), op(G, wp, pint), E, wp, pw[L]);
    gemm(dp, wp, Lp, op(X, dp, pks, true), op(V, wp, praw), P_, wp, pw[L]);
  }

  // hla3 (masked): num_t = q_tᵀF_t with F_t = γ³F_{t-1} + (S_t q_t)(q_tᵀP_t), so
  // num_t = γ^{3t+3} q_tᵀF_A + Σ_{u<=t} γ^{3(t-u)} Hs_tu G[u], G[u] = q_uᵀP_u (as in ahla);
  // F <- ρ³F + Σ_u γ^{3(T-u)} (S_u q_u) G[u],  P <- ρP + Σ γ^{T-i} k_i v'_iᵀ,  S <- ρS + Σ γ^{T-i} k_i k_iᵀ.
  HLA_HD void hla3(int L, int Lp) {
    float *S = S0, *P_ = S1, *F = S2;
    second_order(L, Lp);
    be.for_each(Lp * Lp, [&](int e) {
      const int t = e / Lp, u = e % Lp;
      Hs[t * W + u] = u <= t && t < L ? pw[3 * (t - u)] * Hs[t * W + u] : 0.0f;
    });
    gemm(Lp, wp, Lp, op(A1, W, pint), op(V, wp, praw), G, wp, 0.0f);
    gemm(Lp, wp, dp, op(Q, dp, praw), op(P_, wp, pint), G, wp, 1.0f, 1.0f, pw + 1, 1);
    gemm(Lp, wp, dp, op(Q, dp, praw), op(F, wp, pint), O, wp, 0.0f, 1.0f, pw + 3, 3);
    gemm(Lp, wp, Lp, op(Hs, W, pint), op(G, wp, pint), O, wp, 1.0f);
    // Carry.
    state_rows(L, Lp, 3);
    gemm(dp, wp, Lp, op(X, dp, pint, true), op(G, wp, pint), F, wp, pw[3 * L]);
    decayed(K, L, Lp);
    gemm(dp, wp, Lp, op(X, dp, pks, true), op(V, wp, praw), P_, wp, pw[L]);
    gemm(dp, dp, Lp, op(X, dp, pks, true), op(K, dp, praw), S, dp, pw[L]);
  }

  // ---- A chunk with a NaN/Inf input: the streaming recurrences (SPEC §3),
  // token by token in f32 on the valid extents only. They form only terms of
  // the definition, so a NaN at token j reaches exactly the outputs that depend
  // on it; the matrix form would multiply masked zeros by it (0·NaN = NaN
  // leaking to earlier tokens of the chunk). Same state as the chunk form.
  HLA_HD void stream_chunk(int L) {
    const float g1 = pw[1], g2 = pw[2], g3 = pw[3], lambda = P.lambda;
    const int dd = d * d, dw = d * w;
    for (int t = 0; t < L; ++t) {
      const float *q = Q + t * dp, *k = K + t * dp, *v = V + t * wp;
      float* o = O + t * wp;
      // Row-vector products qᵀM (M d x w, leading dimension wp) into o or vy.
      auto qT = [&](const float* M, int c) {
        float s = 0.0f;
        for (int r = 0; r < d; ++r) s = fmaf(q[r], M[r * wp + c], s);
        return s;
      };
      switch (P.variant) {
        case 0:  // KV = γKV + k v'ᵀ;  num = qᵀKV
          be.for_each(dw, [&](int e) { const int r = e / w, c = e % w; S1[r * wp + c] = fmaf(g1, S1[r * wp + c], k[r] * v[c]); });
          be.for_each(w, [&](int c) { o[c] = qT(S1, c); });
          break;
        case 1:  // S = γS + kkᵀ, C = γC + qv'ᵀ, F = γ²F + (S q) v'ᵀ;  num = qᵀF + λ qᵀC
          be.for_each(dd + dw, [&](int e) {
            if (e < dd) {
              const int r = e / d, c = e % d;
              S0[r * dp + c] = fmaf(g1, S0[r * dp + c], k[r] * k[c]);
            } else {
              const int r = (e - dd) / w, c = (e - dd) % w;
              S1[r * wp + c] = fmaf(g1, S1[r * wp + c], q[r] * v[c]);
            }
          });
          be.for_each(d, [&](int r) {
            float s = 0.0f;
            for (int c = 0; c < d; ++c) s = fmaf(S0[r * dp + c], q[c], s);
            vx[r] = s;
          });
          be.for_each(dw, [&](int e) { const int r = e / w, c = e % w; S2[r * wp + c] = fmaf(g2, S2[r * wp + c], vx[r] * v[c]); });
          be.for_each(w, [&](int c) { o[c] = lambda != 0.0f ? fmaf(lambda, qT(S1, c), qT(S2, c)) : qT(S2, c); });
          break;
        case 2:  // P = γP + k v'ᵀ, E = γE + k (qᵀP);  num = qᵀE
          be.for_each(dw, [&](int e) { const int r = e / w, c = e % w; S1[r * wp + c] = fmaf(g1, S1[r * wp + c], k[r] * v[c]); });
          be.for_each(w, [&](int c) { vy[c] = qT(S1, c); });
          be.for_each(dw, [&](int e) { const int r = e / w, c = e % w; S2[r * wp + c] = fmaf(g1, S2[r * wp + c], k[r] * vy[c]); });
          be.for_each(w, [&](int c) { o[c] = qT(S2, c); });
          break;
        default:  // S = γS + kkᵀ, P = γP + kv'ᵀ, F = γ³F + (S q)(qᵀP);  num = qᵀF
          be.for_each(dd + dw, [&](int e) {
            if (e < dd) {
              const int r = e / d, c = e % d;
              S0[r * dp + c] = fmaf(g1, S0[r * dp + c], k[r] * k[c]);
            } else {
              const int r = (e - dd) / w, c = (e - dd) % w;
              S1[r * wp + c] = fmaf(g1, S1[r * wp + c], k[r] * v[c]);
            }
          });
          be.for_each(d + w, [&](int e) {
            if (e < d) {
              float s = 0.0f;
              for (int c = 0; c < d; ++c) s = fmaf(S0[e * dp + c], q[c], s);
              vx[e] = s;
            } else {
              vy[e - d] = qT(S1, e - d);
            }
          });
          be.for_each(dw, [&](int e) { const int r = e / w, c = e % w; S2[r * wp + c] = fmaf(g3, S2[r * wp + c], vx[r] * vy[c]); });
          be.for_each(w, [&](int c) { o[c] = qT(S2, c); });
          break;
      }
    }
  }
};

template <class BE> HLA_HD void run_block(BE& be, const Params& P, float* smem, int block) {
  Block<BE> blk(be, P, smem, block);
  blk.run(block);
}

}  // namespace hla_cuda::detail
