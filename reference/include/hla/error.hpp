// The one exception type for bad input. Light on purpose: code that only
// reports bad input includes this, not the reference headers.
#pragma once

#include <stdexcept>

namespace hla {

// Bad input (shapes, options, files, command lines): the message names the
// problem; tools map it to exit status 2.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace hla
