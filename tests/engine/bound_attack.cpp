// Rule 2 of the pass rule (docs/pass-rule.md), attacked directly (issue 37,
// item 1): every element's score |cand − ref| / (u·M) stays ≤ K + 1, with
// K = engine::depth_bound(opt, n, d, class) of the evaluation class the
// candidate's summation order belongs to (SPEC §7).
//
// The candidates here are honest literal evaluations of the SPEC §2 sums,
// written independently of the library's forms: every term formed alone (its
// dot products a_ti, their product, the decay weight, v_j), in f64, f32 and
// bf16 (hla::bf16 = Eigen::bfloat16, rounding after every operation), then
// summed in several orders and trees:
//   flat natural, flat reversed, a random binary tree (over the terms in order
//   or shuffled)                                          class flat (flat:0);
//   chunked pair by pair: the carry terms (an index in an earlier chunk) as
//   nested sums, the intra-chunk terms added one by one    class flat:W;
//   nested sums, each level in its natural order, reversed or shuffled, and
//   grouped in chunks of a random width                   class masked.
// The decay weight is computed as pow(γ, m), by repeated multiplication, or as
// exp of a cumulative sum of log γ (over the sequence, or per chunk with the
// chunk decays multiplied across chunks), as production kernels do.
// Inputs are adversarial for coherent rounding: a few distinct tokens repeated,
// (mostly) positive entries, γ ∈ {1, 0.99, 0.9, 0.5, 1 − 2^-8, 1 − 2^-9}, tiny
// heads (d = 1–4), n ≤ 256 (hla3: n ≤ 32, its literal sum is O(n^4)). The reference
// and the magnitude M are exact (rational streaming form, proven equal to the
// naive sums by props_forms; hla::magnitude).
//
// Reproduce a failing property: RC_PARAMS="seed=N" ./props_bound "<test name>"
// (the seed and the line are printed at the start of every property).
#include "../../properties/harness.hpp"

#include "hla/engine/precision.hpp"
#include "hla/engine/reference.hpp"
#include "hla/evaluate.hpp"

#include <catch2/catch.hpp>
#include <rapidcheck.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace hla;
using hla::engine::FormClass;

namespace {

// ---------------------------------------------------------------- the case

enum class Decay { pow, mult, log_sequence, log_chunk };
const char* name(Decay d) {
  switch (d) {
    case Decay::pow:
      return "pow";
    case Decay::mult:
      return "repeated-multiplication";
    case Decay::log_sequence:
      return "exp-cumsum-log (sequence)";
    case Decay::log_chunk:
      return "exp-cumsum-log (per chunk)";
  }
  return "?";
}

struct Case {
  Options opt;  // variant, masked, γ (exact); no ridge, no normalize, scale 1
  Index n = 1, d = 1, dv = 1;
  std::vector<double> q, k, v;  // row-major n×d, n×d, n×dv: dyadic, exact in bf16
  Decay decay = Decay::pow;
  bool combined = false;              // pow, mult: one weight γ^(total exponent), else one factor per decay pair
  bool log_of_rounded_gamma = false;  // log modes: log of γ rounded to the precision, else of the exact γ
  Index decay_chunk = 1;              // log_chunk: width of the chunks of the cumulative sums
  bool dot_reversed = false;          // dot products summed from the last coordinate
  uint64_t seed = 0;                  // product order, tree shapes, chunk widths
  std::string tokens;                 // how the sequence was made (for the report)

