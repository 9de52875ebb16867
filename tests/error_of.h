// The message of the kit::Error that a piece of code throws, for the tests of what an error
// says. Shared by suites; needs no LibTorch.
#pragma once
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "kit/errors.h"

namespace kit_test {

// The message of the kit::Error that fn throws, or nothing when it throws none.
template <typename F>
std::optional<std::string> kit_error_message(F&& fn) {
  try {
    fn();
  } catch (const kit::Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

// The message of the kit::Error that fn throws, or a failure (and "") when it throws none.
template <typename F>
std::string error_of(F&& fn) {
  const std::optional<std::string> message = kit_error_message(std::forward<F>(fn));
  if (!message) ADD_FAILURE() << "expected a kit::Error, none was thrown";
  return message.value_or("");
}

}  // namespace kit_test
