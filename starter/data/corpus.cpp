// Reading and writing the TSV corpus format, and making sure a corpus directory exists.
#include "data/corpus.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kit/errors.h"

namespace fs = std::filesystem;

namespace kit {

namespace {

const char* const kSplits[] = {"train", "valid", "test"};
const char* const kFormatFix =
    "each line must be 'source<TAB>target': one tab, both sides non-empty "
    "(format: starter/data/corpus.h)";

std::string split_path(const std::string& dir, const std::string& split) {
  return (fs::path(dir) / (split + ".tsv")).string();
}

// The line as the user would see it, shortened, with tabs made visible.
std::string show(const std::string& line) {
  std::string out;
  for (char c : line) out += c == '\t' ? std::string("<TAB>") : std::string(1, c);
  if (out.size() > 80) out = out.substr(0, 77) + "...";
  return "\"" + out + "\"";
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\v\f") == std::string::npos; }

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// True when s is well-formed UTF-8 (SentencePiece would otherwise mangle it silently).
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += len;
  }
  return true;
}

[[noreturn]] void bad_line(const std::string& path, int64_t line_no, const std::string& what,
                           const std::string& line) {
  throw Error(path + ":" + std::to_string(line_no) + ": " + what + " in line " + show(line) + ". Fix: " +
              kFormatFix + ".");
}

TranslationPair parse_line(const std::string& path, int64_t line_no, const std::string& line) {
  const size_t tabs = static_cast<size_t>(std::count(line.begin(), line.end(), '\t'));
  if (tabs == 0) bad_line(path, line_no, "no tab between source and target", line);
  if (tabs > 1) bad_line(path, line_no, std::to_string(tabs) + " tabs (expected exactly one)", line);
  if (!valid_utf8(line)) bad_line(path, line_no, "text that is not valid UTF-8", line);
  const size_t tab = line.find('\t');
  TranslationPair p{trim(line.substr(0, tab)), trim(line.substr(tab + 1))};
  if (blank(p.src)) bad_line(path, line_no, "an empty source side", line);
  if (blank(p.tgt)) bad_line(path, line_no, "an empty target side", line);
  return p;
}

// An exclusive lock on <dir>/.lock for as long as it lives, so that processes started
// together (data-parallel ranks) do not generate the same corpus at once.
class DirLock {
 public:
  explicit DirLock(const std::string& dir) {
    const std::string path = (fs::path(dir) / ".lock").string();
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create " + path + ": make the directory writable or choose another --data-dir");
    ::flock(fd_, LOCK_EX);
  }
  ~DirLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// A generated corpus carries a stamp with its settings, so that changing --n-train or
// the seed regenerates it instead of silently reusing the old one. A directory without
// the stamp is the instructor's and is never touched.
const char* const kStampName = "toy_corpus.stamp";

std::string stamp_for(const DataConfig& cfg) {
  std::ostringstream s;
  s << "toy corpus v1 seed=" << cfg.corpus_seed << " n_train=" << cfg.n_train << " n_valid=" << cfg.n_valid
    << " n_test=" << cfg.n_test << "\n";
  return s.str();
}

// What is in the directory: which splits exist, and the stamp ("" when none).
struct DirState {
  std::vector<std::string> present, missing;
  std::string stamp;
};

DirState inspect(const std::string& dir) {
  DirState st;
  std::error_code ec;  // an unreadable directory counts as empty; creating files there then fails clearly
  for (const char* split : kSplits) (fs::exists(split_path(dir, split), ec) ? st.present : st.missing).push_back(split);
  std::ifstream in(fs::path(dir) / kStampName);
  if (in) st.stamp.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return st;
}

std::string list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n + ".tsv";
  return out;
}

// Writes `text` to path through a temporary file and a rename, so that a reader never
// sees half a file.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error("cannot write " + tmp + ": make the directory writable or choose another --data-dir");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error("cannot write " + path + " (" + ec.message() + "): make the directory writable");
}

