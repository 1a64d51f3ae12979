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
  void (*gemm_dd)(Idx m, Idx n, Idx k, const double* Ah, const double* Al, Idx lda, const double* Bh,
                  const double* Bl, Idx ldb, double* Ch, double* Cl, Idx ldc, int lo_zero, bool a_lower, bool c_lower);
  void (*gemm_d)(Idx m, Idx n, Idx k, const double* A, Idx lda, const double* B, Idx ldb, double* C, Idx ldc,
                 bool a_lower, bool c_lower);
  // x[i] ← x[i]·y[i] over `count` elements (double-double).
  void (*mul_dd)(Idx count, double* xh, double* xl, const double* yh, const double* yl);
  // x[i] ← x[i]·(sh + sl) over `count` elements.
  void (*scale_dd)(Idx count, double* xh, double* xl, double sh, double sl);
  // x[i] ← x[i] + y[i].
  void (*add_dd)(Idx count, double* xh, double* xl, const double* yh, const double* yl);
  // Largest |x[i]| and smallest nonzero |x[i]| (+inf when none); NaN is ignored
  // (engine values are NaN only after an Inf, which the largest shows).
  void (*max_min)(Idx count, const double* x, double& largest, double& smallest_nonzero);
};

// The fastest table this CPU runs (HLA_FAST_KERNELS=generic|avx2|avx512 in
// the environment forces one, for tests and benchmarks).
const Kernels& kernels();
// A named table if this CPU runs it, else nullptr.
const Kernels* kernels_named(const char* name);

}  // namespace hla::fast
