// The fast engine: every operator's chunked matmul form (SPEC §5; hla3's
// derived from its §4 operator), written once over the scalar S — DD
// (double-double, ≥ 104 bits: the certified reference), double (verification
// and upward magnitudes) and Rational (the proof: the properties demand that it
// equals the naive definition exactly). Each product is a GEMM-shaped call of
// kernels.hpp; each quantity carries its magnitude and running error bound
// (matrix.hpp), so the output rows come with a bound phi·unit·M + alpha.
//
// It is the same algebra as reference/include/hla/ops/*.hpp (whose chunked
// forms the properties prove equal to naive), reassociated where a product of
// three matrices is cheaper the other way round, and with the carry of masked
// hla3 reduced to (S, P, F): X, Y and Zq of the carry are never read by a
// masked readout or by the update of F.
#pragma once

#include "hla/fast/head.hpp"
#include "hla/fast/ops/ahla.hpp"
#include "hla/fast/ops/hla2.hpp"
#include "hla/fast/ops/hla3.hpp"
#include "hla/fast/ops/la1.hpp"
#include "hla/problem.hpp"
#include "hla/state.hpp"
#include "hla/variants.hpp"

#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace hla::fast {

// The engine's forms (ops/<variant>.hpp: the chunk form, its reverse mode and
// the streaming step), each naming its variant: one for each kVariants row with
// fast_engine, and none other.
using ChunkForms = std::tuple<detail::La1, detail::Hla2, detail::Ahla, detail::Hla3>;
namespace detail {
template <std::size_t... I> constexpr bool chunk_forms_match_table(std::index_sequence<I...>) {
  for (const VariantInfo& r : kVariants)
    if (((std::tuple_element_t<I, ChunkForms>::variant == r.id) + ... + 0) != (r.fast_engine ? 1 : 0)) return false;
  return true;
}
}  // namespace detail
static_assert(detail::chunk_forms_match_table(std::make_index_sequence<std::tuple_size_v<ChunkForms>>{}),
              "ChunkForms must hold one form for each kVariants row with fast_engine, and none other");

// Whether the engine has a form for this variant (else the caller uses binary128).
constexpr bool supports(Variant v) { return info(v).fast_engine; }

// Calls f(F{}) with the form F of variant v (ops/<variant>.hpp).
template <class F> void with_chunk_form(Variant v, F&& f) {
  const bool found = std::apply([&](auto... form) { return ((form.variant == v ? (f(form), true) : false) || ...); }, ChunkForms{});
  if (!found) throw std::logic_error("fast engine: no chunked form for this variant");
}

// Calls f(chunk) for the chunks [c0, c0 + L) of the head, first to last.
template <class S, class F> void for_each_chunk(const FastHead<S>& h, F&& f) {
  for (Idx c0 = 0; c0 < h.n(); c0 += h.w) f(detail::Chunk<S>(h, c0, std::min(h.w, h.n() - c0)));
}

// Emulated precisions: a rational rounded once to Emu<K>, and γ^0..E by
// repeated products rounded in it (as Head::gpow does in any scalar).
template <class S> S emu_from_rational(const Rational& x) {
  if constexpr (std::is_same_v<S, Emu<0>>) return S(from_rational<float>(x));
  else if constexpr (std::is_same_v<S, Emu<1>>) return S(static_cast<float>(from_rational<bf16>(x)));
  else return S(static_cast<float>(from_rational<f16>(x)));
}
template <class S> std::vector<S> emu_powers(const Rational& gamma, Idx E) {
  constexpr int K = std::is_same_v<S, Emu<0>> ? 0 : std::is_same_v<S, Emu<1>> ? 1 : 2;
  std::vector<S> g(static_cast<size_t>(E + 1), S(1.0f));
  Dense<S> a = Dense<S>::zero(1, 1), b = Dense<S>::zero(1, 1);
  b.at(0, 0) = emu_from_rational<S>(gamma);
  a.at(0, 0) = 1.0f;
  for (Idx e = 1; e <= E; ++e) {
    detail::mul(a, b);  // the kernel's rounded product
    g[static_cast<size_t>(e)] = S(a.at(0, 0));
  }
  (void)K;
  return g;
}

