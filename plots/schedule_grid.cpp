#include "schedule_grid.h"

#include <algorithm>
#include <cctype>

#include "kit/errors.h"

namespace kit::plots {

namespace {
constexpr int kMaxMicroBatches = 64;  // beyond this the cells are too small to label
constexpr int kMaxStages = 32;

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 6 &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}
}  // namespace

ScheduleSize parse_schedule_size(const std::string& text) {
  const auto x = text.find_first_of("xX");
  const std::string m = x == std::string::npos ? "" : text.substr(0, x);
  const std::string n = x == std::string::npos ? "" : text.substr(x + 1);
  if (!all_digits(m) || !all_digits(n))
    throw Error("schedule size '" + text + "' is not MxN: write e.g. 4x3 for 4 micro-batches on 3 stages");
  ScheduleSize s{std::stoi(m), std::stoi(n)};
  if (s.micro_batches < 1 || s.stages < 1)
    throw Error("schedule size '" + text + "': need at least 1 micro-batch and 1 stage");
  if (s.micro_batches > kMaxMicroBatches || s.stages > kMaxStages)
    throw Error("schedule size '" + text + "' is too large to draw readably: at most " +
                std::to_string(kMaxMicroBatches) + " micro-batches and " + std::to_string(kMaxStages) + " stages");
  return s;
}

std::vector<std::vector<std::pair<int, int>>> schedule_clocks(int m, int n) {
  std::vector<std::vector<std::pair<int, int>>> clocks;
  for (int k = 0; k < m + n - 1; ++k) {
    std::vector<std::pair<int, int>> clock;
    for (int j = std::max(0, k - m + 1); j <= std::min(k, n - 1); ++j) clock.emplace_back(k - j, j);
    clocks.push_back(clock);
  }
  return clocks;
}

}  // namespace kit::plots
