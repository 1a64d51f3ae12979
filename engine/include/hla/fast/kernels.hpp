// The inner loops of the fast engine (engine.hpp): matrix products and
// elementwise operations in double-double (a value is hi + lo, two doubles
// with |lo| ≤ 2^-53·|hi|, stored as two arrays) and in double.
//
// Compiled three times (kernels.inc: generic x86-64, AVX2+FMA, AVX-512) and
// chosen at run time by what the CPU has. Every element is computed by the same
// sequence of IEEE operations on every target (no contraction; the one fused
// multiply-add is the exact product error of TwoProd, which Dekker's product
// gives exactly where there is no FMA), so the results are bit for bit the
// same on every machine; only the speed differs.
//
// Layout: row-major, `ld` doubles between rows, ld a multiple of kPad with
// the padding columns zero (the kernels work on whole groups of kPad columns).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hla::fast {

using Idx = std::ptrdiff_t;
inline constexpr Idx kPad = 8;
inline constexpr Idx padded(Idx cols) { return (cols + kPad - 1) / kPad * kPad; }

struct Kernels {
  const char* name;
  // C[m×n] += A[m×k]·B[k×n] (n a multiple of kPad). a_lower: A(i, l) = 0 for
  // l > i, so those terms are skipped (the same sums: adding 0 is exact).
  // c_lower: only the tiles of C that meet the lower triangle (j ≤ i) are
  // computed; the others stay as they were. lo_zero: bit 1, A's low parts are
  // all zero; bit 2, B's (their products are skipped: the same result).
  // a_trans: A is stored transposed (k × m, row stride lda): op(A) = Aᵀ.
  // gemm_d fuses each multiply-add (one rounding; every target: FMA or libm's fma).
  void (*gemm_dd)(Idx m, Idx n, Idx k, const double* Ah, const double* Al, Idx lda, bool a_trans, const double* Bh, const double* Bl,
                  Idx ldb, double* Ch, double* Cl, Idx ldc, int lo_zero, bool a_lower, bool c_lower);
  void (*gemm_d)(Idx m, Idx n, Idx k, const double* A, Idx lda, bool a_trans, const double* B, Idx ldb, double* C, Idx ldc, bool a_lower,
                 bool c_lower);
  // x[i] ← x[i]·y[i] over `count` elements (double-double).
  void (*mul_dd)(Idx count, double* xh, double* xl, const double* yh, const double* yl);
  // x[i] ← x[i]·(sh + sl) over `count` elements.
  void (*scale_dd)(Idx count, double* xh, double* xl, double sh, double sl);
  // x[i] ← x[i] + y[i].
  void (*add_dd)(Idx count, double* xh, double* xl, const double* yh, const double* yl);
  // Largest |x[i]| and smallest nonzero |x[i]| (+inf when none); NaN is ignored
  // (engine values are NaN only after an Inf, which the largest shows).
  void (*max_min)(Idx count, const double* x, double& largest, double& smallest_nonzero);

  // Emulated precisions for the checker's baseline: float storage, kind 0 =
  // f32, 1 = bf16, 2 = f16, every product and sum rounded to it (the f32
  // result rounded to nearest even); n a multiple of kPadF for gemm_f.
  void (*gemm_f)(int kind, Idx m, Idx n, Idx k, const float* A, Idx lda, bool a_trans, const float* B, Idx ldb, float* C, Idx ldc,
                 bool a_lower, bool c_lower);
  void (*mul_f)(int kind, Idx count, float* x, const float* y);
  void (*add_f)(int kind, Idx count, float* x, const float* y);
  void (*scale_f)(int kind, Idx count, float* x, float s);
  // A(i, j) = R(R(g·A(i, j)) + R(x_i·y_j)); y_j = Σ_i x_i·A(i, j) in order of i.
  void (*rank1_f)(int kind, Idx rows, Idx cols, float* A, Idx lda, float g, const float* x, const float* y);
  void (*vecmat_f)(int kind, Idx rows, Idx cols, const float* x, const float* A, Idx lda, float* y);
  void (*rank1_d)(Idx rows, Idx cols, double* A, Idx lda, double g, const double* x, const double* y);
  void (*vecmat_d)(Idx rows, Idx cols, const double* x, const double* A, Idx lda, double* y);
};
inline constexpr Idx kPadF = 16;  // float columns per gemm_f tile
// gemm_dd renormalizes its accumulators every kDDBlock steps (matrix.hpp: its error bound).
inline constexpr Idx kDDBlock = 8;

// x to nearest with its Drop low significand bits zero, ties to even, on the bit
// pattern (f32's exponent kept): bf16 drops 16, f16's and tf32's significands 13.
template <int Drop> inline float round_low_bits(float x) {
  std::uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  u += ((1u << (Drop - 1)) - 1u) + ((u >> Drop) & 1u);
  u &= ~((1u << Drop) - 1u);
  float y;
  __builtin_memcpy(&y, &u, 4);
  return y;
}

// The rounding of an f32 result to emulated kind K (0 f32: none; 1 bf16, 2
// f16: to nearest, ties to even, overflow to ±inf), on the bit pattern so that
// it vectorizes. The kernels and scalar code share it.
template <int K> inline float emu_round(float x) {
  if constexpr (K == 0) {
    return x;
  } else if constexpr (K == 1) {
    return round_low_bits<16>(x);
  } else {
    const float a = x < 0 ? -x : x;
    float y = round_low_bits<13>(x);
    const float ya = y < 0 ? -y : y;
    y = ya > 65504.0f ? (x < 0 ? -__builtin_inff() : __builtin_inff()) : y;
    // Below f16's normal range the quantum is 2^-24: round a·2^24 to an integer (RNE).
    const float s = ((a * 0x1p24f + 0x1p23f) - 0x1p23f) * 0x1p-24f;
    const float sub = x < 0 ? -s : s;
    return a < 0x1p-14f ? sub : y;
  }
}

// Tensor-core operands (engine::Precision tf32, bf16+f32, f16+f32): while an
// OperandRounding is alive on this thread, the operands of every f32 product
// (Emu<0>'s gemm) are first rounded to its format, 1 bf16, 2 f16 or 3 tf32
// (f32's exponent, 10 significand bits, to nearest even); sums stay f32. As a
// tensor-core kernel computes, with its states and blocks stored as operands.
inline int& current_operand_format() {
  thread_local int format = 0;
  return format;
}
struct OperandRounding {
  int saved;
  explicit OperandRounding(int format) : saved(current_operand_format()) { current_operand_format() = format; }
  ~OperandRounding() { current_operand_format() = saved; }
  OperandRounding(const OperandRounding&) = delete;
  OperandRounding& operator=(const OperandRounding&) = delete;
};
inline float operand_round(int format, float x) {
  if (format == 1) return emu_round<1>(x);
  if (format == 2) return emu_round<2>(x);
  return format == 3 && x - x == 0 ? round_low_bits<13>(x) : x;  // tf32; inf and NaN as they are
}

// The fastest table this CPU runs (HLA_FAST_KERNELS=generic|avx2|avx512 in
// the environment forces one, for tests and benchmarks).
const Kernels& kernels();
// A named table if this CPU runs it, else nullptr.
const Kernels* kernels_named(const char* name);
// Makes kernels() return this table (nullptr: the automatic choice again); for tests.
void use_kernels(const Kernels* k);

}  // namespace hla::fast
