// host_test — what can be checked of gpu/ without a GPU:
//   1. the bit-level conversions (bf16, f16) and the exact bf16 split;
//   2. the kernel's thread code (ThreadBackend, mma fragments) simulated on
//      fibers, one per CUDA thread, in a seeded order within each phase,
//      equals the serial emulator bit for bit (the emulator is what
//      `hla fuzz` checks against the reference: tests gpu_emulator_*);
//   3. the emulator against an independent double-precision streaming
//      recurrence (SPEC §3) in the FLA layout: outputs, den, scale, grouped
//      heads, packed sequences, the state (continuation chunk by chunk);
//   4. validate() refuses malformed problems with a message;
//   5. the C ABI wrapper (libhla_cuda_emu.so): layout and state conversion,
//      errors for unsupported problems; libhla_cuda.so loads, and without a
//      device it reports "no CUDA device" as an error (with one: agrees with
//      the emulator).
// Usage: host_test EMU_LIB [CUDA_LIB]
#include "hla_impl.h"
#include "ref_half.hpp"
#include "sim.hpp"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace hla_cuda;
namespace dt = hla_cuda::detail;

int failures = 0, checks = 0;
#define CHECK(cond, ...)                                          \
  do {                                                            \
    ++checks;                                                     \
    if (!(cond)) {                                                \
      ++failures;                                                 \
      std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
    }                                                             \
  } while (0)

// ---------------------------------------------------------------------------
// 1. Conversions.

void test_conversions() {
  // f16: every bit pattern decodes and encodes back (NaNs stay NaN).
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = dt::f16_to_f32(static_cast<uint16_t>(h));
    const uint16_t back = dt::f32_to_f16(f);
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    if (nan ? !std::isnan(f) || (back & 0x7fffu) <= 0x7c00u : back != h) ++bad;
    // The value itself: against the hardware-independent definition.
    if (!nan) {
      const int e = (h >> 10) & 31, m = h & 1023;
      const double mag = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(1024 + m, e - 25);
      if (static_cast<double>(f) != ((h & 0x8000u) ? -mag : mag)) ++bad;
    }
  }
  CHECK(bad == 0, "%d f16 patterns wrong", bad);
  // f32 -> f16 and -> bf16: round to nearest even, against the compiler's _Float16 (else Eigen's half) / an exact midpoint test.
  std::mt19937_64 rng(1);
  bad = 0;
  int bad_bf16 = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if (i % 4 == 0) u = (u & 0x8000ffffu) | ((112u + static_cast<uint32_t>(rng() % 32)) << 23);  // f16 range
    if (i % 8 == 1) u &= 0xffffe000u | 0x1000u;                                                    // ties for f16
    if (i % 8 == 2) u = (u & 0xffff0000u) | 0x8000u;                                               // ties for bf16
    float x;
    std::memcpy(&x, &u, 4);
    if (std::isnan(x)) continue;
    const ref_half h = static_cast<ref_half>(x);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    if (dt::f32_to_f16(x) != hb) ++bad;
    // bf16: the nearer of the two bf16 neighbours, ties to the even one.
    const uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    std::memcpy(&flo, &lo, 4);
    std::memcpy(&fhi, &hi, 4);
    // Above the largest bf16 the upper neighbour is 2^128 (the overflow to inf).
    const double vhi = std::isinf(fhi) || std::isnan(fhi) ? std::copysign(std::ldexp(1.0, 128), x) : fhi;
    if (std::isnan(fhi)) fhi = std::copysign(INFINITY, x);
    const double dlo = std::fabs(static_cast<double>(x) - flo), dhi = std::fabs(vhi - x);
    const float want = std::isinf(x) ? x : dlo < dhi ? flo : dhi < dlo ? fhi : ((lo >> 16) & 1u) ? fhi : flo;
    const float got = dt::bf16_round(x);
    if (!(got == want || (std::isinf(got) && std::isinf(want) && (got > 0) == (want > 0)))) ++bad_bf16;
  }
  CHECK(bad == 0, "%d f32 -> f16 roundings differ from %s", bad, ref_half_name);
  CHECK(bad_bf16 == 0, "%d f32 -> bf16 roundings wrong", bad_bf16);
  // The split: 3 bf16 parts hold an f32 exactly, 2 an f16, 1 a bf16.
  bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = (static_cast<uint32_t>(rng()) & 0x8fffffffu) | 0x30000000u;  // moderate exponents
    float x;
    std::memcpy(&x, &u, 4);
    float p[3];
    dt::split(x, 3, p);
    for (float part : p)
      if (dt::bf16_round(part) != part) ++bad;
    if (static_cast<double>(p[0]) + p[1] + p[2] != static_cast<double>(x)) ++bad;
    const float h = dt::f16_to_f32(static_cast<uint16_t>(rng() & 0x7bffu));
    dt::split(h, 2, p);
    if (static_cast<double>(p[0]) + p[1] != static_cast<double>(h) || p[2] != 0) ++bad;
  }
  CHECK(bad == 0, "%d inexact splits", bad);
}

