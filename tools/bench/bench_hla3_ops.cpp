// Cost of one ⊕ of the third-order segment operators, in double:
// the compact hla3 operator (SPEC §4) against the paper's ⊗3 (Eqs. 7.6-7.7)
// with the maps M^KQP, M^KQm dense (O(d³·dv) entries) and in contraction form
// (the segment's tokens, O(ℓ(d + dv)) entries). Both operands are segments of
// ℓ tokens (default 64, a typical chunk width), d = dv ∈ {8, 16, 32, 64}.
// Time: median of repeated combines; memory: bytes of one summary.
// Usage: hla_bench_hla3_ops [ℓ]
#include "hla/ops/hla3.hpp"
#include "hla/paper/hla3_paper.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace hla;

namespace {

Head<double> random_head(Index n, Index d, std::mt19937_64& rng) {
  std::normal_distribution<double> N(0.0, 1.0 / std::sqrt(double(d)));
  auto rnd = [&](Index r, Index c) { return Mat<double>(Mat<double>::NullaryExpr(r, c, [&] { return N(rng); })); };
  Problem<double> p;
  p.opt.variant = Variant::hla3;  // γ = 1: the paper's operator has no decay
  p.q = rnd(n, d);
  p.k = rnd(n, d);
  p.v = rnd(n, d);
  return make_head(p);
}

// Summaries of tokens [0, ℓ) and [ℓ, 2ℓ), and the median seconds of A ⊕ B.
template <class Op> double median_combine_seconds(const Op& op, Index len, typename Op::Summary* keep_A) {
  // Folded token by token: a dense token map alone is d³(dv+1) doubles.
  auto fold = [&op](Index t0, Index t1) {
    auto X = op.identity();
    for (Index t = t0; t < t1; ++t) X = op.combine(X, op.token(t));
    return X;
  };
  const auto A = fold(0, len), B = fold(len, 2 * len);
  using clock = std::chrono::steady_clock;
  std::vector<double> s;
  double budget = 0.5, sink = 0;
  while (s.size() < 3 || (s.size() < 200 && budget > 0)) {
    const auto t0 = clock::now();
    const auto X = op.combine(A, B);
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    sink += X.F(0, 0);
    s.push_back(dt);
    budget -= dt;
  }
  if (sink == 12345.678) std::puts("");  // keeps the combines observable
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  *keep_A = A;
  return s[s.size() / 2];
}

template <class Map> size_t paper_bytes(const typename hla3_paper::OpWith<double, Map>::Summary& X, size_t map_entries) {
  return sizeof(double) * (size_t(X.SK.size() + X.SQ.size() + X.P.size() + X.F.size() + X.R.size() + X.U.size()) + map_entries);
}

}  // namespace

int main(int argc, char** argv) {
  const Index len = argc > 1 ? std::atoi(argv[1]) : 64;
  if (len < 1) {
    std::fprintf(stderr, "usage: %s [segment length >= 1]\n", argv[0]);
    return 2;
  }
  std::mt19937_64 rng(20261129);
  std::printf("one ⊕ of two %ld-token segments, double, median time; bytes per summary\n\n", long(len));
  std::printf("%4s | %12s %12s %12s | %9s %9s | %12s %12s %12s | %9s %9s\n", "d=dv", "compact us", "dense us",
              "contract us", "dense/c", "contr/c", "compact B", "dense B", "contract B", "dense/c", "contr/c");
  for (Index d : {8, 16, 32, 64}) {
    const Head<double> h = random_head(2 * len, d, rng);
    hla3::Op<double>::Summary c;
    hla3_paper::OpDense<double>::Summary pd;
    hla3_paper::Op<double>::Summary pc;
    const double tc = median_combine_seconds(hla3::Op<double>{h}, len, &c);
    const double td = median_combine_seconds(hla3_paper::OpDense<double>{h}, len, &pd);
    const double tp = median_combine_seconds(hla3_paper::Op<double>{h}, len, &pc);
    const size_t bc = sizeof(double) * size_t(c.S.size() + c.P.size() + c.Zq.size() + c.X.size() + c.Y.size() + c.F.size() + 1);
    const size_t bd = paper_bytes<hla3_paper::DenseMap<double>>(pd, size_t(pd.M.M.size()));
    const size_t bp = paper_bytes<hla3_paper::TokenMap<double>>(pc, size_t(pc.M.K.size() + pc.M.V.size()));
    std::printf("%4ld | %12.2f %12.2f %12.2f | %9.1f %9.1f | %12zu %12zu %12zu | %9.1f %9.1f\n", long(d), tc * 1e6,
                td * 1e6, tp * 1e6, td / tc, tp / tc, bc, bd, bp, double(bd) / double(bc), double(bp) / double(bc));
    std::fflush(stdout);
  }
  std::printf("\ncompact: (S, P, Zq, X, Y, F, ρ), 3d² + 3d(dv+1) + 1 entries; dense: six d×d / d×(dv+1) moments + "
              "M as a d(dv+1) × d² matrix; contraction: the six moments + the segment's k_t, [v_t|1] (grows with ℓ)\n");
}
