#include "gnuplot_png.h"

#include <gnuplot-iostream.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

#include "kit/errors.h"

namespace fs = std::filesystem;

namespace kit::plots {
namespace {

// `s` as one word for /bin/sh.
std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == '\n' || s[i] == '\r')) ++i;
  return s.substr(i);
}

// A uniquely named empty file in the temp directory, removed when this goes away.
class TempFile {
 public:
  explicit TempFile(const std::string& stem) {
    std::string pattern = (fs::temp_directory_path() / (stem + "-XXXXXX")).string();
    const int fd = mkstemp(pattern.data());
    if (fd < 0) throw Error("cannot create a temporary file in " + fs::temp_directory_path().string() +
                            ": check that TMPDIR is writable");
    close(fd);
    path_ = pattern;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// If gnuplot dies early, writing to its pipe raises SIGPIPE, which would kill this
// process before it could say why. Ignore it while the pipe is open: writes then fail
// quietly, and the exit status tells the story.
class IgnoreSigpipe {
 public:
  IgnoreSigpipe() {
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &saved_);
  }
  ~IgnoreSigpipe() { sigaction(SIGPIPE, &saved_, nullptr); }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  struct sigaction saved_ {};
};

std::string how_to_install(const std::string& gnuplot) {
  return "install gnuplot (Debian/Ubuntu: apt-get install gnuplot-nox, or scripts/install_deps.sh), or pass "
         "--gnuplot /path/to/gnuplot (tried '" + gnuplot + "')";
}

std::string probe_png_terminal(const std::string& gnuplot) {
  IgnoreSigpipe guard;
  const std::string cmd = sh_quote(gnuplot) + " -e 'set terminal' </dev/null 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw Error("cannot start a shell to run gnuplot: " + how_to_install(gnuplot));
  std::string listing;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) listing.append(buf, got);
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("cannot run gnuplot: " + how_to_install(gnuplot) + "\n" + trim(listing));
  bool cairo = false, gd = false;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    cairo = cairo || name == "pngcairo";
    gd = gd || name == "png";
  }
  if (cairo) return "pngcairo";
  if (gd) return "png";
  throw Error("this gnuplot (" + gnuplot + ") has no PNG terminal (neither pngcairo nor png): install a full "
              "gnuplot build (Debian/Ubuntu: apt-get install gnuplot-nox)");
}

}  // namespace

std::string png_terminal(const std::string& gnuplot) {
  static std::mutex mutex;
  static std::map<std::string, std::string> cache;  // one probe per gnuplot per process
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(gnuplot);
  if (it == cache.end()) it = cache.emplace(gnuplot, probe_png_terminal(gnuplot)).first;
  return it->second;
}

std::string gp_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

bool is_png_file(const std::string& path) {
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::ifstream in(path, std::ios::binary);
  unsigned char head[8] = {};
  if (!in.read(reinterpret_cast<char*>(head), 8)) return false;
  for (int i = 0; i < 8; ++i)
    if (head[i] != kSignature[i]) return false;
  return true;
}

void render_png(const std::string& png_path, const PngOptions& options, const std::function<void(gnuplotio::Gnuplot&)>& draw) {
  const std::string terminal = png_terminal(options.gnuplot);
  const fs::path out(png_path);
  std::error_code ec;
  if (out.has_parent_path()) {
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw Error("cannot create directory " + out.parent_path().string() + " for " + png_path + ": " + ec.message());
  }
  fs::remove(out, ec);
  if (fs::exists(out)) throw Error("cannot replace " + png_path + ": remove it or check its permissions");

  TempFile err("plot_figures-gnuplot-err"), status("plot_figures-gnuplot-status");
  {
    IgnoreSigpipe guard;
    Gnuplot gp(sh_quote(options.gnuplot) + " 2>" + sh_quote(err.path()) + "; echo $? >" + sh_quote(status.path()));
    gp << "set terminal " << terminal << " size " << options.width << "," << options.height
       << " noenhanced font \"sans,11\"\n"
       << "set encoding utf8\n"
       << "set output " << gp_quote(png_path) << "\n";
    draw(gp);
    gp << "unset output\n"  // closes the file, so it is complete when gnuplot exits
       << "exit\n";
  }  // ~Gnuplot closes the pipe and waits for gnuplot to finish
  const std::string exit_status = trim(read_all(status.path()));
  const std::string messages = trim(read_all(err.path()));
  if (exit_status != "0") {
    fs::remove(out, ec);  // a half-drawn figure is worse than none
    throw Error("gnuplot failed to draw " + png_path + " (exit status " +
                (exit_status.empty() ? std::string("unknown") : exit_status) + ")" +
                (messages.empty() ? std::string() : ":\n" + messages) +
                (exit_status == "127" ? "\n" + how_to_install(options.gnuplot) : std::string()));
  }
  if (!is_png_file(png_path))
    throw Error("gnuplot finished but " + png_path + " is not a PNG file" +
                (messages.empty() ? std::string() : ":\n" + messages));
  if (!messages.empty()) std::cerr << "gnuplot (" << png_path << "): " << messages << "\n";
}

}  // namespace kit::plots