// ---------------------------------------------------------------------------
// Problems in the FLA layout, host buffers.

struct Problem {
  Options o;
  Args a;
  std::vector<float> q, k, v;     // values (already representable in the dtype)
  std::vector<uint16_t> q16, k16, v16;
  std::vector<int64_t> cu;
  std::vector<float> init;
  std::vector<unsigned char> out;
  std::vector<float> den, fin;

  int64_t S() const { return a.cu_seqlens ? a.num_seqs : a.B; }
  void bind() {  // point a at the buffers
    const bool h16 = a.dtype != DType::f32;
    a.q = h16 ? static_cast<const void*>(q16.data()) : q.data();
    a.k = h16 ? static_cast<const void*>(k16.data()) : k.data();
    a.v = h16 ? static_cast<const void*>(v16.data()) : v.data();
    out.assign(static_cast<size_t>(a.B * a.T * a.H * a.Dv) * (h16 ? 2 : 4), 0);
    a.out = out.data();
    den.assign(static_cast<size_t>(a.B * a.T * a.H), 0.0f);
    a.den = den.data();
    a.cu_seqlens = cu.empty() ? nullptr : cu.data();
    a.num_seqs = cu.empty() ? 0 : static_cast<int64_t>(cu.size()) - 1;
    a.initial_state = init.empty() ? nullptr : init.data();
    fin.assign(static_cast<size_t>(S() * a.H * state_size(o.variant, a.D, a.Dv)), 0.0f);
    a.final_state = fin.data();
  }
  float out_at(int64_t i) const {
    if (a.dtype == DType::f32) {
      float x;
      std::memcpy(&x, &out[static_cast<size_t>(i) * 4], 4);
      return x;
    }
    uint16_t b;
    std::memcpy(&b, &out[static_cast<size_t>(i) * 2], 2);
    return a.dtype == DType::bf16 ? dt::bf16_to_f32(b) : dt::f16_to_f32(b);
  }
};

// Values drawn in [-1, 1], made representable in the dtype; `nonfinite`: one NaN or Inf somewhere.
Problem random_problem(std::mt19937_64& rng, Variant var, DType t, bool varlen, bool state, bool nonfinite) {
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  Problem p;
  p.o.variant = var;
  p.o.gamma = std::vector<double>{1.0, 0.875, 0.5, 0.99}[static_cast<size_t>(pick(rng) % 4)];
  p.o.lambda = var == Variant::hla2 && pick(rng) % 2 ? 0.25 : 0.0;
  p.o.scale = pick(rng) % 2 ? 1.0 : 0.5;
  p.o.chunk = pick(rng) % 2 ? 16 : 32;
  p.a.dtype = t;
  p.a.H = std::vector<int64_t>{1, 2, 4}[static_cast<size_t>(pick(rng) % 3)];
  p.a.Hkv = pick(rng) % 2 ? p.a.H : 1;
  p.a.D = std::vector<int64_t>{3, 8, 16, 20}[static_cast<size_t>(pick(rng) % 4)];
  p.a.Dv = std::vector<int64_t>{1, 5, 16}[static_cast<size_t>(pick(rng) % 3)];
  p.a.T = 1 + pick(rng) % 70;
  p.a.B = varlen ? 1 : 1 + pick(rng) % 2;
  if (varlen && p.a.T >= 3) {
    p.cu = {0, 1 + pick(rng) % (p.a.T - 2), p.a.T};
    if (p.cu[1] >= p.a.T) p.cu[1] = p.a.T - 1;
  }
  auto fill = [&](std::vector<float>& x, std::vector<uint16_t>& x16, size_t n) {
    std::uniform_real_distribution<float> u(-1, 1);
    x.resize(n);
    x16.resize(n);
    for (size_t i = 0; i < n; ++i) {
      float f = u(rng);
      if (t == DType::bf16) x16[i] = dt::f32_to_bf16(f), f = dt::bf16_to_f32(x16[i]);
      if (t == DType::f16) x16[i] = dt::f32_to_f16(f), f = dt::f16_to_f32(x16[i]);
      x[i] = f;
    }
  };
  fill(p.q, p.q16, static_cast<size_t>(p.a.B * p.a.T * p.a.H * p.a.D));
  fill(p.k, p.k16, static_cast<size_t>(p.a.B * p.a.T * p.a.Hkv * p.a.D));
  fill(p.v, p.v16, static_cast<size_t>(p.a.B * p.a.T * p.a.Hkv * p.a.Dv));
  if (nonfinite) {
    auto& x = pick(rng) % 3 == 0 ? p.q : pick(rng) % 2 ? p.k : p.v;
    auto& x16 = &x == &p.q ? p.q16 : &x == &p.k ? p.k16 : p.v16;
    const size_t i = static_cast<size_t>(pick(rng)) % x.size();
    x[i] = pick(rng) % 2 ? NAN : INFINITY;
    x16[i] = t == DType::bf16 ? dt::f32_to_bf16(x[i]) : dt::f32_to_f16(x[i]);
  }
  if (state) {
    std::uniform_real_distribution<float> u(-0.5f, 0.5f);
    const int64_t S = varlen && !p.cu.empty() ? static_cast<int64_t>(p.cu.size()) - 1 : p.a.B;
    p.init.resize(static_cast<size_t>(S * p.a.H * state_size(var, p.a.D, p.a.Dv)));
    for (auto& x : p.init) x = u(rng);
  }
  p.bind();
  return p;
}

