// Many cases per process (batch.h says why and what crosses).
#include "judge/batch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "judge/judge.h"

namespace kit::judge {
namespace {

void put_field(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}


// One read of the pipe into `data` (at most kMaxStreamBytes kept, the rest read and dropped):
// the bytes read, 0 at EOF, -1 when there was nothing (EAGAIN) or on an error.
ssize_t read_some(int fd, std::string* data) {
  char buf[65536];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0 && data->size() < kMaxStreamBytes)
    data->append(buf, std::min(static_cast<size_t>(n), kMaxStreamBytes - data->size()));
  return n;
}

std::string ended(int status, bool stopped, double timeout_s) {
  char text[128];
  if (stopped)
    std::snprintf(text, sizeof text, "was stopped after %.0f s (the case's time limit)", timeout_s);
  else if (WIFSIGNALED(status))
    std::snprintf(text, sizeof text, "was killed by signal %d", WTERMSIG(status));
  else
    std::snprintf(text, sizeof text, "exited with status %d", WEXITSTATUS(status));
  return text;
}

// The child: the case's subject, as if the program had been started for this case alone.
[[noreturn]] void be_the_case(const std::string& name, const std::string& dir, int records, pid_t parent,
                              const std::function<int(const std::string&)>& run_one) {
  ::setpgid(0, 0);  // its processes, ranks included, are stopped together
#if defined(__linux__)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the batch ended before prctl
#endif
  if (::chdir(dir.c_str()) != 0) ::_exit(1);
  ::setenv("HOME", dir.c_str(), 1);
  ::setenv("TMPDIR", dir.c_str(), 1);
  ::setenv("PWD", dir.c_str(), 1);
  become_subject(records);
  std::exit(run_one(name));
}

// Runs one case in a child; returns its frame.
std::string run_case(const std::string& name, const std::string& dir, int batch_fd, double timeout_s,
                     const std::function<int(const std::string&)>& run_one) {
  std::fflush(nullptr);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return {};
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return {};
  if (pid == 0) {
    ::close(p[0]);
    ::close(batch_fd);  // the case writes its own records only
    be_the_case(name, dir, p[1], parent, run_one);
  }
  ::close(p[1]);
  std::string records;
  bool open = true, stopped = false;
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    pollfd pf{p[0], POLLIN, 0};
    if (::poll(&pf, open ? 1 : 0, 5) > 0) open = read_some(p[0], &records) != 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      ::kill(-pid, SIGKILL);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      stopped = true;
      break;
    }
  }
  ::kill(-pid, SIGKILL);  // whatever the case left running
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }  // and its orphans, re-parented here (this process is the PID namespace's init under the grader)
  ::fcntl(p[0], F_SETFL, O_NONBLOCK);
  while (open && read_some(p[0], &records) > 0) {
  }  // what is left in the pipe; a writer still alive elsewhere is not waited for
  ::close(p[0]);
  std::string body;
  put_field(body, name);
  put_field(body, ended(status, stopped, timeout_s));
  put_field(body, stopped ? "1" : "0");
  put_field(body, records);
  std::string frame = "CAS";
  put_u64(frame, body.size());
  return frame + body;
}

}  // namespace

int run_subject_cases(const std::string& cases, int fd, double timeout_s,
                      const std::function<int(const std::string&)>& run_one) {
  std::ifstream in(cases);
  if (!in) {
    std::fprintf(stderr, "KIT_SUBJECT_CASES=%s: cannot read the list of cases\n", cases.c_str());
    return 2;
  }
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) names.push_back(line);
  namespace fs = std::filesystem;
  const fs::path home = fs::current_path();
  for (size_t k = 0; k < names.size(); ++k) {
    const fs::path dir = home / ("case-" + std::to_string(k));
    std::error_code ec;
    fs::create_directory(dir, ec);
    std::printf("==== KIT-SUBJECT-CASE %s\n", names[k].c_str());
    errno = 0;
    const std::string frame = run_case(names[k], dir.string(), fd, timeout_s, run_one);
    if (frame.empty()) {
      std::fprintf(stderr, "cannot start case %s: %s\n", names[k].c_str(), std::strerror(errno));
      return 1;
    }
    write_all(fd, frame);
    fs::remove_all(dir, ec);
  }
  return 0;
}

std::string case_file_stem(const std::string& name) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : name) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

void judge_records(const std::string& path, const std::string& status) {
  std::ifstream in(path, std::ios::binary);
  std::string stream, why;
  char buf[65536];
  while (in && (in.read(buf, sizeof buf) || in.gcount() > 0)) {
    stream.append(buf, static_cast<size_t>(in.gcount()));
    if (stream.size() > kMaxStreamBytes) break;
  }
  if (!become_judge(stream, status, &why))
    std::fprintf(stderr, "the subject's records cannot be read (%s): every part of the case is judged missing\n",
                 why.c_str());
}

void judge_case_from(const std::string& dir, const std::string& name) {
  const std::string stem = dir + "/" + case_file_stem(name);
  std::ifstream in(stem + ".status");
  std::string status((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!std::ifstream(stem + ".records")) status = "left no records the grader could find";
  judge_records(stem + ".records", status.substr(0, 1000));
}

}  // namespace kit::judge
