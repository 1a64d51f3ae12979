// Speed baseline for hla2 masked, d = dv = 64: time per token of
// the streaming form in double, binary128 and exact rationals; the naive
// form's time for n ≤ 512; fitted exponents of time vs n. Ratios are measured
// in this one run; nothing here is asserted.
#include "hla/evaluate.hpp"

#include "median_time.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

using namespace hla;

namespace {

constexpr Index kD = 64;

Problem<Rational> make_problem(Index n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto m = [&](Index r, Index c) {
    Mat<Rational> x(r, c);
    for (Index i = 0; i < r; ++i)
      for (Index j = 0; j < c; ++j) x(i, j) = Rational(static_cast<long>(rng() % 17) - 8, 64);
    return x;
  };
  Options o;
  o.variant = Variant::hla2;
  o.gamma = Rational(63, 64);
  Problem<Rational> p{o, m(n, kD), m(n, kD), Mat<Rational>()};
  p.v = m(n, kD);
  return p;
}

template <class S> double time_form(const Problem<Rational>& p, Form f, int reps) {
  const Problem<S> ps = convert_problem<S>(p);
  return bench::median_seconds([&] { (void)evaluate(ps, f, 64); }, reps);
}

// Least-squares slope of log t against log n.
double fitted_exponent(const std::vector<Index>& ns, const std::vector<double>& ts) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double k = static_cast<double>(ns.size());
  for (size_t i = 0; i < ns.size(); ++i) {
    const double x = std::log(static_cast<double>(ns[i])), y = std::log(ts[i]);
    sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  return (k * sxy - sx * sy) / (k * sxx - sx * sx);
}

}  // namespace

int main() {
  std::printf("hla2 masked, d = dv = %ld, gamma = 63/64; times are medians; us = microseconds\n\n", static_cast<long>(kD));

  std::printf("streaming form, time per token:\n%8s %12s %12s %14s %10s %16s\n", "n", "f64 us/tok", "f113 us/tok",
              "f113/f64", "chunked64", "f64 chunk/stream");
  std::vector<Index> ns{256, 1024, 4096};
  std::vector<double> stream_t;
  for (Index n : ns) {
    const auto p = make_problem(n, 1);
    const double td = time_form<double>(p, Form::streaming, 3);
    const double tq = time_form<f113>(p, Form::streaming, 1);
    const double tc = time_form<double>(p, Form::chunked_matmul, 3);
    stream_t.push_back(td);
    std::printf("%8ld %12.3f %12.3f %14.1f %10.3f %16.2f\n", static_cast<long>(n), 1e6 * td / n, 1e6 * tq / n, tq / td,
                1e6 * tc / n, tc / td);
  }

  std::printf("\nexact rationals (streaming), time per token:\n%8s %14s %16s\n", "n", "rational us/tok", "rational/f64");
  for (Index n : {16, 32, 64}) {
    const auto p = make_problem(n, 2);
    const double tr = time_form<Rational>(p, Form::streaming, 1);
    const double td = time_form<double>(p, Form::streaming, 5);
    std::printf("%8ld %14.1f %16.0f\n", static_cast<long>(n), 1e6 * tr / n, tr / td);
  }

  std::printf("\nnaive form (f64), whole sequence:\n%8s %12s %16s\n", "n", "seconds", "naive/streaming");
  std::vector<Index> nn{64, 128, 256, 512};
  std::vector<double> naive_t, stream_small;
  for (Index n : nn) {
    const auto p = make_problem(n, 3);
    naive_t.push_back(time_form<double>(p, Form::naive, 3));
    stream_small.push_back(time_form<double>(p, Form::streaming, 3));
    std::printf("%8ld %12.4f %16.1f\n", static_cast<long>(n), naive_t.back(), naive_t.back() / stream_small.back());
  }
  std::printf("\nfitted exponent of time vs n: naive %.2f (n = 64..512), streaming %.2f (n = 256..4096)\n",
              fitted_exponent(nn, naive_t), fitted_exponent(ns, stream_t));
  return 0;
}