  std::string describe() const {
    std::ostringstream os;
    os << to_string(opt.variant) << (opt.masked ? "" : " unmasked") << " gamma=" << opt.gamma << " n=" << n << " d=" << d << " dv=" << dv
       << " decay=" << name(decay);
    const bool log_mode = decay == Decay::log_sequence || decay == Decay::log_chunk;
    if (!log_mode && combined) os << " (one weight per term)";
    if (log_mode && log_of_rounded_gamma) os << " (log of the rounded gamma)";
    if (decay == Decay::log_chunk) os << " chunk " << decay_chunk;
    os << (dot_reversed ? ", dot products reversed" : "") << ", seed=" << seed << ", tokens: " << tokens;
    return os.str();
  }
};

int order(const Case& c) { return order_of(c.opt.variant); }

// The literal terms of output t: index tuples in the natural nested order
// (outer index first). la1 (j); hla2 (j, i ≤ j); ahla (i, j ≤ i);
// hla3 (u, j ≤ u, i ≤ u); unmasked: every inner index ≤ t.
struct Idx {
  int32_t x[3];
};
void terms_of(const Case& c, Index t, std::vector<Idx>& out) {
  out.clear();
  const auto T = static_cast<int32_t>(t);
  const bool m = c.opt.masked;
  switch (c.opt.variant) {
    case Variant::la1:
      for (int32_t j = 0; j <= T; ++j) out.push_back({{j, 0, 0}});
      break;
    case Variant::hla2:
      for (int32_t j = 0; j <= T; ++j)
        for (int32_t i = 0; i <= (m ? j : T); ++i) out.push_back({{j, i, 0}});
      break;
    case Variant::ahla:
      for (int32_t i = 0; i <= T; ++i)
        for (int32_t j = 0; j <= i; ++j) out.push_back({{i, j, 0}});
      break;
    case Variant::hla3:
      for (int32_t u = 0; u <= T; ++u)
        for (int32_t j = 0; j <= (m ? u : T); ++j)
          for (int32_t i = 0; i <= (m ? u : T); ++i) out.push_back({{u, j, i}});
      break;
    default:
      throw std::logic_error("bound_attack: variant not covered");
  }
}
int32_t min_index(const Idx& x, int levels) {
  int32_t r = x.x[0];
  for (int l = 1; l < levels; ++l) r = std::min(r, x.x[l]);
  return r;
}

// ---------------------------------------------------------------- one precision

// The compute precision of a scalar, which sets u (f64 2^-53, f32 2^-24, bf16 2^-8).
template <class S> constexpr engine::Precision precision_of_scalar();
template <> constexpr engine::Precision precision_of_scalar<double>() { return engine::Precision::f64; }
template <> constexpr engine::Precision precision_of_scalar<float>() { return engine::Precision::f32; }
template <> constexpr engine::Precision precision_of_scalar<bf16>() { return engine::Precision::bf16; }
template <class S> double unit_roundoff_of() { return engine::unit_roundoff(precision_of_scalar<S>()); }
template <class S> std::string precision_name() { return engine::to_string(precision_of_scalar<S>()); }

// Rounds a double to S (exp, log and pow results are computed in double).
template <class S> S rd(double x) { return static_cast<S>(x); }
template <> bf16 rd<bf16>(double x) { return bf16(static_cast<float>(x)); }
template <class S> double dbl(S x) { return static_cast<double>(x); }
template <> double dbl<bf16>(bf16 x) { return static_cast<double>(static_cast<float>(x)); }

// Every term of the §2 sum of a case, formed alone in S.
template <class S> struct Terms {
  const Case& c;
  int p;
  std::vector<S> A;            // n×n: a(x, y) = q_x·k_y
  std::vector<S> V;            // n×(dv+1): v, then the denominator's 1
  std::vector<S> table;        // pow, mult: γ^m for m ≤ p·n
  std::vector<S> C;            // log modes: cumulative log γ (log_chunk: restarting at each chunk)
  std::vector<S> chunk_decay;  // log_chunk: exp(total of chunk b)
  std::vector<int> perm;       // order of the factors: 0 weight, 1..p dot products, p+1 v

  Terms(const Case& cs, std::mt19937_64& rng) : c(cs), p(order(cs)) {
    const Index n = c.n, d = c.d, dv = c.dv;
    A.resize(static_cast<size_t>(n * n));
    for (Index x = 0; x < n; ++x)
      for (Index y = 0; y < n; ++y) {
        S s(0);
        for (Index l0 = 0; l0 < d; ++l0) {
          const Index l = c.dot_reversed ? d - 1 - l0 : l0;
          const S prod = static_cast<S>(rd<S>(c.q[static_cast<size_t>(x * d + l)]) * rd<S>(c.k[static_cast<size_t>(y * d + l)]));
          s = l0 == 0 ? prod : static_cast<S>(s + prod);
        }
        A[static_cast<size_t>(x * n + y)] = s;
      }
    V.resize(static_cast<size_t>(n * (dv + 1)));
    for (Index j = 0; j < n; ++j) {
      for (Index col = 0; col < dv; ++col) V[static_cast<size_t>(j * (dv + 1) + col)] = rd<S>(c.v[static_cast<size_t>(j * dv + col)]);
      V[static_cast<size_t>(j * (dv + 1) + dv)] = S(1);
    }
    const S g = from_rational<S>(c.opt.gamma);  // γ as a kernel computing in S holds it
    const double lg_exact = std::log(to_double(c.opt.gamma));
    const S lg = rd<S>(c.log_of_rounded_gamma ? std::log(dbl(g)) : lg_exact);
    switch (c.decay) {
      case Decay::pow:
        table.resize(static_cast<size_t>(p * n + 1));
        for (size_t m = 0; m < table.size(); ++m) table[m] = rd<S>(std::pow(dbl(g), static_cast<double>(m)));
        break;
      case Decay::mult:
        table.resize(static_cast<size_t>(p * n + 1));
        table[0] = S(1);
        for (size_t m = 1; m < table.size(); ++m) table[m] = static_cast<S>(table[m - 1] * g);
        break;
      case Decay::log_sequence:
        C.resize(static_cast<size_t>(n));
        for (Index t = 0; t < n; ++t) C[static_cast<size_t>(t)] = t == 0 ? lg : static_cast<S>(C[static_cast<size_t>(t - 1)] + lg);
        break;
      case Decay::log_chunk: {
        const Index w = c.decay_chunk;
        C.resize(static_cast<size_t>(n));
        for (Index t = 0; t < n; ++t) C[static_cast<size_t>(t)] = t % w == 0 ? lg : static_cast<S>(C[static_cast<size_t>(t - 1)] + lg);
        for (Index b = 0; b * w < n; ++b) {
          const Index last = std::min(n, (b + 1) * w) - 1;
          chunk_decay.push_back(rd<S>(std::exp(dbl(C[static_cast<size_t>(last)]))));
        }
        break;
      }
    }
    perm.resize(static_cast<size_t>(p + 2));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
  }

  S a(Index x, Index y) const { return A[static_cast<size_t>(x * c.n + y)]; }
  S ex(S x) const { return rd<S>(std::exp(dbl(x))); }
  // γ^(t − j), t ≥ j, the way the case computes decays.
  S factor(Index t, Index j) const {
    switch (c.decay) {
      case Decay::pow:
      case Decay::mult:
        return table[static_cast<size_t>(t - j)];
      case Decay::log_sequence:
        return ex(static_cast<S>(C[static_cast<size_t>(t)] - C[static_cast<size_t>(j)]));
      case Decay::log_chunk: {
        const Index w = c.decay_chunk, bt = t / w, bj = j / w;
        if (bt == bj) return ex(static_cast<S>(C[static_cast<size_t>(t)] - C[static_cast<size_t>(j)]));
        // ρ_t of the carry, the chunk decays in between, and j decayed to the end of its chunk.
        S r = ex(C[static_cast<size_t>(t)]);
        for (Index b = bt - 1; b > bj; --b) r = static_cast<S>(r * chunk_decay[static_cast<size_t>(b)]);
        const Index last = std::min(c.n, (bj + 1) * w) - 1;
        return static_cast<S>(r * ex(static_cast<S>(C[static_cast<size_t>(last)] - C[static_cast<size_t>(j)])));
      }
    }
    return S(0);
  }
  // The decay weight of a term: product of the factors of its decay pairs, or
  // (combined) one table entry for the total exponent.
  S weight(Index t, const Idx& x) const {
    const Index x0 = x.x[0], x1 = x.x[1], x2 = x.x[2];
    const bool table_mode = c.decay == Decay::pow || c.decay == Decay::mult;
    switch (c.opt.variant) {
      case Variant::la1:
        return factor(t, x0);
      case Variant::hla2:  // j = x0, i = x1: γ^((t−i)+(t−j))
        if (table_mode && c.combined) return table[static_cast<size_t>(2 * t - x0 - x1)];
        return static_cast<S>(factor(t, x1) * factor(t, x0));
      case Variant::ahla:  // i = x0, j = x1: γ^(t−i)·γ^(i−j) along the chain
        if (table_mode && c.combined) return table[static_cast<size_t>(t - x1)];
        return static_cast<S>(factor(t, x0) * factor(x0, x1));
      case Variant::hla3:  // u = x0, j = x1, i = x2
        if (table_mode && c.combined) return table[static_cast<size_t>(3 * t - x0 - x1 - x2)];
        return static_cast<S>(static_cast<S>(factor(t, x2) * factor(t, x0)) * factor(t, x1));
      default:
        return S(0);
    }
  }
  // One term, its factors multiplied in the case's order.
  S term(Index t, const Idx& x, Index col) const {
    const Index x0 = x.x[0], x1 = x.x[1], x2 = x.x[2];
    std::array<S, 5> f{};
    Index j = 0;
    f[0] = weight(t, x);
    switch (c.opt.variant) {
      case Variant::la1:
        f[1] = a(t, x0), j = x0;
        break;
      case Variant::hla2:
        f[1] = a(t, x1), f[2] = a(x0, x1), j = x0;
        break;
      case Variant::ahla:
        f[1] = a(t, x0), f[2] = a(x0, x1), j = x1;
        break;
      case Variant::hla3:
        f[1] = a(t, x2), f[2] = a(x0, x2), f[3] = a(x0, x1), j = x1;
        break;
      default:
        break;
    }
    f[static_cast<size_t>(p + 1)] = V[static_cast<size_t>(j * (c.dv + 1) + col)];
    S r = f[static_cast<size_t>(perm[0])];
    for (int z = 1; z < p + 2; ++z) r = static_cast<S>(r * f[static_cast<size_t>(perm[static_cast<size_t>(z)])]);
    return r;
  }
};

// ---------------------------------------------------------------- summation orders

// Uniform in [0, 1) (std::uniform_real_distribution calls logl on every draw).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

template <class S> S sequential(const std::vector<S>& x, bool reversed) {
  S acc(0);
  const size_t n = x.size();
  for (size_t z = 0; z < n; ++z) acc = static_cast<S>(acc + x[reversed ? n - 1 - z : z]);
  return acc;
}

// A random binary tree over x[lo, hi): split points uniform, or (with
// probability comb) at an end, which makes long chains; past depth 3000 the
// rest is one chain (still a binary tree).
template <class S> S tree(const std::vector<S>& x, size_t lo, size_t hi, std::mt19937_64& rng, double comb, int depth) {
  if (hi - lo == 1) return x[lo];
  if (depth > 3000) {
    S acc = x[lo];
    for (size_t z = lo + 1; z < hi; ++z) acc = static_cast<S>(acc + x[z]);
    return acc;
  }
  size_t mid;
  if (uniform01(rng) < comb) mid = rng() % 2 ? lo + 1 : hi - 1;
  else mid = lo + 1 + static_cast<size_t>(rng() % (hi - lo - 1));
  const S l = tree(x, lo, mid, rng, comb, depth + 1);
  const S r = tree(x, mid, hi, rng, comb, depth + 1);
  return static_cast<S>(l + r);
}

// x summed in consecutive groups of w (each group left to right, then the
// group sums left to right).
template <class S> S grouped(const std::vector<S>& x, size_t w) {
  S acc(0);
  for (size_t lo = 0; lo < x.size(); lo += w) {
    S s = x[lo];
    for (size_t z = lo + 1; z < std::min(x.size(), lo + w); ++z) s = static_cast<S>(s + x[z]);
    acc = lo == 0 ? s : static_cast<S>(acc + s);
  }
  return acc;
}

// How one level of a nested sum adds its children: in groups of `width`
// (each group left to right, then the group sums), over the children in their
// natural order, reversed, or shuffled (a fixed permutation per level, drawn
// from `shuffle_seed`).
struct Level {
  size_t width = 1;
  int order = 0;  // 0 natural, 1 reversed, 2 shuffled
  uint64_t shuffle_seed = 0;
};

// Nested sums over the terms sel[lo, hi) (positions into idx/val, in the
// natural order), which share their first `level` indices: grouped by the
// index of this level, each level summed as levels[level] says. Every order
// of every level keeps each term's path ≤ the sum of the levels' lengths.
template <class S>
S nested(const std::vector<Idx>& idx, const std::vector<S>& val, const std::vector<size_t>& sel, size_t lo, size_t hi, int level, int depth,
         const std::vector<Level>& levels) {
  if (level == depth) return val[sel[lo]];  // one term
  std::vector<S> children;
  for (size_t a = lo; a < hi;) {
    size_t b = a + 1;
    while (b < hi && idx[sel[b]].x[level] == idx[sel[a]].x[level]) ++b;
    children.push_back(nested(idx, val, sel, a, b, level + 1, depth, levels));
    a = b;
  }
  const Level& L = levels[static_cast<size_t>(level)];
  if (L.order == 1) std::reverse(children.begin(), children.end());
  if (L.order == 2) {
    std::mt19937_64 r(L.shuffle_seed + children.size());
    std::shuffle(children.begin(), children.end(), r);
  }
  return grouped(children, L.width);
}

enum OrderId { flat_natural, flat_reversed, flat_tree, chunked_pairs, nested_groups, kOrders };
const char* order_name(int o) {
  static const char* names[] = {"flat natural", "flat reversed", "random tree", "chunked pair by pair", "nested groups"};
  return names[o];
}

// ---------------------------------------------------------------- scores

// Exact reference and magnitude of a case (num columns, then den), as doubles
// for M and as rationals for the difference.
struct Exact {
  std::vector<Rational> ref;  // n×(dv+1)
  std::vector<double> mag;    // n×(dv+1)
};
Problem<Rational> problem_of(const Case& c) {
  Problem<Rational> p;
  p.opt = c.opt;
  p.q.resize(c.n, c.d), p.k.resize(c.n, c.d), p.v.resize(c.n, c.dv);
  for (Index t = 0; t < c.n; ++t) {
    for (Index l = 0; l < c.d; ++l) {
      p.q(t, l) = to_rational<double>(c.q[static_cast<size_t>(t * c.d + l)]);
      p.k(t, l) = to_rational<double>(c.k[static_cast<size_t>(t * c.d + l)]);
    }
    for (Index l = 0; l < c.dv; ++l) p.v(t, l) = to_rational<double>(c.v[static_cast<size_t>(t * c.dv + l)]);
  }
  return p;
}
Exact exact_of(const Case& c) {
  const auto p = problem_of(c);
  const auto ref = evaluate(p, Form::streaming);  // = naive, exactly (props_forms)
  const auto mag = magnitude(p);
  Exact e;
  for (Index t = 0; t < c.n; ++t) {
    for (Index col = 0; col <= c.dv; ++col) {
      e.ref.push_back(col < c.dv ? ref.num(t, col) : ref.den(t));
      e.mag.push_back(to_double(col < c.dv ? mag.num(t, col) : mag.den(t)));
    }
  }
  return e;
}

struct Worst {
  double score = 0, bound = 0, ratio = 0;  // ratio: score / (K + 1)
  std::string where;
};
// Worst over the cases of a property, per class (flat, flat:W, masked) and precision (f64, f32, bf16).
struct Table {
  Worst w[3][3];
  size_t cases = 0;
  void print(const std::string& title) const {
    static const char* cls[] = {"flat", "flat:W", "masked"};
    static const char* prec[] = {"f64", "f32", "bf16"};
    std::ostringstream os;
    os << "  " << title << " (" << cases << " cases): worst score / (K+1) per class and precision\n" << std::setprecision(5);
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        const Worst& x = w[a][b];
        os << "    " << std::setw(6) << cls[a] << " " << std::setw(4) << prec[b] << ": score " << std::setw(9) << x.score << "  K+1 "
           << std::setw(9) << x.bound << "  ratio " << std::setw(8) << x.ratio << "   " << x.where << "\n";
      }
    std::cout << os.str() << std::flush;
  }
};
int class_slot(int o) { return o == chunked_pairs ? 1 : o == nested_groups ? 2 : 0; }
template <class S> int precision_slot();
template <> int precision_slot<double>() { return 0; }
template <> int precision_slot<float>() { return 1; }
template <> int precision_slot<bf16>() { return 2; }
static_assert(std::is_same_v<bf16, Eigen::bfloat16>);

