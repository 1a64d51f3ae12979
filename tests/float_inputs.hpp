// Inputs as kernels see them: Gaussian values rounded to f32, held as exact
// rationals (dyadic, exponents spread over about 2^-20 … 2^2). Shared by the
// exact-engine properties and hla_bench_exact, so the benchmark times the
// inputs the properties prove equal.
#pragma once

#include "hla/scalar.hpp"

#include <random>

namespace hla::test {

inline Mat<Rational> gaussian_f32_matrix(std::mt19937_64& rng, Index r, Index c) {
  std::normal_distribution<double> N;
  Mat<Rational> m(r, c);
  for (Index i = 0; i < r; ++i)
    for (Index j = 0; j < c; ++j) m(i, j) = to_rational(static_cast<double>(static_cast<float>(N(rng))));
  return m;
}

}  // namespace hla::test
