// The operators as one type list, in the order of the variant table
// (variants.hpp): evaluation dispatch and the per-variant property suites
// iterate over it. Each type holds its variant's forms as static members
// (ops/<variant>.hpp); which forms it must have is its table row's `forms`.
#pragma once

#include "hla/ops/ahla.hpp"
#include "hla/ops/hla2.hpp"
#include "hla/ops/hla3.hpp"
#include "hla/ops/la1.hpp"
#include "hla/paper/hla3_paper.hpp"

#include <cstddef>
#include <tuple>
#include <utility>

namespace hla {

using Operators = std::tuple<la1, hla2, ahla, hla3, hla3_paper>;

// Whether operator type V implements form f (naive, streaming and the scan
// forms are required of every operator; the others are optional: the flat
// forms need its literal terms and chunked_pairs).
template <class V> constexpr bool implements(Form f) {
  if (f == Form::literal || f == Form::literal_reversed || f == Form::chunked_pairs) return requires(const Head<double>& h, Index w) {
      V::chunked_pairs(h, w);
    };
  if (f == Form::streaming_paper_state) return requires(const Head<double>& h) { V::streaming_paper_state(h); };
  if (f == Form::chunked_matmul) return requires(const Head<double>& h, Index w) { V::chunked(h, w); };
  return true;
}

namespace detail {
template <std::size_t... I> constexpr bool operators_match_table(std::index_sequence<I...>) {
  auto row_ok = []<class V>(std::size_t i) {
    const VariantInfo& r = kVariants[i];
    return V::variant == r.id && implements<V>(Form::streaming_paper_state) == r.forms.has(Form::streaming_paper_state) &&
           implements<V>(Form::chunked_matmul) == r.forms.has(Form::chunked_matmul) &&
           implements<V>(Form::literal) == r.forms.has(Form::literal) &&
           implements<V>(Form::literal) == r.forms.has(Form::literal_reversed) &&
           implements<V>(Form::literal) == r.forms.has(Form::chunked_pairs);
  };
  return (row_ok.template operator()<std::tuple_element_t<I, Operators>>(I) && ...);
}
}  // namespace detail
static_assert(std::tuple_size_v<Operators> == kVariants.size(), "one operator type per kVariants row");
static_assert(detail::operators_match_table(std::make_index_sequence<kVariants.size()>{}),
              "Operators must follow kVariants, and each type implement exactly the forms its row lists");

// Calls f(V{}) for the operator type V of variant v; returns what f returns.
template <class F> decltype(auto) with_operator(Variant v, F&& f) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
    using R = decltype(f(std::tuple_element_t<0, Operators>{}));
    if constexpr (std::is_void_v<R>) {
      (void)((static_cast<std::size_t>(v) == I ? (f(std::tuple_element_t<I, Operators>{}), true) : false) || ...);
    } else {
      R r{};
      (void)((static_cast<std::size_t>(v) == I ? (r = f(std::tuple_element_t<I, Operators>{}), true) : false) || ...);
      return r;
    }
  }(std::make_index_sequence<std::tuple_size_v<Operators>>{});
}

// Calls f(V{}) for every operator type, in table order.
template <class F> void for_each_operator(F&& f) {
  std::apply([&](auto... v) { (f(v), ...); }, Operators{});
}

}  // namespace hla