struct Result {
  std::string failure;  // the first element above its bound, if any
};

// Every order of the case in precision S, every element scored against the
// bound of its order's class; fills the table.
template <class S> void attack(const Case& c, const Exact& e, std::mt19937_64& rng, Table& table, Result& res) {
  const double u = unit_roundoff_of<S>();
  const int p = order(c);
  Terms<S> T(c, rng);
  // Per case: the tree's shape parameters, the chunk width of flat:W, the nested group widths.
  const double comb = uniform01(rng) < 0.5 ? 0.0 : uniform01(rng);
  const bool shuffle = rng() % 2;
  const Index W = 1 + static_cast<Index>(rng() % static_cast<uint64_t>(c.n));
  const bool intra_reversed = rng() % 2, carry_last = rng() % 2;
  std::vector<Level> levels;
  for (int l = 0; l < p; ++l)
    levels.push_back({1 + static_cast<size_t>(rng() % static_cast<uint64_t>(c.n)), static_cast<int>(rng() % 3), rng()});
  const FormClass classes[3] = {FormClass::flat(0), FormClass::flat(W), FormClass::masked};
  double K1[3];
  for (int a = 0; a < 3; ++a) K1[a] = engine::depth_bound(c.opt, c.n, c.d, classes[a]) + 1;

  std::vector<Idx> idx;
  std::vector<S> val, shuffled;
  std::vector<size_t> all, carry, intra;
  for (Index t = 0; t < c.n; ++t) {
    terms_of(c, t, idx);
    all.resize(idx.size());
    std::iota(all.begin(), all.end(), size_t{0});
    const Index b0 = t / W * W;  // the chunk of t: the carry terms have an index before it
    carry.clear(), intra.clear();
    for (size_t z = 0; z < idx.size(); ++z) (min_index(idx[z], p) < b0 ? carry : intra).push_back(z);
    if (intra_reversed) std::reverse(intra.begin(), intra.end());
    for (Index col = 0; col <= c.dv; ++col) {
      val.resize(idx.size());
      for (size_t z = 0; z < idx.size(); ++z) val[z] = T.term(t, idx[z], col);
      S cand[kOrders];
      cand[flat_natural] = sequential(val, false);
      cand[flat_reversed] = sequential(val, true);
      shuffled = val;
      if (shuffle) std::shuffle(shuffled.begin(), shuffled.end(), rng);
      cand[flat_tree] = tree(shuffled, 0, shuffled.size(), rng, comb, 0);
      {  // chunk of width W: carry as nested sums, the intra-chunk terms one by one
        S acc = carry.empty() ? S(0) : nested(idx, val, carry, 0, carry.size(), 0, p, levels);
        const S carry_sum = acc;
        if (carry_last) acc = S(0);
        for (const size_t z : intra) acc = static_cast<S>(acc + val[z]);
        if (carry_last) acc = static_cast<S>(acc + carry_sum);
        cand[chunked_pairs] = acc;
      }
      cand[nested_groups] = nested(idx, val, all, 0, all.size(), 0, p, levels);

      const size_t el = static_cast<size_t>(t * (c.dv + 1) + col);
      const double M = e.mag[el];
      for (int o = 0; o < kOrders; ++o) {
        const double err = to_double(Rational(abs(to_rational<S>(cand[o]) - e.ref[el])));
        if (M == 0) {
          RC_ASSERT(err == 0.0);
          continue;
        }
        const double score = err / (u * M);
        const int a = class_slot(o);
        const double ratio = score / K1[a];
        Worst& w = table.w[a][precision_slot<S>()];
        std::ostringstream where;
        if (ratio > w.ratio || ratio > 1) {
          where << order_name(o) << " (" << engine::to_string(classes[a]) << ") t=" << t
                << (col == c.dv ? " den" : " col=" + std::to_string(col)) << " | " << c.describe();
        }
        if (ratio > w.ratio) w = {score, K1[a], ratio, where.str()};
        if (ratio > 1 && res.failure.empty()) {
          std::ostringstream f;
          f << precision_name<S>() << " " << where.str() << ": score " << score << " > K+1 = " << K1[a];
          res.failure = f.str();
        }
      }
    }
  }
}