// Builds the engine's head from exact inputs: q_at(t, c), k_at(t, c),
// v_at(t, c) give S values (exact: doubles, or rationals for S = Rational).
// q is multiplied by `scale`, and γ, λ, scale are rounded from their exact
// values (S = DD: binary128 then split, relative error ≤ 2^-113 + 2^-106;
// γ^e by e binary128 products: ≤ (e + 1)·2^-113·1.0001 more).
template <class S, class QAt, class KAt, class VAt>
FastHead<S> make_fast_head(const Options& o, Idx n, Idx d, Idx dv, QAt&& q_at, KAt&& k_at, VAt&& v_at, Idx w, bool magnitudes = true) {
  FastHead<S> h;
  h.magnitudes = magnitudes;
  h.variant = o.variant;
  h.masked = o.masked;
  h.w = std::max<Idx>(1, std::min(w, n));
  Dense<S> q = Dense<S>::zero(n, d), k = Dense<S>::zero(n, d), v = Dense<S>::zero(n, dv + 1);
  auto put = put_entry<S>;
  for (Idx t = 0; t < n; ++t) {
    for (Idx c = 0; c < d; ++c) put(q, t, c, q_at(t, c)), put(k, t, c, k_at(t, c));
    for (Idx c = 0; c < dv; ++c) put(v, t, c, v_at(t, c));
    put(v, t, dv, S{1});
  }
  h.q = exact_input(std::move(q), magnitudes);
  h.k = exact_input(std::move(k), magnitudes);
  h.v = exact_input(std::move(v), magnitudes);
  // A rational option as a 1 × 1 matrix with its rounding bound.
  auto option = [magnitudes](const Rational& x) {
    Dense<S> m = Dense<S>::zero(1, 1);
    BMat<S> b;
    if constexpr (std::is_same_v<S, Rational>) {
      m.at(0, 0) = x;
      b = exact_input(std::move(m), magnitudes);
    } else if constexpr (std::is_same_v<S, DD>) {
      m.set(0, 0, dd_from_f113(from_rational<f113>(x)));
      b = exact_input(std::move(m), magnitudes);
      b.phi = 2, b.alpha = 0x1p-1073;
    } else if constexpr (std::is_same_v<S, double>) {
      m.at(0, 0) = from_rational<double>(x);
      b = exact_input(std::move(m), magnitudes);
      b.phi = 1, b.alpha = 0x1p-1074;
    } else {
      (void)magnitudes;  // emulated precision: one rounding, no bound
      m.at(0, 0) = emu_from_rational<S>(x);
      b = exact_input(std::move(m));
    }
    b.refresh();
    return b;
  };
  h.scaled = o.scale != 1;
  h.scale = option(o.scale);
  if (h.scaled) ops::scale(h.q, h.scale);
  h.ridge = o.lambda != 0;
  h.lambda = option(o.lambda);
  const Idx E = order_of(o.variant) * (h.w + 1);
  if constexpr (std::is_same_v<S, Rational>) {
    h.pow.g.assign(static_cast<size_t>(E + 1), Rational(1));
    for (Idx e = 1; e <= E; ++e) h.pow.g[static_cast<size_t>(e)] = h.pow.g[static_cast<size_t>(e - 1)] * o.gamma;
  } else if constexpr (!Arith<S>::track) {
    // As the reference's Head: γ rounded once, its powers by repeated rounded products.
    h.pow.g = emu_powers<S>(o.gamma, E);
  } else {
    const f113 g = from_rational<f113>(o.gamma);
    f113 x = 1;
    for (Idx e = 0; e <= E; ++e) {
      if constexpr (std::is_same_v<S, DD>) h.pow.g.push_back(dd_from_f113(x));
      else h.pow.g.push_back(static_cast<double>(x));
      x *= g;
    }
    const double rel113 = static_cast<double>(E + 1) * 0x1p-113 * 1.0001;  // binary128 products (and γ's rounding)
    h.pow.phi = std::is_same_v<S, DD> ? 1.01 + rel113 / 0x1p-106 : 1.01 + rel113 / 0x1p-53;
    h.pow.alpha = 0x1p-1073;
  }
  return h;
}

