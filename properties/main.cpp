// The one Catch main of the property suites (compiled once, linked into each).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <string>

namespace hla::test {
std::string argv0;
}

int main(int argc, char* argv[]) {
  hla::test::argv0 = argc > 0 ? argv[0] : "test";
  return Catch::Session().run(argc, argv);
}