// ---------------------------------------------------------------------------
// 3. The reference: SPEC §3 recurrences in double, per (sequence, head), on
// unscaled q; outputs scaled by scale^order. With absolute values it gives the
// magnitude M of SPEC §7.

struct RefOut {
  std::vector<double> num, den, fin;  // num [B,T,H,Dv], den [B,T,H], fin like Args::final_state
};

RefOut reference(const Problem& p, bool absolute) {
  const Args& a = p.a;
  const int64_t D = a.D, w = a.Dv + 1, S = p.S(), ss = state_size(p.o.variant, D, a.Dv);
  const double g = p.o.gamma, lam = p.o.lambda;
  const int order = p.o.variant == Variant::la1 ? 1 : p.o.variant == Variant::hla3 ? 3 : 2;
  const double sp = std::pow(absolute ? std::fabs(p.o.scale) : p.o.scale, order);
  auto f = [&](float x) { return absolute ? std::fabs(static_cast<double>(x)) : static_cast<double>(x); };
  RefOut r;
  r.num.assign(static_cast<size_t>(a.B * a.T * a.H * a.Dv), 0);
  r.den.assign(static_cast<size_t>(a.B * a.T * a.H), 0);
  r.fin.assign(static_cast<size_t>(S * a.H * ss), 0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < a.H; ++h) {
      const int64_t hk = h / (a.H / a.Hkv), b = a.cu_seqlens ? 0 : s;
      const int64_t t0 = a.cu_seqlens ? p.cu[static_cast<size_t>(s)] : 0, t1 = a.cu_seqlens ? p.cu[static_cast<size_t>(s) + 1] : a.T;
      std::vector<double> st(static_cast<size_t>(ss), 0.0);
      if (a.initial_state)
        for (int64_t i = 0; i < ss; ++i) st[static_cast<size_t>(i)] = f(p.init[static_cast<size_t>((s * a.H + h) * ss + i)]);
      const bool has_s = p.o.variant == Variant::hla2 || p.o.variant == Variant::hla3;
      double* S0 = has_s ? st.data() : nullptr;
      double* S1 = st.data() + (has_s ? D * D : 0);
      double* S2 = S1 + D * w;
      std::vector<double> q(static_cast<size_t>(D)), k(static_cast<size_t>(D)), v(static_cast<size_t>(w)), x(static_cast<size_t>(D)),
          y(static_cast<size_t>(w)), o(static_cast<size_t>(w));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t tok = b * a.T + t;
        for (int64_t c = 0; c < D; ++c)
          q[static_cast<size_t>(c)] = f(p.q[static_cast<size_t>((tok * a.H + h) * D + c)]),
          k[static_cast<size_t>(c)] = f(p.k[static_cast<size_t>((tok * a.Hkv + hk) * D + c)]);
        for (int64_t c = 0; c < a.Dv; ++c) v[static_cast<size_t>(c)] = f(p.v[static_cast<size_t>((tok * a.Hkv + hk) * a.Dv + c)]);
        v[static_cast<size_t>(a.Dv)] = 1;
        auto qT = [&](const double* M, int64_t c) {
          double z = 0;
          for (int64_t r2 = 0; r2 < D; ++r2) z += q[static_cast<size_t>(r2)] * M[r2 * w + c];
          return z;
        };
        auto outer = [&](double* M, double decay, const std::vector<double>& l, const std::vector<double>& rr, int64_t cols) {
          for (int64_t r2 = 0; r2 < D; ++r2)
            for (int64_t c = 0; c < cols; ++c) M[r2 * cols + c] = decay * M[r2 * cols + c] + l[static_cast<size_t>(r2)] * rr[static_cast<size_t>(c)];
        };
        auto S0_times_q = [&] {  // x = S0·q (hla2's and hla3's S_t q_t)
          for (int64_t r2 = 0; r2 < D; ++r2) {
            double z = 0;
            for (int64_t c = 0; c < D; ++c) z += S0[r2 * D + c] * q[static_cast<size_t>(c)];
            x[static_cast<size_t>(r2)] = z;
          }
        };
        switch (p.o.variant) {
          case Variant::la1:
            outer(S1, g, k, v, w);
            for (int64_t c = 0; c < w; ++c) o[static_cast<size_t>(c)] = qT(S1, c);
            break;
          case Variant::hla2:
            outer(S0, g, k, k, D);
            outer(S1, g, q, v, w);
            S0_times_q();
            outer(S2, g * g, x, v, w);
            for (int64_t c = 0; c < w; ++c) o[static_cast<size_t>(c)] = qT(S2, c) + lam * qT(S1, c);
            break;
          case Variant::ahla:
            outer(S1, g, k, v, w);
            for (int64_t c = 0; c < w; ++c) y[static_cast<size_t>(c)] = qT(S1, c);
            outer(S2, g, k, y, w);
            for (int64_t c = 0; c < w; ++c) o[static_cast<size_t>(c)] = qT(S2, c);
            break;
          case Variant::hla3:
            outer(S0, g, k, k, D);
            outer(S1, g, k, v, w);
            S0_times_q();
            for (int64_t c = 0; c < w; ++c) y[static_cast<size_t>(c)] = qT(S1, c);
            outer(S2, g * g * g, x, y, w);
            for (int64_t c = 0; c < w; ++c) o[static_cast<size_t>(c)] = qT(S2, c);
            break;
        }
        for (int64_t c = 0; c < a.Dv; ++c) r.num[static_cast<size_t>((tok * a.H + h) * a.Dv + c)] = sp * o[static_cast<size_t>(c)];
        r.den[static_cast<size_t>(tok * a.H + h)] = sp * o[static_cast<size_t>(a.Dv)];
      }
      for (int64_t i = 0; i < ss; ++i) r.fin[static_cast<size_t>((s * a.H + h) * ss + i)] = st[static_cast<size_t>(i)];
    }
  return r;
}

