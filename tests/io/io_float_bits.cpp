// Bit-exact conversions between the storage dtypes and double (float_bits.hpp):
// exhaustive over the 16-bit types, checked against Eigen's own half/bfloat16;
// rounding to every dtype against an exhaustive table and the hardware cast.
#include "hla/io/float_bits.hpp"
#include "hla/io/safetensors.hpp"
#include "../../properties/harness.hpp"
#include "io_util.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>
#include <cstring>
#include <limits>
#include <random>

using namespace hla;
using namespace hla::io;
using hla::test::bits;

namespace {

double eigen_value(DType t, std::uint16_t b) {
  if (t == DType::f16) return static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(b));
  return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b));
}

}  // namespace

TEST_CASE("f16 and bf16: every bit pattern decodes exactly and re-encodes to itself", "[io][float_bits]") {
  for (DType t : {DType::f16, DType::bf16}) {
    int infs = 0, nans = 0;
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const double x = decode_float(t, b);
      const auto back = encode_float(t, x);
      INFO(to_string(t) << " pattern 0x" << std::hex << b);
      REQUIRE(back.has_value());
      REQUIRE(*back == b);
      REQUIRE(representable(t, x));
      if (std::isnan(x)) {
        ++nans;
        REQUIRE(std::isnan(eigen_value(t, static_cast<std::uint16_t>(b))));
      } else {
        infs += std::isinf(x);
        // Same value as Eigen's conversion, and the same sign of zero.
        REQUIRE(bits(x) == bits(eigen_value(t, static_cast<std::uint16_t>(b))));
      }
    }
    const int mant = t == DType::f16 ? 10 : 7;
    CHECK(nans == 2 * ((1 << mant) - 1));
    CHECK(infs == 2);
  }
}

TEST_CASE("known values of the 16-bit types", "[io][float_bits]") {
  CHECK(decode_float(DType::f16, 0x0001) == std::ldexp(1.0, -24));  // smallest subnormal
  CHECK(decode_float(DType::f16, 0x03ff) == std::ldexp(1023.0, -24));
  CHECK(decode_float(DType::f16, 0x0400) == std::ldexp(1.0, -14));  // smallest normal
  CHECK(decode_float(DType::f16, 0x3c00) == 1.0);
  CHECK(decode_float(DType::f16, 0x7bff) == 65504.0);
  CHECK(decode_float(DType::f16, 0x7c00) == std::numeric_limits<double>::infinity());
  CHECK(bits(decode_float(DType::f16, 0x8000)) == bits(-0.0));
  CHECK(decode_float(DType::bf16, 0x3f80) == 1.0);
  CHECK(decode_float(DType::bf16, 0x0001) == std::ldexp(1.0, -133));
  CHECK(decode_float(DType::bf16, 0xff80) == -std::numeric_limits<double>::infinity());
}

TEST_CASE("f32 and f64: special and random patterns round-trip bit for bit", "[io][float_bits]") {
  const std::uint32_t specials[] = {0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x3f800000, 0x7f7fffff,
                                    0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7fa00001, 0xffffffff, 0x7f800001};
  auto check32 = [](std::uint32_t b) {
    const double x = decode_float(DType::f32, b);
    INFO("f32 pattern 0x" << std::hex << b);
    REQUIRE(encode_float(DType::f32, x) == std::optional<std::uint64_t>(b));
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isnan(f)) REQUIRE(bits(x) == bits(static_cast<double>(f)));
    else REQUIRE(std::isnan(x));
  };
  for (std::uint32_t b : specials) check32(b);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) check32(static_cast<std::uint32_t>(rng()));
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t b = rng();
    REQUIRE(encode_float(DType::f64, decode_float(DType::f64, b)) == std::optional<std::uint64_t>(b));
  }
}