Result attack_all(const Case& c, Table& table) {
  const Exact e = exact_of(c);
  Result res;
  std::mt19937_64 rng(c.seed);
  attack<double>(c, e, rng, table, res);
  attack<float>(c, e, rng, table, res);
  attack<bf16>(c, e, rng, table, res);
  ++table.cases;
  return res;
}

// ---------------------------------------------------------------- generators

// Entries: a/2^e, a ∈ [1, 255], e ∈ [3, 8]: exact in bf16 (8-bit significand).
rc::Gen<double> entry() {
  return rc::gen::apply([](int a, int e) { return std::ldexp(static_cast<double>(a), -e); }, rc::gen::inRange(1, 256),
                        rc::gen::inRange(3, 9));
}

// A few distinct tokens (q, k, v rows) repeated in a pattern.
void fill_tokens(Case& c) {
  const int m = *rc::gen::inRange(1, 5);
  const bool mixed_signs = *rc::gen::weightedOneOf<bool>({{4, rc::gen::just(false)}, {1, rc::gen::just(true)}});
  std::vector<std::vector<double>> tq, tk, tv;
  for (int z = 0; z < m; ++z) {
    auto row = [&](Index len) {
      auto r = *rc::gen::container<std::vector<double>>(static_cast<size_t>(len), entry());
      if (mixed_signs)
        for (auto& x : r)
          if (*rc::gen::arbitrary<bool>()) x = -x;
      return r;
    };
    tq.push_back(row(c.d)), tk.push_back(row(c.d)), tv.push_back(row(c.dv));
  }
  const int pattern = *rc::gen::inRange(0, 4);  // constant, periodic, random, runs
  std::vector<int> ids(static_cast<size_t>(c.n));
  if (pattern == 2) ids = *rc::gen::container<std::vector<int>>(static_cast<size_t>(c.n), rc::gen::inRange(0, m));
  const int run = *rc::gen::inRange(1, 17);
  for (Index t = 0; t < c.n; ++t) {
    if (pattern == 0) ids[static_cast<size_t>(t)] = 0;
    if (pattern == 1) ids[static_cast<size_t>(t)] = static_cast<int>(t % m);
    if (pattern == 3) ids[static_cast<size_t>(t)] = static_cast<int>((t / run) % m);
  }
  c.q.clear(), c.k.clear(), c.v.clear();
  for (Index t = 0; t < c.n; ++t) {
    const auto z = static_cast<size_t>(ids[static_cast<size_t>(t)]);
    c.q.insert(c.q.end(), tq[z].begin(), tq[z].end());
    c.k.insert(c.k.end(), tk[z].begin(), tk[z].end());
    c.v.insert(c.v.end(), tv[z].begin(), tv[z].end());
  }
  static const char* pattern_names[] = {"constant", "periodic", "random", "runs"};
  std::ostringstream os;
  os << m << " distinct (" << pattern_names[pattern] << (pattern == 3 ? " of " + std::to_string(run) : "") << ")"
     << (mixed_signs ? " mixed signs" : " positive") << ", token 0 q=[";
  for (double x : tq[0]) os << x << " ";
  os << "] k=[";
  for (double x : tk[0]) os << x << " ";
  os << "] v=[";
  for (double x : tv[0]) os << x << " ";
  os << "]";
  c.tokens = os.str();
}

