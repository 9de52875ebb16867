#include "train/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kit {

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled && total > 0), tty_(isatty(STDERR_FILENO) != 0) {}

void Progress::update(int64_t done, double loss, double tokens_per_s) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (done < total_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
    last_draw_ = now;
    const int width = 30;
    const int filled = static_cast<int>(width * done / total_);
    std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld  loss %.4f  %.0f tok/s ", label_.c_str(), filled,
                 "##############################", width - filled, "", static_cast<long long>(done),
                 static_cast<long long>(total_), loss, tokens_per_s);
  } else {
    const int64_t decile = 10 * done / total_;
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(stderr, "%s %3lld%%  %lld/%lld  loss %.4f  %.0f tok/s\n", label_.c_str(),
                 static_cast<long long>(10 * decile), static_cast<long long>(done), static_cast<long long>(total_),
                 loss, tokens_per_s);
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && tty_) std::fputc('\n', stderr);
}

}  // namespace kit
