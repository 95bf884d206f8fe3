// Errors: every failure the user can cause is a deepinfer::Error with a message that names the
// problem (file, tensor, field, argument). Never abort on bad input.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace deepinfer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// fail("tensor ", name, " has shape ", ...) builds the message from its parts and throws.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

template <typename... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) fail(parts...);
}

}  // namespace deepinfer
