#include "hla/backward_impl.hpp"

namespace hla {

std::string to_string(BackwardForm f) {
  switch (f) {
    case BackwardForm::naive: return "naive";
    case BackwardForm::streaming: return "streaming";
    case BackwardForm::chunked: return "chunked";
  }
  return "?";
}

bool has_backward(Variant v) {
  return std::apply([v](auto... b) { return ((b.variant == v) || ...); }, Backwards{});
}

}  // namespace hla