// ---------------------------------------------------------------------------
// 2. Simulated thread code == serial emulator, bit for bit.

bool same_bytes(const Problem& x, const Problem& y) {
  return x.out == y.out && std::memcmp(x.den.data(), y.den.data(), x.den.size() * 4) == 0 &&
         std::memcmp(x.fin.data(), y.fin.data(), x.fin.size() * 4) == 0;
}

void test_simulated_equals_emulated() {
  std::mt19937_64 rng(7);
  int cases = 0;
  for (int v = 0; v < 4; ++v)
    for (int t = 1; t <= 3; ++t)
      for (int variant_case = 0; variant_case < 3; ++variant_case) {
        const bool varlen = variant_case == 1, nonfinite = variant_case == 2;
        Problem p = random_problem(rng, static_cast<Variant>(v), static_cast<DType>(t), varlen, v % 2 == 0, nonfinite);
        p.o.normalize = variant_case == 0 && t == 2;
        p.o.eps_mode = t == 3 ? EpsMode::clamp : EpsMode::add;
        if (rng() % 3 == 0) p.o.precision = Precision::bf16;
        Problem s = p;
        s.bind();
        const std::string e1 = forward_emulated(p.o, p.a);
        const std::string e2 = sim::forward_simulated(s.o, s.a, rng() % 2 ? 64 : 256, /*seed=*/static_cast<uint64_t>(cases));
        CHECK(e1.empty() && e2.empty(), "%s / %s", e1.c_str(), e2.c_str());
        CHECK(same_bytes(p, s), "variant %d dtype %d case %d: simulated device code differs from the emulator (T=%lld D=%lld Dv=%lld)", v, t,
              variant_case, static_cast<long long>(p.a.T), static_cast<long long>(p.a.D), static_cast<long long>(p.a.Dv));
        ++cases;
      }
  std::printf("simulated == emulated: %d problems\n", cases);
}

// ---------------------------------------------------------------------------
// 3. Emulator against the double reference (f32 inputs and outputs: the error
// is the kernel's own, a small multiple of 2^-24 M).

double worst_error(const Problem& p, const RefOut& r, const RefOut& mag) {
  double worst = 0;
  for (size_t i = 0; i < r.num.size(); ++i) {
    const double e = std::fabs(p.out_at(static_cast<int64_t>(i)) - r.num[i]) / (mag.num[i] + 1e-30);
    worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  }
  for (size_t i = 0; i < r.den.size(); ++i) worst = std::max(worst, std::fabs(p.den[i] - r.den[i]) / (mag.den[i] + 1e-30));
  return worst;
}

