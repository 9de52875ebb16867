// A one-line progress display for long epochs, on stderr.
// On a terminal it redraws in place a few times a second; in a log file (CI, SLURM)
// it prints a plain line at every 10 % so logs stay short.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace kit {

class Progress {
 public:
  Progress(std::string label, int64_t total, bool enabled);
  void update(int64_t done, double loss, double tokens_per_s);
  void finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  int64_t last_decile_ = -1;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kit
