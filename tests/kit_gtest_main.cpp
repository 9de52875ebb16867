// main() of every test program: GoogleTest's own, the role the program plays (tests/judge/judge.h:
// a plain run, the grader's subject, a rank, or, compiled with KIT_JUDGE_MAIN, the judge), and
// the grader's verdict channel.
//
// Since graded cases run as subject + judge, the verdict comes from the judge, a program that
// links no student object; the channel below still guards it, and every case of a suite
// without a judge.
//
// ctest and a student run these programs as plain GoogleTest programs. The grader
// (grader/grade.py) does not trust anything a test process prints, writes or returns:
// the student's code runs in this very process and can print GoogleTest's lines, end
// the process with status 0 (before main, inside a test, from an atexit handler) or
// rewrite report files. Instead it hands each run (one case) a fresh secret token on a pipe
// (KIT_GRADER_CHANNEL=<token fd>:<verdict fd>) and counts the case as passed only when the
// other pipe carries exactly these lines, in this order and nothing else:
//
//   KIT-VERDICT <token> PASS <suite.case>    written after the case's body ended
//   KIT-VERDICT <token> END 1                written after RUN_ALL_TESTS returned
//
// (SKIP or FAIL in place of PASS; "KIT-FAILURE <suite.case>", without the token, the moment an
// assertion fails, so that nothing the case does afterwards can take the failure back.)
//
// The token never enters this process's memory: the verdict line is assembled inside the
// kernel, the token's bytes copied from one pipe to the other with tee(2), so there is no
// secret to find by scanning the heap, the stack or gtest's state, during the case or after.
// What a submission can still do, and what stops it (grader/README.md has the full table):
//   - read the token pipe itself or write the verdict pipe: that takes calls on file
//     descriptors (read, write, fcntl, ...), which the grader's symbol check finds in the
//     compiled student objects (and both fds are close-on-exec and closed in forked children);
//   - reach this process from another one (a rank it started, a process left behind): the
//     process is made non-dumpable, so same-user processes cannot open /proc/<pid>/fd or
//     /proc/<pid>/mem, nor ptrace it;
//   - print lines, end the process, forge lines without the token: they count for nothing,
//     and any line the kit never writes makes the case fail.
#include <fcntl.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>
#if defined(__linux__)
#include <pthread.h>
#include <sys/prctl.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <string>

#include "judge/batch.h"
#include "judge/judge.h"
#include "test_device.h"

namespace {

int token_fd = -1, verdict_fd = -1;

// Writes all of `text` to the verdict pipe (a pipe: short writes only under signals).
void put(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(verdict_fd, text.data() + done, text.size() - done);
    if (n <= 0) return;  // the grader stopped listening: nothing more to tell
    done += static_cast<size_t>(n);
  }
}

// Copies the token from its pipe into the verdict pipe without consuming it or reading it
// into memory (tee(2)): false when there is none (then the grader counts nothing).
bool put_token() {
#if defined(__linux__)
  const ssize_t n = ::tee(token_fd, verdict_fd, 256, 0);
  return n > 0;
#else
  return false;  // the grader runs on Linux only
#endif
}

// "KIT-VERDICT <token> <what>\n", the token never in this process's memory.
void put_signed(const std::string& what) {
  put("KIT-VERDICT ");
  if (!put_token()) {
    put("(no token)\n");  // a malformed line: the grader counts no case of this run
    return;
  }
  put(" " + what + "\n");
}

std::string name_of(const ::testing::TestInfo& info) {
  return std::string(info.test_suite_name()) + "." + info.name();
}

class VerdictChannel : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override { current_ = name_of(info); }
  void OnTestPartResult(const ::testing::TestPartResult& part) override {
    if (part.failed()) put("KIT-FAILURE " + current_ + "\n");  // at once: cannot be taken back
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const auto* r = info.result();
    ++ran_;
    put_signed(std::string(r->Skipped() ? "SKIP" : r->Passed() ? "PASS" : "FAIL") + " " + name_of(info));
  }
  void end() { put_signed("END " + std::to_string(ran_)); }

 private:
  std::string current_;
  int ran_ = 0;
};

#if defined(__linux__)
// A child forked without exec (a death test, a library's helper) must not inherit the channel.
void close_channel_in_child() {
  ::close(token_fd);
  ::close(verdict_fd);
  token_fd = verdict_fd = -1;
}
#endif