Case gen_case(std::vector<Variant> variants, Index max_n) {
  Case c;
  c.opt.variant = *rc::gen::elementOf(variants);
  c.opt.masked = !has_unmasked(c.opt.variant) || *rc::gen::weightedOneOf<bool>({{3, rc::gen::just(true)}, {1, rc::gen::just(false)}});
  // γ = 1 − 2^-8 is exact in bf16, where repeated multiplication by it rounds
  // coherently (g − g/256 rounds to g − ulp for g ∈ [1/2, 1)); γ = 1 − 2^-9 is
  // a tie in bf16 (rounds to 1): the largest representation error of γ.
  c.opt.gamma = *rc::gen::weightedOneOf<Rational>({{3, rc::gen::just(Rational(1))},
                                                   {2, rc::gen::just(Rational(99, 100))},
                                                   {1, rc::gen::just(Rational(9, 10))},
                                                   {1, rc::gen::just(Rational(1, 2))},
                                                   {1, rc::gen::just(Rational(255, 256))},
                                                   {1, rc::gen::just(Rational(511, 512))}});
  c.d = *rc::gen::weightedOneOf<Index>(
      {{4, rc::gen::just<Index>(1)}, {3, rc::gen::just<Index>(2)}, {1, rc::gen::just<Index>(3)}, {1, rc::gen::just<Index>(4)}});
  c.dv = *rc::gen::inRange<Index>(1, 3);
  const Index small = std::min<Index>(max_n, 32);
  c.n = *rc::gen::weightedOneOf<Index>({{5, rc::gen::inRange<Index>(1, small + 1)},
                                        {3, rc::gen::inRange<Index>(std::min(small + 1, max_n), std::max(small, max_n / 3) + 1)},
                                        {2, rc::gen::inRange<Index>(std::min(max_n / 3 + 1, max_n), max_n + 1)}});
  fill_tokens(c);
  c.decay = *rc::gen::element(Decay::pow, Decay::mult, Decay::log_sequence, Decay::log_chunk);
  c.combined = *rc::gen::arbitrary<bool>();
  c.log_of_rounded_gamma = *rc::gen::arbitrary<bool>();
  c.decay_chunk = *rc::gen::inRange<Index>(1, c.n + 1);
  c.dot_reversed = *rc::gen::arbitrary<bool>();
  c.seed = *rc::gen::arbitrary<uint32_t>();
  return c;
}

