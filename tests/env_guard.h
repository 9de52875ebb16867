// Environment variables for one test: the named ones are unset on construction (set() gives
// them values) and put back as they were when the guard goes out of scope, on every path out
// of the test (a failed ASSERT included).
#pragma once
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kit_test {

class EnvGuard {
 public:
  explicit EnvGuard(const std::vector<std::string>& names) {
    for (const auto& n : names) {
      const char* v = std::getenv(n.c_str());
      saved_[n] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(n.c_str());
    }
  }
  void set(const std::string& n, const std::string& v) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~EnvGuard() {
    for (const auto& [n, v] : saved_) {
      if (v)
        ::setenv(n.c_str(), v->c_str(), 1);
      else
        ::unsetenv(n.c_str());
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace kit_test
