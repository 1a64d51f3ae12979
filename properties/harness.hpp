// How every property in this project is run and reported.
//
// prop():            the property must hold; on failure the shrunk
//                    counterexample is printed and the test fails.
// prop_falsified():  the property must FAIL (an erratum of the paper); the
//                    test passes only when RapidCheck finds a counterexample,
//                    and prints it shrunk.
// Both print how to reproduce the run: RC_PARAMS="seed=N" <binary> "<test>".
#pragma once

#include <rapidcheck.h>
#include <catch2/catch.hpp>

#include <iostream>
#include <sstream>
#include <string>

namespace hla::test {

// argv[0] of the test binary (set by main.cpp), for the reproduce line.
extern std::string argv0;

inline std::string reproduce_line() {
  const auto seed = rc::detail::configuration().testParams.seed;
  const std::string test = Catch::getResultCapture().getCurrentTestName();
  return "RC_PARAMS=\"seed=" + std::to_string(seed) + "\" " + argv0 + " \"" + test + "\"";
}

template <class Testable> rc::detail::TestResult run_property(const std::string& name, Testable&& testable) {
  rc::detail::TestMetadata md;
  md.id = name;
  md.description = name;
  (void)rc::detail::configuration();  // loads RC_PARAMS (and prints it) before our lines
  std::cout << "[property] " << name << "\n  reproduce: " << reproduce_line() << std::endl;
  return rc::detail::checkTestable(std::forward<Testable>(testable), md);
}

template <class Testable> void prop(const std::string& name, Testable&& testable) {
  const auto r = run_property(name, std::forward<Testable>(testable));
  std::ostringstream msg;
  rc::detail::printResultMessage(r, msg);
  std::cout << "  " << msg.str() << std::endl;
  INFO(name << "\n" << msg.str() << "\nreproduce: " << reproduce_line());
  CHECK(r.template is<rc::detail::SuccessResult>());
}

template <class Testable> void prop_falsified(const std::string& name, Testable&& testable) {
  const auto r = run_property(name, std::forward<Testable>(testable));
  std::ostringstream msg;
  rc::detail::printResultMessage(r, msg);
  if (r.template is<rc::detail::FailureResult>()) {
    std::cout << "  falsified, as the erratum predicts. Shrunk counterexample:\n" << msg.str() << std::endl;
  } else {
    std::cout << "  NOT falsified: " << msg.str() << std::endl;
  }
  INFO(name << ": expected a counterexample (paper erratum), got:\n" << msg.str() << "\nreproduce: " << reproduce_line());
  CHECK(r.template is<rc::detail::FailureResult>());
}

}  // namespace hla::test
