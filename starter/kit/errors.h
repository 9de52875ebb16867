// The kit's two error types. Every user-facing failure is a kit::Error whose
// message names the problem and the fix; main() turns it into a non-zero exit.
#pragma once
#include <stdexcept>
#include <string>

namespace kit {

// Bad input, bad configuration, a failed peer: something the user can fix.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown by every unimplemented student function in starter/.
struct NotImplemented : std::logic_error {
  explicit NotImplemented(const std::string& what)
      : std::logic_error("not implemented: " + what) {}
};

}  // namespace kit
