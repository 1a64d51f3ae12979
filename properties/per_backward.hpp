// per_backward<T>: one Catch2 test case per variant with backward forms
// (hla::Backwards), running T<V>::run() with V the variant's operator type
// (its backward type: BackwardOf<V::variant>),
// named "<variant>: <title>" and tagged [backward][<variant>].
#pragma once

#include "hla/backward_impl.hpp"
#include "hla/operators.hpp"

#include "harness.hpp"

#include <string>

namespace hla::test {

template <template <class> class Test> bool per_backward(const std::string& title) {
  std::apply(
      [&](auto... b) {
        (Catch::AutoReg(Catch::makeTestInvoker(&Test<std::tuple_element_t<static_cast<size_t>(b.variant), Operators>>::run),
                        CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                        Catch::NameAndTags{to_string(b.variant) + ": " + title, "[backward][" + to_string(b.variant) + "]"}),
         ...);
      },
      Backwards{});
  return true;
}

}  // namespace hla::test