void run_attack(const std::string& title, std::vector<Variant> variants, Index max_n) {
  Table table;
  hla::test::prop(title, [&] {
    const Case c = gen_case(variants, max_n);
    RC_TAG(to_string(c.opt.variant), c.opt.gamma == 1 ? "gamma=1" : "gamma<1");
    const Result r = attack_all(c, table);
    if (!r.failure.empty()) RC_LOG() << "above the bound: " << r.failure << "\n";
    RC_ASSERT(r.failure.empty());
  });
  table.print(title);
}

}  // namespace

TEST_CASE("bound attack: la1, hla2, ahla literal sums in every order stay within depth_bound of their class", "[bound]") {
  // RC_PARAMS="seed=N" reproduces (the seed is printed above the property).
  run_attack("la1/hla2/ahla (n <= 256): literal terms in f64/f32/bf16, flat/chunked/nested orders, score <= K+1 of the class",
             {Variant::la1, Variant::hla2, Variant::ahla}, 256);
}

TEST_CASE("bound attack: hla3 literal sums in every order stay within depth_bound of their class", "[bound]") {
  // RC_PARAMS="seed=N" reproduces. hla3's literal sum is O(n^4): n <= 32.
  run_attack("hla3 (n <= 32): literal terms in f64/f32/bf16, flat/chunked/nested orders, score <= K+1 of the class", {Variant::hla3}, 32);
}