// Decay in log space for the head (an order of ours: S double or emulated):
// b_t = b_{t−1} + log γ along the sequence, log γ rounded to f32 (f64 for S =
// double), b_{−1} = 0 where the sequence (or its state) starts; every sum
// rounded (as Head::lcum, np.cumsum: at n = 4096, γ = 0.9 b drifts by 0.02 in
// f32) or, rounded_once, each b_t rounded once from its exact value (as
// torch.cumsum on the CPU: nearby differences err by |b_t|·u).
template <class S> void set_log_decay(FastHead<S>& h, const Rational& gamma, bool rounded_once) {
  using T = std::conditional_t<std::is_same_v<S, double>, double, float>;
  using Wide = std::conditional_t<std::is_same_v<S, double>, f113, double>;  // (t + 1)·log γ exactly
  const T lg = std::log(from_rational<T>(gamma));
  h.logb.assign(static_cast<size_t>(h.n() + 1), 0.0);
  T b = 0;
  for (Idx t = 0; t < h.n(); ++t)
    h.logb[static_cast<size_t>(t + 1)] =
        rounded_once ? static_cast<double>(static_cast<T>(static_cast<Wide>(lg) * static_cast<Wide>(t + 1))) : static_cast<double>(b += lg);
}

// Sets the head's initial carry from a state in layout order (hla/state.hpp);
// at(i, r, c) gives member i's entry (r, c) as an exact S.
template <class S, class At> void set_initial_carry(FastHead<S>& h, const std::vector<StatePart>& layout, At&& at) {
  h.carry0.clear();
  for (size_t i = 0; i < layout.size(); ++i) {
    Dense<S> m = Dense<S>::zero(layout[i].rows, layout[i].width());
    for (Idx r = 0; r < layout[i].rows; ++r)
      for (Idx c = 0; c < layout[i].width(); ++c) put_entry(m, r, c, at(i, r, c));
    h.carry0.push_back(exact_input(std::move(m), h.magnitudes));
  }
}

// The head's outputs by the chunked form, with magnitudes and bounds.
template <class S> HeadResult<S> evaluate_head(const FastHead<S>& h) {
  if (!supports(h.variant)) throw std::logic_error("fast engine: no chunked form for this variant");
  HeadResult<S> r = HeadResult<S>::zero(h.n(), h.dv1(), h.magnitudes);
  r.finite = h.q.finite && h.k.finite && h.v.finite;
  detail::Chunks<S> c(h);
  with_chunk_form(h.variant, [&]<class F>(F) {
    Carry<S> X = F::initial(h);
    for_each_chunk(h, [&](const detail::Chunk<S>& x) {
      BMat<S> Y;
      c.start(x.c0, x.L);
      F::forward(h, c, x, X, &Y);
      r.put(x.c0, Y);
    });
  });
  return r;
}

// The head's state after its last token (the carry, members in the state
// layout's order, hla/state.hpp), without its outputs: the final state
// (every member where h.full_carry).
template <class S> Carry<S> final_carry(const FastHead<S>& h) {
  if (!supports(h.variant)) throw std::logic_error("fast engine: no chunked form for this variant");
  detail::Chunks<S> c(h);
  Carry<S> X;
  with_chunk_form(h.variant, [&]<class F>(F) {
    X = F::initial(h);
    for_each_chunk(h, [&](const detail::Chunk<S>& x) {
      c.start(x.c0, x.L);
      F::forward(h, c, x, X, static_cast<BMat<S>*>(nullptr));
    });
  });
  return X;
}

}  // namespace hla::fast