void test_against_reference() {
  std::mt19937_64 rng(11);
  double worst = 0;
  for (int c = 0; c < 160; ++c) {
    const auto var = static_cast<Variant>(c % 4);
    Problem p = random_problem(rng, var, DType::f32, c % 5 == 1, c % 3 == 0, false);
    if (c % 7 == 0) p.o.chunk = 0;  // the automatic width
    const std::string e = forward_emulated(p.o, p.a);
    CHECK(e.empty(), "%s", e.c_str());
    const RefOut r = reference(p, false), mag = reference(p, true);
    const double err = worst_error(p, r, mag);
    worst = std::max(worst, err);
    CHECK(err < 2e-5, "case %d (variant %d, T=%lld, D=%lld, Dv=%lld, gamma %g): error %.3g x magnitude", c, c % 4,
          static_cast<long long>(p.a.T), static_cast<long long>(p.a.D), static_cast<long long>(p.a.Dv), p.o.gamma, err);
    double state_err = 0;
    for (size_t i = 0; i < r.fin.size(); ++i) state_err = std::max(state_err, std::fabs(p.fin[i] - r.fin[i]) / (mag.fin[i] + 1e-30));
    CHECK(state_err < 2e-5, "case %d: final state error %.3g x magnitude", c, state_err);
  }
  std::printf("emulator vs double reference: worst error %.3g x magnitude (2^-24 = 6e-8)\n", worst);

  // Normalized outputs, against num / (den + eps) or the clamp, where den is well away from 0 (positive inputs).
  for (int c = 0; c < 16; ++c) {
    Problem p = random_problem(rng, static_cast<Variant>(c % 4), DType::f32, false, false, false);
    for (auto* x : {&p.q, &p.k, &p.v})
      for (auto& y : *x) y = std::fabs(y) + 0.1f;
    p.o.normalize = true;
    p.o.eps_mode = c % 2 ? EpsMode::clamp : EpsMode::add;
    p.bind();
    CHECK(forward_emulated(p.o, p.a).empty(), "normalize");
    const RefOut r = reference(p, false);
    double worst_n = 0;
    for (size_t i = 0; i < r.num.size(); ++i) {
      const double den = r.den[i / static_cast<size_t>(p.a.Dv)];
      const double want = r.num[i] / (p.o.eps_mode == EpsMode::add ? den + p.o.eps : std::max(den, p.o.eps));
      worst_n = std::max(worst_n, std::fabs(p.out_at(static_cast<int64_t>(i)) - want) / std::fabs(want));
    }
    CHECK(worst_n < 1e-4, "normalized case %d: relative error %.3g", c, worst_n);
  }

  // Continuation: tokens [0, m) with the final state, then [m, T) from it == one pass (within rounding).
  for (int c = 0; c < 24; ++c) {
    Problem p = random_problem(rng, static_cast<Variant>(c % 4), DType::f32, false, c % 2 == 0, false);
    if (p.a.T < 4) continue;
    CHECK(forward_emulated(p.o, p.a).empty(), "one pass");
    const int64_t m = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(p.a.T - 1));
    auto part = [&](int64_t t0, int64_t t1, const std::vector<float>* init) {
      Problem x = p;
      x.a.T = t1 - t0;
      auto slice = [&](const std::vector<float>& src, int64_t heads, int64_t width) {
        std::vector<float> dst;
        for (int64_t b = 0; b < p.a.B; ++b)
          for (int64_t t = t0; t < t1; ++t)
            for (int64_t i = 0; i < heads * width; ++i) dst.push_back(src[static_cast<size_t>((b * p.a.T + t) * heads * width + i)]);
        return dst;
      };
      x.q = slice(p.q, p.a.H, p.a.D), x.k = slice(p.k, p.a.Hkv, p.a.D), x.v = slice(p.v, p.a.Hkv, p.a.Dv);
      x.init = init ? *init : p.init;
      x.bind();
      CHECK(forward_emulated(x.o, x.a).empty(), "part");
      return x;
    };
    const Problem first = part(0, m, nullptr), second = part(m, p.a.T, &first.fin);
    const RefOut mag = reference(p, true);
    double worst_c = 0;
    for (int64_t b = 0; b < p.a.B; ++b)
      for (int64_t t = m; t < p.a.T; ++t)
        for (int64_t i = 0; i < p.a.H * p.a.Dv; ++i) {
          const int64_t whole = (b * p.a.T + t) * p.a.H * p.a.Dv + i, split = (b * (p.a.T - m) + t - m) * p.a.H * p.a.Dv + i;
          worst_c = std::max(worst_c, std::fabs(second.out_at(split) - p.out_at(whole)) / (mag.num[static_cast<size_t>(whole)] + 1e-30));
        }
    double worst_s = 0;
    const RefOut rs = reference(p, true);
    for (size_t i = 0; i < p.fin.size(); ++i) worst_s = std::max(worst_s, std::fabs(second.fin[i] - p.fin[i]) / (rs.fin[i] + 1e-30));
    CHECK(worst_c < 2e-5 && worst_s < 2e-5, "continuation case %d at %lld: outputs %.3g, state %.3g x magnitude", c,
          static_cast<long long>(m), worst_c, worst_s);
  }
}