TEST_CASE("values a dtype cannot hold exactly are refused, as hla::representable says", "[io][float_bits]") {
  const std::pair<DType, double> refused[] = {
      {DType::f32, 0.1},
      {DType::f32, std::ldexp(1.0, -150)},     // below f32's smallest subnormal
      {DType::f32, 1e39},                      // overflow
      {DType::f16, 1 + std::ldexp(1.0, -11)},  // 12 significant bits
      {DType::f16, std::ldexp(1.0, -25)},      // below f16's smallest subnormal
      {DType::f16, std::ldexp(3.0, -25)},      // between subnormals
      {DType::f16, 65520.0},                   // overflow
      {DType::bf16, 1 + std::ldexp(1.0, -8)},  // 9 significant bits
      {DType::bf16, std::ldexp(1.0, -134)},    // below bf16's smallest subnormal
      {DType::bf16, std::ldexp(3.0, -134)},
  };
  for (const auto& refusal : refused) {
    const auto t = refusal.first;  // not a structured binding: the lambda below captures it
    const double x = refusal.second;
    INFO(to_string(t) << " " << x);
    CHECK_FALSE(representable(t, x));
    CHECK_FALSE(encode_float(t, x).has_value());
    hla::test::require_input_error(
        [&] {
          (void)float_tensor(t, {2}, {1.0, x}, "tensor 'q'");
        },
        {"tensor 'q'", "element 1", "not exactly representable in " + to_string(st_dtype(t))});
  }
  CHECK(encode_float(DType::f16, std::ldexp(3.0, -24)) == std::optional<std::uint64_t>(0x0003));
  CHECK(encode_float(DType::bf16, std::ldexp(1.0, -133)) == std::optional<std::uint64_t>(0x0001));
}

TEST_CASE("NaN payloads too long for the target keep the top bits, never become Inf", "[io][float_bits]") {
  const double nan_low_payload = std::bit_cast<double>(std::uint64_t{0x7ff0000000000001});  // sNaN, low bit only
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    const auto b = encode_float(t, nan_low_payload);
    REQUIRE(b.has_value());
    CHECK(std::isnan(decode_float(t, *b)));
  }
}

namespace {

// Rounding to nearest, ties to even, decided from the sorted finite values of
// a 16-bit type (exhaustive, independent of DTypeInfo::round's arithmetic).
double nearest_by_table(DType t, double x) {
  static std::map<DType, std::vector<std::pair<double, std::uint32_t>>> tables;
  auto& v = tables[t];
  if (v.empty()) {
    for (std::uint32_t b = 0; b < 65536; ++b)
      if (const double y = decode_float(t, b); std::isfinite(y) && !(y == 0 && std::signbit(y))) v.push_back({y, b});
    std::sort(v.begin(), v.end());
  }
  const auto hi = std::lower_bound(v.begin(), v.end(), std::make_pair(x, std::uint32_t{0}));
  if (hi != v.end() && hi->first == x) return x;
  const double top = v.back().first, ulp = top - std::prev(v.end(), 2)->first;
  // Beyond the largest finite value: ties at max + ulp/2 go to the even neighbour, 2^(bias+1), i.e. inf.
  if (hi == v.end()) return to_rational(x) >= to_rational(top) + to_rational(ulp) / 2 ? INFINITY : top;
  if (hi == v.begin()) return -nearest_by_table(t, -x);
  const auto lo = std::prev(hi);
  const Rational dl = to_rational(x) - to_rational(lo->first), dh = to_rational(hi->first) - to_rational(x);
  if (dl != dh) return dl < dh ? lo->first : hi->first;
  return (lo->second & 1) == 0 ? lo->first : hi->first;
}

}  // namespace

TEST_CASE("round_to: nearest, ties to even, overflow to inf, in every dtype", "[io][float_bits]") {
  hla::test::prop("round_to(t, x) == the nearest value of t (16-bit types: by table; f32: the hardware cast)", [] {
    // Doubles spread over every binade the formats have, subnormals and overflow included.
    const int e = *rc::gen::inRange(-160, 140);
    const auto m = *rc::gen::inRange<std::int64_t>(0, std::int64_t{1} << 52);
    const double x = std::ldexp(1 + std::ldexp(static_cast<double>(m), -52), e) * (*rc::gen::arbitrary<bool>() ? -1 : 1);
    // Exact ties too: values halfway between two f16 (11 bits) or bf16 (8 bits) neighbours.
    const double tie16 = std::ldexp(std::round(std::ldexp(x, 10 - e)) + 0.5, e - 10);
    const double tie8 = std::ldexp(std::round(std::ldexp(x, 7 - e)) + 0.5, e - 7);
    for (double y : {x, tie16, tie8}) {
      RC_ASSERT(round_to(DType::f64, y) == y);
      RC_ASSERT(round_to(DType::f32, y) == static_cast<double>(static_cast<float>(y)));
      for (DType t : {DType::bf16, DType::f16}) {
        const double r = round_to(t, y), want = nearest_by_table(t, y);
        RC_LOG() << to_string(t) << " " << y << " -> " << r << ", table says " << want << "\n";
        RC_ASSERT((r == want && std::signbit(r) == std::signbit(y)) || (r == 0 && want == 0));
      }
    }
  });
}
