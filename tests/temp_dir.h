// A fresh directory of a test's own (so no file from an earlier run can be mistaken for this
// run's output), removed at the end of the test unless KIT_KEEP_TEST_DIRS is set. Light on
// purpose (no LibTorch), so that the plots' tests can use it too.
#pragma once
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace kit_test {

class TempDir {
 public:
  // `tag` goes into the directory's name, to tell whose it is when one is kept.
  explicit TempDir(const std::string& tag = "test") {
    const std::string tmpl = (std::filesystem::temp_directory_path() / ("kit_" + tag + "_XXXXXX")).string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed for " + tmpl + ": is TMPDIR writable?");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!std::getenv("KIT_KEEP_TEST_DIRS")) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace kit_test