// A NaN in token j reaches no output before j (SPEC §7), and no output of another sequence.
void test_nonfinite_causality() {
  std::mt19937_64 rng(5);
  int bad = 0;
  for (int c = 0; c < 80; ++c) {
    const auto var = static_cast<Variant>(c % 4);
    Problem p = random_problem(rng, var, static_cast<DType>(1 + c % 3), false, false, false);
    const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(p.a.T));
    auto& x = c % 3 == 0 ? p.q : c % 3 == 1 ? p.k : p.v;
    auto& x16 = c % 3 == 0 ? p.q16 : c % 3 == 1 ? p.k16 : p.v16;
    const int64_t row = static_cast<int64_t>(x.size()) / (p.a.B * p.a.T);
    const size_t at = static_cast<size_t>(j * row + static_cast<int64_t>(rng() % static_cast<uint64_t>(row)));  // batch entry 0
    x[at] = NAN;
    x16[at] = 0x7fc0;  // NaN in bf16 and f16 alike
    p.bind();
    CHECK(forward_emulated(p.o, p.a).empty(), "nan");
    for (int64_t t = 0; t < j; ++t)
      for (int64_t i = 0; i < p.a.H * p.a.Dv; ++i)
        if (!std::isfinite(p.out_at(t * p.a.H * p.a.Dv + i))) ++bad;
  }
  CHECK(bad == 0, "%d outputs before a NaN token are not finite", bad);
}

// ---------------------------------------------------------------------------
// 4. validate().

void test_validate() {
  Options o;
  Args a;
  a.T = 4, a.D = 8, a.Dv = 8;
  float dummy[512] = {};
  a.q = a.k = a.v = dummy;
  a.out = dummy;
  CHECK(validate(o, a).empty(), "a good problem: %s", validate(o, a).c_str());
  auto refused = [&](std::function<void(Options&, Args&)> edit, const char* words) {
    Options o2 = o;
    Args a2 = a;
    edit(o2, a2);
    const std::string e = validate(o2, a2);
    CHECK(e.find(words) != std::string::npos, "expected a message with '%s', got '%s'", words, e.c_str());
  };
  refused([](Options& x, Args&) { x.gamma = 0; }, "gamma");
  refused([](Options& x, Args&) { x.gamma = 1.5; }, "gamma");
  refused([](Options& x, Args&) { x.variant = Variant::la1, x.lambda = 1; }, "hla2 only");
  refused([](Options& x, Args&) { x.normalize = true, x.eps = 0; }, "eps");
  refused([](Options& x, Args&) { x.chunk = 24; }, "chunk");
  refused([](Options&, Args& y) { y.H = 3, y.Hkv = 2; }, "multiple");
  refused([](Options&, Args& y) { y.D = 257; }, "at most 256");
  refused([](Options&, Args& y) { y.dtype = static_cast<DType>(0); }, "dtype");
  refused([](Options&, Args& y) { y.q = nullptr; }, "must be given");
  refused([](Options&, Args& y) {
    static const int64_t cu[] = {0, 2, 4};
    y.B = 2, y.cu_seqlens = cu, y.num_seqs = 2;
  }, "B == 1");
  CHECK(state_size(Variant::hla2, 8, 4) == 64 + 2 * 8 * 5, "state size");
  CHECK(workspace_bytes(o, a) == static_cast<size_t>(16 * 16 + 2 * 16 * 16) * 4, "workspace %zu", workspace_bytes(o, a));
}

// ---------------------------------------------------------------------------
// 5. The C ABI libraries.

struct Lib {
  void* h = nullptr;
  decltype(&hla_impl_info_get) info = nullptr;
  decltype(&hla_impl_run) run = nullptr;
  decltype(&hla_impl_state_size) state_size = nullptr;
  explicit Lib(const char* path) {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    info = reinterpret_cast<decltype(info)>(dlsym(h, "hla_impl_info_get"));
    run = reinterpret_cast<decltype(run)>(dlsym(h, "hla_impl_run"));
    state_size = reinterpret_cast<decltype(state_size)>(dlsym(h, "hla_impl_state_size"));
  }
};