// Returns true when the directory needs (re)generating, throws for an incomplete
// directory the kit did not make.
bool needs_generating(const std::string& dir, const DirState& st, const DataConfig& cfg) {
  if (st.stamp.empty()) {
    if (st.present.empty()) return true;
    if (st.missing.empty()) return false;
    throw Error("corpus directory " + dir + " has " + list(st.present) + " but not " + list(st.missing) +
                ". Fix: supply all three splits (train.tsv, valid.tsv, test.tsv, format in "
                "starter/data/corpus.h), or point --data-dir at an empty directory to get the toy corpus.");
  }
  return !st.missing.empty() || st.stamp != stamp_for(cfg);
}

void check_sizes(const DataConfig& cfg) {
  if (cfg.n_train < 1 || cfg.n_valid < 1 || cfg.n_test < 1)
    throw Error("corpus sizes n_train=" + std::to_string(cfg.n_train) + " n_valid=" + std::to_string(cfg.n_valid) +
                " n_test=" + std::to_string(cfg.n_test) + ": each split needs at least one pair");
}

}  // namespace

std::vector<TranslationPair> read_parallel_tsv(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error(path + (ec ? ": cannot be accessed (" + ec.message() + ")." : std::string(": file not found.")) +
                " Fix: supply train.tsv, valid.tsv and test.tsv in the corpus directory "
                "(format in starter/data/corpus.h), or point --data-dir at an empty directory to get the toy corpus.");
  if (fs::is_directory(path)) throw Error(path + ": is a directory, expected a .tsv file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be opened for reading. Fix: check its permissions.");

  std::vector<TranslationPair> pairs;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();               // Windows line ends
    if (line_no == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // UTF-8 byte-order mark
    if (blank(line) || line[0] == '#') continue;
    pairs.push_back(parse_line(path, line_no, line));
  }
  if (pairs.empty())
    throw Error(path + ": the file is empty (no sentence pairs). Fix: add one 'source<TAB>target' pair per line.");
  return pairs;
}

void write_parallel_tsv(const std::string& path, const std::vector<TranslationPair>& pairs) {
  std::string text;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const TranslationPair& p = pairs[i];
    for (const std::string* side : {&p.src, &p.tgt})
      if (blank(*side) || side->find_first_of("\t\n\r") != std::string::npos)
        throw Error("write_parallel_tsv(" + path + "): pair " + std::to_string(i) +
                    " has an empty side or a tab or line break inside a sentence; the TSV format cannot hold it");
    text += p.src + "\t" + p.tgt + "\n";
  }
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  write_atomically(path, text);
}

void ensure_corpus(const DataConfig& cfg) {
  if (cfg.dir.empty()) throw Error("the corpus directory is empty: pass --data-dir");
  DirState st = inspect(cfg.dir);
  if (!needs_generating(cfg.dir, st, cfg)) return;

  check_sizes(cfg);
  std::error_code ec;
  fs::create_directories(cfg.dir, ec);
  if (ec) throw Error("cannot create corpus directory " + cfg.dir + " (" + ec.message() + "): choose another --data-dir");
  DirLock lock(cfg.dir);
  st = inspect(cfg.dir);  // another process may have finished it while we waited
  if (!needs_generating(cfg.dir, st, cfg)) return;

  // The stamp says "incomplete" while the splits are written and gets its final value
  // last: until then other processes see a stamp that does not match and wait for the
  // lock, instead of reading a half-written corpus (or taking it for a partial one).
  const std::string stamp_path = (fs::path(cfg.dir) / kStampName).string();
  write_atomically(stamp_path, "incomplete\n");
  Corpus c = generate_toy_splits(cfg.n_train, cfg.n_valid, cfg.n_test, cfg.corpus_seed);
  write_parallel_tsv(split_path(cfg.dir, "train"), c.train);
  write_parallel_tsv(split_path(cfg.dir, "valid"), c.valid);
  write_parallel_tsv(split_path(cfg.dir, "test"), c.test);
  write_atomically(stamp_path, stamp_for(cfg));
}

Corpus load_corpus(const DataConfig& cfg) {
  check_sizes(cfg);
  ensure_corpus(cfg);
  auto read = [&](const char* split, int64_t n) {
    std::vector<TranslationPair> pairs = read_parallel_tsv(split_path(cfg.dir, split));
    if (static_cast<int64_t>(pairs.size()) > n) pairs.resize(static_cast<size_t>(n));
    return pairs;
  };
  return {read("train", cfg.n_train), read("valid", cfg.n_valid), read("test", cfg.n_test)};
}

}  // namespace kit
