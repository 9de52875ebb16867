// main() of every test program: GoogleTest's own, plus the grader's verdict channel.
//
// ctest and a student run these programs as plain GoogleTest programs. The grader
// (grader/grade.py) does not trust anything a test process prints, writes or returns:
// the student's code runs in this very process and can print GoogleTest's lines, end
// the process with status 0 (before main, inside a test, from an atexit handler) or
// rewrite report files. Instead the grader hands each run a fresh secret token through
// a pipe (KIT_GRADER_CHANNEL=<token fd>:<verdict fd>) and counts a case as passed only
// when a verdict line with that token arrives on the other pipe:
//
//   KIT-VERDICT <token> PASS|FAIL|SKIP <suite.case>    written after the case's body ended
//   KIT-VERDICT <token> END <cases run>               written after RUN_ALL_TESTS returned
//
// A process that stops early writes neither; a line without the token counts for nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

// Writes all of `line` to fd (a pipe: short writes only under signals).
void write_all(int fd, const std::string& line) {
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n <= 0) return;  // the grader stopped listening: nothing more to tell
    done += static_cast<size_t>(n);
  }
}

class VerdictChannel : public ::testing::EmptyTestEventListener {
 public:
  VerdictChannel(std::string token, int fd) : token_(std::move(token)), fd_(fd) {}

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const auto* r = info.result();
    const char* what = r->Skipped() ? "SKIP" : r->Passed() ? "PASS" : "FAIL";
    ++ran_;
    write_all(fd_, "KIT-VERDICT " + token_ + " " + what + " " + info.test_suite_name() + "." + info.name() + "\n");
  }
  void end() { write_all(fd_, "KIT-VERDICT " + token_ + " END " + std::to_string(ran_) + "\n"); }

 private:
  std::string token_;
  int fd_;
  int ran_ = 0;
};

// Reads the token the grader wrote (then closed) and keeps the verdict fd from children
// that exec (the programs the tests start never see it).
VerdictChannel* open_channel() {
  const char* spec = std::getenv("KIT_GRADER_CHANNEL");
  if (!spec) return nullptr;
  int token_fd = -1, verdict_fd = -1;
  if (std::sscanf(spec, "%d:%d", &token_fd, &verdict_fd) != 2) {
    std::fprintf(stderr, "KIT_GRADER_CHANNEL=%s is not <token fd>:<verdict fd>\n", spec);
    std::exit(2);
  }
  ::unsetenv("KIT_GRADER_CHANNEL");
  std::string token;
  char buf[128];
  for (ssize_t n; (n = ::read(token_fd, buf, sizeof buf)) > 0 && token.size() < 256;) token.append(buf, n);
  ::close(token_fd);
  ::fcntl(verdict_fd, F_SETFD, FD_CLOEXEC);
  if (token.empty()) return nullptr;  // nothing to sign with: the grader counts no case
  return new VerdictChannel(token, verdict_fd);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  VerdictChannel* channel = open_channel();
  if (channel) ::testing::UnitTest::GetInstance()->listeners().Append(channel);  // gtest owns it
  const int rc = RUN_ALL_TESTS();
  if (channel) channel->end();
  return rc;
}