namespace {

// One token repeated: q_t = q, k_t = k, v_t = v for every t (d = dv = 1), γ = 1.
Case repeated_token(Variant v, Index n, double q, double k, double val) {
  Case c;
  c.opt.variant = v;
  c.n = n, c.d = 1, c.dv = 1;
  c.q.assign(static_cast<size_t>(n), q), c.k.assign(static_cast<size_t>(n), k), c.v.assign(static_cast<size_t>(n), val);
  std::ostringstream os;
  os << "one token repeated, q=" << q << " k=" << k << " v=" << val;
  c.tokens = os.str();
  return c;
}

// The literal loop in S: every term of the §2 sum, weight·a_ti·a_ji·v_j left
// to right, added one by one into the output in the natural order (hla2: j
// outer, i inner). Its worst score over num and den.
template <class S> double flat_natural_worst(const Case& c) {
  const Exact e = exact_of(c);
  std::mt19937_64 rng(c.seed);
  Terms<S> T(c, rng);
  std::iota(T.perm.begin(), T.perm.end(), 0);
  std::vector<Idx> idx;
  std::vector<S> val;
  double worst = 0;
  for (Index t = 0; t < c.n; ++t) {
    terms_of(c, t, idx);
    for (Index col = 0; col <= c.dv; ++col) {
      val.resize(idx.size());
      for (size_t z = 0; z < idx.size(); ++z) val[z] = T.term(t, idx[z], col);
      const size_t el = static_cast<size_t>(t * (c.dv + 1) + col);
      const Rational err = abs(to_rational<S>(sequential(val, false)) - e.ref[el]);
      worst = std::max(worst, to_double(err) / (unit_roundoff_of<S>() * e.mag[el]));
    }
  }
  return worst;
}

}  // namespace

