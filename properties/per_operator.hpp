// Per-variant suites from the one type list (hla::Operators): per_operator<T>
// registers one Catch2 test case per operator type V, running T<V>::run(),
// named "<variant>: <title>" and tagged [<variant>]. A new variant gets every
// such suite without an edit to the tests.
#pragma once

#include "hla/operators.hpp"

#include "harness.hpp"

#include <string>

namespace hla::test {

template <template <class> class Test> bool per_operator(const std::string& title, const std::string& tags) {
  for_each_operator([&]<class V>(V) {
    const std::string name = to_string(V::variant);
    Catch::AutoReg(Catch::makeTestInvoker(&Test<V>::run), CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                   Catch::NameAndTags{name + ": " + title, tags + "[" + name + "]"});
  });
  return true;
}

}  // namespace hla::test
