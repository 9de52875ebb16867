// A test body that might hang (a schedule, a pipe, a collective) runs through this, so a
// bug fails the test in seconds instead of eating the ctest timeout. Shared by suites.
#pragma once
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

namespace kit_test {

// Runs fn on its own thread and waits at most `seconds`. Returns "" when fn returned,
// the exception's message (prefixed "threw: ") when it threw, and "timeout" when it did
// not finish in time. On timeout the thread is left behind (detached): the test fails
// instead of hanging, and the process ends after the test.
inline std::string run_with_timeout(std::function<void()> fn, double seconds) {
  auto done = std::make_shared<std::promise<std::string>>();
  auto result = done->get_future();
  std::thread([fn = std::move(fn), done] {
    try {
      fn();
      done->set_value("");
    } catch (const std::exception& e) {
      done->set_value(std::string("threw: ") + e.what());
    } catch (...) {
      done->set_value("threw: (not a std::exception)");
    }
  }).detach();
  if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) return "timeout";
  return result.get();
}

}  // namespace kit_test