// Issue 37's report: an honest f32 kernel that adds every literal term of hla2
// into the output one by one scored far above the masked bound (1,476 against
// 500 at n = 160; that report's inputs are not reproduced here). The same kind
// of input: one positive token repeated, γ = 1, d = 1. Such a kernel declares
// the class flat; its bound holds, and the masked bound would fail it (so this
// test fails if flat's K is ever set to the masked K).
TEST_CASE("bound attack: hla2 flat f32 sum on a repeated token exceeds the masked K and stays within the flat K", "[bound]") {
  struct Token {
    double q, k, v;
  };
  const float seven_tenths = 0.7f;
  for (const Index n : {160, 256}) {
    for (const Token tok : {Token{seven_tenths, seven_tenths, seven_tenths}, Token{13, 1, 30}}) {
      const Case c = repeated_token(Variant::hla2, n, tok.q, tok.k, tok.v);
      const double score = flat_natural_worst<float>(c);
      const double masked = engine::depth_bound(c.opt, n, 1, FormClass::masked) + 1;
      const double flat = engine::depth_bound(c.opt, n, 1, FormClass::flat()) + 1;
      std::cout << "  n=" << n << " " << c.tokens << ": f32 flat score " << score << ", masked K+1 " << masked << ", flat K+1 " << flat
                << std::endl;
      INFO(c.describe() << ": f32 flat sum, worst score " << score << "; masked K+1 = " << masked << ", flat K+1 = " << flat);
      CHECK(score > masked);
      CHECK(score <= flat);
    }
  }
}

// The flat bound is not vacuous: on repeated tokens an honest flat f32 sum
// comes within a small factor of it. Measured (2026-12-05) over random single
// tokens a/2^e: (K+1)/worst = 4.2-4.6 for n = 64-256, 4.9-6.0 for n = 16-32;
// on this fixed family at n = 160: 13,380 / 3,219 = 4.16.
TEST_CASE("bound attack: the flat K is within 4.5x of the worst flat f32 score on repeated tokens (hla2, n = 160)", "[bound]") {
  struct Token {
    double q, k, v;
  };
  const Index n = 160;
  const float f7 = 0.7f, f3 = 1.0f / 3, f9 = 0.9f;
  double worst = 0;
  std::string where;
  for (const Token tok : {Token{13, 1, 30}, Token{2.125, 1, 1.125}, Token{3, 9.5, 54}, Token{6.5625, 199, 3.78125}, Token{2.375, 1, 0.875},
                          Token{f7, f7, f7}, Token{f3, f3, f3}, Token{f9, f9, 1}}) {
    const Case c = repeated_token(Variant::hla2, n, tok.q, tok.k, tok.v);
    const double score = flat_natural_worst<float>(c);
    if (score > worst) worst = score, where = c.tokens;
  }
  Options opt;  // hla2, masked, γ = 1
  const double flat = engine::depth_bound(opt, n, 1, FormClass::flat()) + 1;
  std::cout << "  flat K+1 = " << flat << ", worst f32 flat score " << worst << " (" << where << "): ratio " << flat / worst << std::endl;
  INFO("flat K+1 = " << flat << ", worst score " << worst << " (" << where << ")");
  CHECK(worst <= flat);
  CHECK(flat <= 4.5 * worst);
}
