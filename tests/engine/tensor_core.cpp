// Tensor-core precisions (engine/precision.hpp: tf32, bf16+f32, f16+f32): the
// operand rounding of the fast engine's products against an independent
// rounding by frexp and nearbyint, its thread-local scope, and the names.
#include "hla/engine/precision.hpp"
#include "hla/fast/kernels.hpp"
#include "hla/fast/matrix.hpp"

#include "../../properties/harness.hpp"

#include <cfenv>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

using namespace hla;
using engine::Precision;

namespace {

// The nearest float with a `bits`-bit significand to x (ties to even): x = m·2^e, 1/2 ≤ |m| < 1.
float nearest_with(int bits, float x) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, bits)), e - bits));
}

}  // namespace

TEST_CASE("tensor-core operands: tf32 and bf16 rounding to nearest even, inf and NaN kept", "[fast][tensor_core]") {
  REQUIRE(std::fegetround() == FE_TONEAREST);
  std::mt19937 rng(20261206);
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = bits(rng);
    if (i % 3 == 0) u = (u & ~0x1FFFu) | 0x1000u;  // a tie for tf32
    if (i % 3 == 1) u = (u & ~0xFFFFu) | 0x8000u;  // a tie for bf16
    float x;
    std::memcpy(&x, &u, 4);
    // Normal floats whose rounding stays finite and normal; below, inf and NaN.
    if (!std::isnormal(x) || std::fabs(x) > 1e38f || std::fabs(x) < 1e-37f) continue;
    INFO("x = " << x << " bits " << std::hex << u);
    CHECK(fast::operand_round(3, x) == nearest_with(11, x));
    CHECK(fast::operand_round(1, x) == nearest_with(8, x));
    CHECK(fast::operand_round(0, x) == x);
  }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(fast::operand_round(3, inf) == inf);
  CHECK(fast::operand_round(3, -inf) == -inf);
  CHECK(std::isnan(fast::operand_round(3, std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("tensor-core operands: the format holds on its own thread, within its scope", "[fast][tensor_core]") {
  REQUIRE(fast::current_operand_format() == 0);
  {
    const fast::OperandRounding outer(1);
    CHECK(fast::current_operand_format() == 1);
    {
      const fast::OperandRounding inner(3);
      CHECK(fast::current_operand_format() == 3);
    }
    CHECK(fast::current_operand_format() == 1);
    int other = -1;
    std::thread([&] { other = fast::current_operand_format(); }).join();
    CHECK(other == 0);
  }
  CHECK(fast::current_operand_format() == 0);
}

TEST_CASE("tensor-core precisions: names, unit roundoff, the orders' precision and the operand format", "[fast][tensor_core]") {
  const engine::PrecisionMap m = engine::parse_precision_map("bf16=bf16+f32,f16=f16+f32,f32=tf32");
  CHECK(engine::parse_precision_map(m.str()) == m);
  CHECK(m.of(DType::bf16) == Precision::bf16_f32);
  CHECK(engine::unit_roundoff(Precision::bf16_f32) == engine::unit_roundoff(Precision::bf16));
  CHECK(engine::unit_roundoff(Precision::f16_f32) == engine::unit_roundoff(Precision::f16));
  for (const Precision p : {Precision::tf32, Precision::bf16_f32, Precision::f16_f32}) {
    CHECK(engine::orders_precision(p) == Precision::f32);
    CHECK(engine::tensor_core(p));
  }
  for (const Precision p : {Precision::f64, Precision::f32, Precision::bf16, Precision::f16}) {
    CHECK(engine::orders_precision(p) == p);
    CHECK(engine::operand_format(p) == 0);
    CHECK_FALSE(engine::tensor_core(p));
  }
  CHECK(engine::operand_format(Precision::bf16_f32) == 1);
  CHECK(engine::operand_format(Precision::f16_f32) == 2);
  CHECK(engine::operand_format(Precision::tf32) == 3);
}

TEST_CASE("tensor-core operands: a product under OperandRounding is the f32 product of both operands rounded", "[fast][tensor_core]") {
  using S = fast::Emu<0>;
  auto dense = [](fast::Idx r, fast::Idx c, unsigned seed, int format) {
    fast::Dense<S> m = fast::Dense<S>::zero(r, c);
    std::mt19937 g(seed);
    std::normal_distribution<float> nd;
    for (fast::Idx i = 0; i < r; ++i)
      for (fast::Idx j = 0; j < c; ++j) m.at(i, j) = fast::operand_round(format, nd(g));
    return fast::exact_input(std::move(m), false);
  };
  for (const int format : {1, 2, 3}) {
    for (const bool ta : {false, true}) {
      INFO("format " << format << (ta ? ", A transposed" : ""));
      const auto A = dense(ta ? 33 : 17, ta ? 17 : 33, 1, 0), B = dense(33, 20, 2, 0);
      fast::BMat<S> C;
      {
        const fast::OperandRounding operands(format);
        C = fast::detail::mm(A, ta, B, false);
      }
      const auto rounded = fast::detail::mm(dense(ta ? 33 : 17, ta ? 17 : 33, 1, format), ta, dense(33, 20, 2, format), false);
      CHECK(C.val.x == rounded.val.x);
      CHECK(C.val.x != fast::detail::mm(A, ta, B, false).val.x);
    }
  }
}
