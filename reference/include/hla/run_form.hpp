// Definition of run_form (declared in evaluate_impl.hpp): one variant's forms,
// by name. Included only by the generated instantiation units.
#pragma once

#include "hla/evaluate_impl.hpp"

namespace hla {

template <class V, class T> Mat<T> run_form(const Head<T>& h, Form f, Index chunk) {
  switch (f) {
    case Form::naive: return V::naive(h);
    case Form::streaming: return V::streaming(h);
    case Form::streaming_paper_state:
      if constexpr (implements<V>(Form::streaming_paper_state)) return V::streaming_paper_state(h);
      break;
    case Form::fold:
    case Form::blelloch:
    case Form::chunked_scan: return scan_form(typename V::template Op<T>{h}, h.n(), h.dv1(), f, chunk);
    case Form::chunked_matmul:
      if constexpr (implements<V>(Form::chunked_matmul)) return V::chunked(h, chunk);
      break;
    case Form::literal:
    case Form::literal_reversed:
      if constexpr (implements<V>(Form::literal)) return literal_form<V>(h, f == Form::literal_reversed);
      break;
    case Form::chunked_pairs:
      if constexpr (implements<V>(Form::chunked_pairs)) return V::chunked_pairs(h, chunk);
      break;
  }
  throw InputError("form " + to_string(f) + " is not implemented for variant " + to_string(V::variant));
}

}  // namespace hla
