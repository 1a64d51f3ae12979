#include "hla/gen/distributions.hpp"

#include <algorithm>
#include <cmath>

namespace hla::gen {

double Rng::uniform() { return std::ldexp(static_cast<double>(static_cast<int64_t>(bits() >> 33)) - 0x40000000, -30); }

double Rng::normal() {
  // The 30-bit draws added as integers (< 2^34) and scaled once: every partial
  // sum of the multiples of 2^-30 is exact either way, so the same double, and
  // a tenth of the time (twelve ldexp calls were 5% of a fuzz campaign).
  uint64_t s = 0;
  for (int i = 0; i < 12; ++i) s += bits() >> 34;
  return static_cast<double>(s) * 0x1p-30 - 6;
}

uint64_t derive_seed(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

const std::vector<Dist>& all_dists() {
  static const std::vector<Dist> d{Dist::gaussian,      Dist::uniform,  Dist::small_int,    Dist::dynamic_range, Dist::cancellation,
                                   Dist::near_zero_den, Dist::repeated, Dist::zero_vectors, Dist::positive};
  return d;
}

std::string to_string(Dist d) {
  switch (d) {
    case Dist::gaussian: return "gaussian";
    case Dist::uniform: return "uniform";
    case Dist::small_int: return "small_int";
    case Dist::dynamic_range: return "dynamic_range";
    case Dist::cancellation: return "cancellation";
    case Dist::near_zero_den: return "near_zero_den";
    case Dist::repeated: return "repeated";
    case Dist::zero_vectors: return "zero_vectors";
    case Dist::positive:
      return "positive";
  }
  return "?";
}

Dist parse_dist(std::string_view s) {
  for (Dist d : all_dists())
    if (to_string(d) == s) return d;
  throw InputError("unknown distribution '" + std::string(s) + "'");
}

namespace {

// Row views: for tensor x with row length w, row r is x[r·w, (r+1)·w).
struct Rows {
  std::vector<double>& x;
  Index w;
  Index count() const { return static_cast<Index>(x.size()) / w; }
  double* row(Index r) { return x.data() + r * w; }
};

// e^x for |x| ≤ 2^10 by IEEE operations only (fma, ldexp), so that every
// platform computes the same bits (libm's exp may differ in the last place).
double portable_exp(double x) {
  const double k = std::nearbyint(x * 0x1.71547652b82fep0);  // x / ln 2
  double r = std::fma(-k, 0x1.62e42fefa39efp-1, x);          // ln 2, high part
  r = std::fma(-k, 0x1.abc9e3b39803fp-56, r);                // ln 2, low part
  double s = 1;                                              // Σ r^i / i! for i ≤ 13, as 1 + r(1 + r/2(1 + …))
  for (int i = 13; i >= 1; --i) s = std::fma(s, r / i, 1.0);
  return std::ldexp(s, static_cast<int>(k));
}

// The feature maps of linear attention, f of row x (row length w).
void feature_map(double* x, Index w, int f) {
  double top = x[0];
  for (Index c = 1; c < w; ++c) top = std::max(top, x[c]);
  for (Index c = 0; c < w; ++c)
    x[c] = f == 0 ? std::fabs(x[c]) : f == 1 ? (x[c] > 0 ? x[c] + 1 : portable_exp(x[c])) : portable_exp(x[c] - top);
}

}  // namespace

void fill(BatchProblem& p, Dist d, Rng& rng) {
  Rows q{p.q, p.d}, k{p.k, p.d}, v{p.v, p.dv};
  for (Rows* r : {&q, &k, &v})
    for (double& e : r->x) e = d == Dist::uniform ? rng.uniform() : rng.normal();
  // Sequence position of a row (tensors are [.., n, w]): pairs never straddle heads.
  auto pos = [&](Index row) { return row % p.n; };
  switch (d) {
    case Dist::gaussian:
    case Dist::uniform: break;
    case Dist::small_int:
      for (Rows* r : {&q, &k, &v})
        for (double& e : r->x) e = static_cast<double>(rng.int_in(-2, 2));
      break;
    case Dist::dynamic_range: {
      // bf16/f32/f64 keep 2^±12 easily; f16 (max 65504) gets 2^±4.
      const int span = p.dtype == DType::f16 ? 4 : 12;
      for (Rows* r : {&q, &k, &v})
        for (Index i = 0; i < r->count(); ++i) {
          const int e = static_cast<int>(rng.int_in(-span, span));
          for (Index c = 0; c < r->w; ++c) r->row(i)[c] = std::ldexp(r->row(i)[c], e);
        }
      break;
    }
    case Dist::cancellation:
      for (Index i = 0; i < k.count(); ++i)
        if (pos(i) % 2 == 1)
          for (Index c = 0; c < p.d; ++c) k.row(i)[c] = -k.row(i - 1)[c];
      // q_t ⊥ k_t (own head's key row): remove the projection.
      for (Index b = 0; b < p.batch; ++b)
        for (Index h = 0; h < p.heads; ++h)
          for (Index t = 0; t < p.n; ++t) {
            double* qq = q.row((b * p.heads + h) * p.n + t);
            const double* kk = k.row((b * p.kv_heads + p.kv_head_of(h)) * p.n + t);
            double qk = 0, kk2 = 0;
            for (Index c = 0; c < p.d; ++c) qk += qq[c] * kk[c], kk2 += kk[c] * kk[c];
            if (kk2 > 0)
              for (Index c = 0; c < p.d; ++c) qq[c] -= qk / kk2 * kk[c];
          }
      break;
    case Dist::near_zero_den:
      for (Rows* r : {&q, &k})
        for (Index i = 0; i < r->count(); ++i)
          if (pos(i) % 2 == 1)
            for (Index c = 0; c < p.d; ++c) r->row(i)[c] = -r->row(i - 1)[c] * (1 + std::ldexp(rng.uniform(), -10));
      break;
    case Dist::repeated:
      for (Rows* r : {&q, &k, &v})
        for (Index i = 0; i < r->count(); ++i)
          if (pos(i) >= 3)
            for (Index c = 0; c < r->w; ++c) r->row(i)[c] = r->row(i - 3)[c];
      break;
    case Dist::zero_vectors:
      for (Rows* r : {&q, &k, &v})
        for (Index i = 0; i < r->count(); ++i)
          if (rng.int_in(0, 3) == 0)
            for (Index c = 0; c < r->w; ++c) r->row(i)[c] = 0;
      break;
    case Dist::positive: {
      // Every den is a sum of positive terms, far from 0 (normalized linear attention's inputs).
      const int f = static_cast<int>(rng.int_in(0, 2));
      for (Rows* r : {&q, &k})
        for (Index i = 0; i < r->count(); ++i) feature_map(r->row(i), r->w, f);
      break;
    }
  }
  for (Rows* r : {&q, &k, &v})
    for (double& e : r->x) e = round_to(p.dtype, e);
}

}  // namespace hla::gen