// Takes the two descriptors the grader passed, keeps them from every child (exec or fork),
// and keeps other processes of the same user out of this one.
VerdictChannel* open_channel() {
  const char* spec = std::getenv("KIT_GRADER_CHANNEL");
  if (!spec) return nullptr;
  if (std::sscanf(spec, "%d:%d", &token_fd, &verdict_fd) != 2) {
    std::fprintf(stderr, "KIT_GRADER_CHANNEL=%s is not <token fd>:<verdict fd>\n", spec);
    std::exit(2);
  }
  ::unsetenv("KIT_GRADER_CHANNEL");
  ::fcntl(token_fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(verdict_fd, F_SETFD, FD_CLOEXEC);
#if defined(__linux__)
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // no /proc/<pid>/fd, /proc/<pid>/mem or ptrace for others
  ::pthread_atfork(nullptr, nullptr, close_channel_in_child);
#endif
  return new VerdictChannel();
}

// The judge of many cases (judge/batch.h): the directory of their records; empty otherwise.
std::string batch_records;

// Every case starts reading its subject's records from the first (in a batch judge, its own).
class CaseStart : public ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo& info) override {
    if (!batch_records.empty()) kit::judge::judge_case_from(batch_records, name_of(info));
    kit::judge::start_case();
  }
};

// The variable's value, removed from the environment (so that nothing the program starts sees it).
std::string take_env(const char* name) {
  const char* v = std::getenv(name);
  std::string out = v ? v : "";
  ::unsetenv(name);
  return out;
}

#if defined(KIT_JUDGE_MAIN)
// The judge: the subject's records from the file the grader wrote (KIT_JUDGE_RECORDS), at most
// kMaxStreamBytes of it, and how the subject ended (KIT_JUDGE_SUBJECT_STATUS, for messages);
// when KIT_JUDGE_RECORDS is a directory, each case's from its own files (judge/batch.h).
bool subject_batch() { return false; }
int run_subject_batch() { return 2; }
void set_role() {
  const std::string path = take_env("KIT_JUDGE_RECORDS"), status = take_env("KIT_JUDGE_SUBJECT_STATUS");
  if (path.empty()) {
    std::fprintf(stderr,
                 "this is a judge program: it judges the records a subject run of the suite's test program wrote.\n"
                 "Run the suite's test program (test_<suite>) instead; the grader runs both: grader/README.md.\n");
    std::exit(2);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    batch_records = path;  // each case's records are read when it starts
    return;
  }
  kit::judge::judge_records(path, status);
}
#else
// The grader's subject (KIT_SUBJECT_RECORDS=<fd>: records go there), a rank a subject part
// started (KIT_RANK_RECORDS=<file>), or a plain run: both roles in this one process. With
// KIT_SUBJECT_CASES=<file> too, the subject of many cases, a forked child each (judge/batch.h),
// each stopped after KIT_SUBJECT_CASE_TIMEOUT seconds.
std::string batch_cases, batch_timeout;
int batch_fd = -1;
bool subject_batch() { return batch_fd >= 0; }
int run_subject_batch() {
  const double timeout = batch_timeout.empty() ? 600 : std::atof(batch_timeout.c_str());
  return kit::judge::run_subject_cases(batch_cases, batch_fd, timeout, [](const std::string& name) {
#if defined(GTEST_FLAG_SET)
    GTEST_FLAG_SET(filter, name);
#else
    ::testing::GTEST_FLAG(filter) = name;
#endif
    return RUN_ALL_TESTS();
  });
}
void set_role() {
  const std::string fd = take_env("KIT_SUBJECT_RECORDS"), rank = take_env("KIT_RANK_RECORDS");
  batch_cases = take_env("KIT_SUBJECT_CASES");
  batch_timeout = take_env("KIT_SUBJECT_CASE_TIMEOUT");
  if (!fd.empty() && !batch_cases.empty()) {
    batch_fd = std::atoi(fd.c_str());
    ::fcntl(batch_fd, F_SETFD, FD_CLOEXEC);
  } else if (!fd.empty()) {
    const int n = std::atoi(fd.c_str());
    ::fcntl(n, F_SETFD, FD_CLOEXEC);
    kit::judge::become_subject(n);
  } else if (!rank.empty()) {
    kit::judge::become_rank(rank);
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const std::string bad = kit_test::apply_test_device(); !bad.empty()) {
    std::fprintf(stderr, "%s\n", bad.c_str());
    return 2;
  }
  set_role();
  ::testing::UnitTest::GetInstance()->listeners().Append(new CaseStart());  // gtest owns it
  if (subject_batch()) return run_subject_batch();  // no verdict channel: a subject decides nothing
  VerdictChannel* channel = open_channel();
  if (channel) ::testing::UnitTest::GetInstance()->listeners().Append(channel);  // gtest owns it
  const int rc = RUN_ALL_TESTS();
  if (channel) channel->end();
  return rc;
}