// The ABI's [B, H, n, d] buffers of an FLA problem, and an hla_problem on them.
struct AbiProblem {
  std::vector<unsigned char> q, k, v, out;
  std::vector<double> den, state_in, state_out;
  hla_problem hp{};
  AbiProblem(const Problem& p, const Lib& lib) {
    const Args& a = p.a;
    const size_t es = a.dtype == DType::f32 ? 4 : 2;
    auto to_abi = [&](const void* src, int64_t X, int64_t c, std::vector<unsigned char>& dst) {
      dst.resize(static_cast<size_t>(a.B * X * a.T * c) * es);
      for (int64_t b = 0; b < a.B; ++b)
        for (int64_t x = 0; x < X; ++x)
          for (int64_t t = 0; t < a.T; ++t)
            std::memcpy(&dst[static_cast<size_t>(((b * X + x) * a.T + t) * c) * es],
                        static_cast<const unsigned char*>(src) + static_cast<size_t>(((b * a.T + t) * X + x) * c) * es, static_cast<size_t>(c) * es);
    };
    to_abi(a.q, a.H, a.D, q);
    to_abi(a.k, a.Hkv, a.D, k);
    to_abi(a.v, a.Hkv, a.Dv, v);
    out.assign(static_cast<size_t>(a.B * a.H * a.T * a.Dv) * es, 0);
    den.assign(static_cast<size_t>(a.B * a.H * a.T), 0);
    hp.abi_version = lib.info()->abi_version;
    hp.variant = static_cast<int32_t>(p.o.variant);
    hp.masked = 1;
    hp.normalize = p.o.normalize;
    hp.eps_mode = p.o.eps_mode == EpsMode::clamp ? HLA_EPS_CLAMP : HLA_EPS_ADD;
    hp.gamma = p.o.gamma, hp.eps = p.o.eps, hp.lambda = p.o.lambda, hp.scale = p.o.scale;
    hp.batch = a.B, hp.heads = a.H, hp.kv_heads = a.Hkv, hp.n = a.T, hp.d = a.D, hp.dv = a.Dv;
    hp.dtype = static_cast<int32_t>(a.dtype);
    hp.q = q.data(), hp.k = k.data(), hp.v = v.data(), hp.out = out.data(), hp.den = den.data();
    hp.offsets = p.cu.empty() ? nullptr : p.cu.data();
    hp.num_offsets = static_cast<int64_t>(p.cu.size());
    const int64_t ss = lib.state_size(&hp), S = p.S();
    // ABI order (batch, head, sequence): with offsets (h, s), else (b, h) — the kernel's [S][H] reordered.
    auto abi_block = [&](int64_t s, int64_t h) { return p.cu.empty() ? s * a.H + h : h * S + s; };
    if (!p.init.empty()) {
      state_in.resize(static_cast<size_t>(S * a.H * ss));
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < a.H; ++h)
          for (int64_t i = 0; i < ss; ++i)
            state_in[static_cast<size_t>(abi_block(s, h) * ss + i)] = p.init[static_cast<size_t>((s * a.H + h) * ss + i)];
      hp.state_in = state_in.data();
    }
    state_out.assign(static_cast<size_t>(S * a.H * ss), 0);
    hp.state_out = state_out.data();
  }
  // Whether the ABI outputs are exactly the FLA ones of p, reordered.
  bool matches(const Problem& p) const {
    const Args& a = p.a;
    const size_t es = a.dtype == DType::f32 ? 4 : 2;
    for (int64_t b = 0; b < a.B; ++b)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t t = 0; t < a.T; ++t) {
          if (std::memcmp(&out[static_cast<size_t>(((b * a.H + h) * a.T + t) * a.Dv) * es],
                          &p.out[static_cast<size_t>(((b * a.T + t) * a.H + h) * a.Dv) * es], static_cast<size_t>(a.Dv) * es) != 0)
            return false;
          if (den[static_cast<size_t>((b * a.H + h) * a.T + t)] != static_cast<double>(p.den[static_cast<size_t>((b * a.T + t) * a.H + h)]))
            return false;
        }
    const int64_t ss = state_size(p.o.variant, a.D, a.Dv), S = p.S();
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < a.H; ++h)
        for (int64_t i = 0; i < ss; ++i) {
          const int64_t abi = (p.cu.empty() ? s * a.H + h : h * S + s) * ss + i;
          if (state_out[static_cast<size_t>(abi)] != static_cast<double>(p.fin[static_cast<size_t>((s * a.H + h) * ss + i)])) return false;
        }
    return true;
  }
};

