#include "hla/backward_impl.hpp"

namespace hla {

std::string to_string(BackwardForm f) {
  switch (f) {
    case BackwardForm::naive: return "naive";
    case BackwardForm::streaming: return "streaming";
    case BackwardForm::chunked: return "chunked";
    case BackwardForm::chunked_matmul: return "chunked_matmul";
  }
  return "?";
}

bool has_backward(Variant v) {
  return info(v).has_backward;
}

bool has_backward_form(Variant v, BackwardForm f) {
  if (!has_backward(v)) return false;
  return f != BackwardForm::chunked_matmul ||
         std::apply([v](auto... b) { return ((b.variant == v && has_chunk_backward<decltype(b)>) || ...); }, Backwards{});
}

}  // namespace hla
