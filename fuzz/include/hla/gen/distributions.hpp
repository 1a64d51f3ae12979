// Input distributions shared by `hla gen` and `hla fuzz`. Portable and
// deterministic: only 64-bit integer draws (mt19937_64, fully specified),
// exact dyadic arithmetic and (positive's exp) correctly rounded IEEE
// operations, so the same seed gives the same bytes everywhere.
#pragma once

#include "hla/batch.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace hla::gen {

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t bits() { return g_(); }
  // Integer in [lo, hi].
  int64_t int_in(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(bits() % static_cast<uint64_t>(hi - lo + 1)); }
  // Uniform in [-1, 1), a multiple of 2^-30.
  double uniform();
  // Approximately N(0, 1): Irwin-Hall sum of 12 uniforms in [0, 1) minus 6,
  // each a multiple of 2^-30 (exact in a double; tails end at ±6).
  double normal();

 private:
  std::mt19937_64 g_;
};

// A seed for item i of a stream (SplitMix64 of the pair): disjoint, reproducible streams.
uint64_t derive_seed(uint64_t seed, uint64_t i);

enum class Dist {
  gaussian,       // N(0,1)
  uniform,        // U(-1, 1)
  small_int,      // integers in [-2, 2] (the exact tier, with γ = 1)
  dynamic_range,  // N(0,1) × 2^e per token, e uniform in ±(a range the dtype survives)
  cancellation,   // opposing key pairs k_{2i+1} = -k_{2i}, queries orthogonal to their own key
  near_zero_den,  // opposing query and key pairs, perturbed by 2^-10: denominators ≪ magnitude
  repeated,       // a few distinct tokens repeated
  zero_vectors,   // N(0,1) with some q, k or v rows zero
  positive,       // q, k through a feature map of linear attention: |x|, elu(x) + 1 or exp(x − max x), one per case
};
std::string to_string(Dist d);
Dist parse_dist(std::string_view s);  // throws InputError
const std::vector<Dist>& all_dists();

// Fills q, k, v of p (shapes set) from `d`, every value rounded to p.dtype.
void fill(BatchProblem& p, Dist d, Rng& rng);

}  // namespace hla::gen