void test_cabi(const char* emu_path, const char* cuda_path) {
  Lib emu(emu_path);
  CHECK(emu.h && emu.info && emu.run && emu.state_size, "cannot load %s: %s", emu_path, dlerror());
  if (!emu.h) return;
  const hla_impl_info* in = emu.info();
  CHECK(in->abi_version == HLA_IMPL_ABI_VERSION && std::string(in->precision) == "f32" && in->form_class == HLA_CLASS_MASKED,
        "emulator info");
  std::mt19937_64 rng(3);
  char msg[1024];
  for (int c = 0; c < 24; ++c) {
    Problem p = random_problem(rng, static_cast<Variant>(c % 4), static_cast<DType>(1 + c % 3), c % 3 == 1, c % 2 == 0, false);
    p.o.normalize = c % 4 == 3;
    p.o.chunk = 0;  // what the library runs
    CHECK(forward_emulated(p.o, p.a).empty(), "C++ API");
    AbiProblem ap(p, emu);
    const int rc = emu.run(&ap.hp, msg, sizeof msg);
    CHECK(rc == 0, "hla_impl_run: %s", msg);
    CHECK(rc != 0 || ap.matches(p), "case %d: the C ABI's outputs are not the C++ API's, reordered", c);
  }
  // Unsupported problems: an error with a message, never a crash.
  {
    Problem p = random_problem(rng, Variant::hla2, DType::f32, false, false, false);
    AbiProblem ap(p, emu);
    std::vector<double> f64(1024);
    auto refused = [&](std::function<void(hla_problem&)> edit, const char* words) {
      hla_problem x = ap.hp;
      edit(x);
      msg[0] = 0;
      const int rc = emu.run(&x, msg, sizeof msg);
      CHECK(rc != 0 && std::strstr(msg, words), "expected an error with '%s', got %d '%s'", words, rc, msg);
    };
    refused([](hla_problem& x) { x.dtype = HLA_F64; }, "dtype");
    refused([](hla_problem& x) { x.variant = HLA_HLA3_PAPER; }, "variant");
    refused([](hla_problem& x) { x.masked = 0; }, "unmasked");
    refused([](hla_problem& x) { x.heads = 3, x.kv_heads = 2; }, "multiple");
    refused([](hla_problem& x) { x.lambda = 0.5, x.variant = HLA_AHLA; }, "lambda");
    static const int64_t bad_offsets[] = {0, 5, 3};
    refused([&](hla_problem& x) { x.offsets = bad_offsets, x.num_offsets = 3, x.n = 3, x.batch = 1; }, "offsets");
    CHECK(emu.run(nullptr, msg, sizeof msg) != 0, "null problem");
  }

  if (!cuda_path) return;
  Lib cuda(cuda_path);
  CHECK(cuda.h && cuda.info && cuda.run && cuda.state_size, "cannot load %s: %s", cuda_path, dlerror());
  if (!cuda.h) return;
  CHECK(cuda.info()->variants == in->variants && cuda.info()->features == in->features && cuda.info()->dtypes == in->dtypes,
        "the GPU library declares what the emulator does");
  Problem p = random_problem(rng, Variant::hla2, DType::bf16, false, true, false);
  AbiProblem ap(p, cuda);
  msg[0] = 0;
  const int rc = cuda.run(&ap.hp, msg, sizeof msg);
  // Without a device the library must say so (an error, not a crash); with one it must compute.
  if (rc != 0) {
    CHECK(std::strstr(msg, "no CUDA device") != nullptr, "libhla_cuda failed: '%s'", msg);
    std::printf("libhla_cuda without a device: \"%s\"\n", msg);
  } else {
    CHECK(rc == 0, "on the device: %s", msg);
    p.o.chunk = 0;
    CHECK(forward_emulated(p.o, p.a).empty(), "emulated");
    const RefOut mag = reference(p, true);
    double worst = 0;
    const size_t es = 2;
    for (int64_t b = 0; b < p.a.B; ++b)
      for (int64_t h = 0; h < p.a.H; ++h)
        for (int64_t t = 0; t < p.a.T; ++t)
          for (int64_t c = 0; c < p.a.Dv; ++c) {
            uint16_t g;
            std::memcpy(&g, &ap.out[static_cast<size_t>(((b * p.a.H + h) * p.a.T + t) * p.a.Dv + c) * es], 2);
            const int64_t i = ((b * p.a.T + t) * p.a.H + h) * p.a.Dv + c;
            worst = std::max(worst, std::fabs(dt::bf16_to_f32(g) - p.out_at(i)) / (mag.num[static_cast<size_t>(i)] + 1e-30));
          }
    CHECK(worst < 1e-2, "device vs emulator: %.3g x magnitude (bf16 outputs)", worst);
    std::printf("libhla_cuda on the device vs the emulator: %.3g x magnitude\n", worst);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: host_test EMU_LIB [CUDA_LIB]\n");
    return 2;
  }
  test_conversions();
  test_validate();
  test_against_reference();
  test_nonfinite_causality();
  test_simulated_equals_emulated();
  test_cabi(argv[1], argc > 2 ? argv[2] : nullptr);
  std::printf("%d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
