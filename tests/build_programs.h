// The kit's programs that tests run (run_data_parallel, train_parallel, ...), found from where the
// running test program is: every suite lives in <build>/tests/, the programs in <build>/.
// No path is compiled into a test object, so the grader's self-tests can link the main
// build's test objects into their own build (CMake's KIT_PREBUILT) and still run the
// programs of that build, which carry the graded student code.
#pragma once
#include <filesystem>
#include <string>

namespace kit_test {

inline std::string build_program(const std::string& name) {
  const auto exe = std::filesystem::read_symlink("/proc/self/exe");
  return (exe.parent_path().parent_path() / name).string();
}

}  // namespace kit_test
