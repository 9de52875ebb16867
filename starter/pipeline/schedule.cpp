#include "pipeline/schedule.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

namespace kit {

std::string to_string(const Step& s) {
  return "(" + std::to_string(s.microbatch) + "," + std::to_string(s.partition) + ")";
}

std::string to_string(const Clock& clock) {
  std::string out;
  for (const auto& s : clock) out += (out.empty() ? "" : " ") + to_string(s);
  return out;
}

std::string to_string(const Schedule& schedule) {
  std::string out;
  for (size_t k = 0; k < schedule.size(); ++k) out += (k ? " | " : "") + to_string(schedule[k]);
  return out.empty() ? "(no clocks)" : out;
}

namespace {
std::string centered(const std::string& s, size_t width) {
  if (s.size() >= width) return s;
  const size_t left = (width - s.size()) / 2;
  return std::string(left, ' ') + s + std::string(width - s.size() - left, ' ');
}
}  // namespace

std::string format_schedule_table(const Schedule& schedule, int64_t num_partitions) {
  const int64_t n = std::max<int64_t>(num_partitions, 0);
  const size_t width = 13;
  std::ostringstream out;
  out << "clock";
  for (int64_t j = 0; j < n; ++j) out << " |" << centered("partition " + std::to_string(j), width);
  out << "\n";
  for (size_t k = 0; k < schedule.size(); ++k) {
    std::vector<std::string> cells(static_cast<size_t>(n));
    std::string stray;  // steps outside the columns, shown rather than hidden
    for (const auto& s : schedule[k]) {
      if (s.partition >= 0 && s.partition < n) {
        auto& cell = cells[static_cast<size_t>(s.partition)];
        cell += (cell.empty() ? "" : " ") + to_string(s);
      } else {
        stray += " " + to_string(s);
      }
    }
    std::string k_str = std::to_string(k);
    out << std::string(5 - std::min<size_t>(5, k_str.size()), ' ') << k_str;
    for (const auto& c : cells) out << " |" << centered(c, width);
    if (!stray.empty()) out << " | outside the partitions:" << stray;
    out << "\n";
  }
  return out.str();
}

nlohmann::json schedule_to_json(const Schedule& schedule, int64_t num_microbatches, int64_t num_partitions) {
  nlohmann::json clocks = nlohmann::json::array();
  for (const auto& clock : schedule) {
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : clock) steps.push_back({s.microbatch, s.partition});
    clocks.push_back(steps);
  }
  return {{"microbatches", num_microbatches}, {"partitions", num_partitions}, {"clocks", clocks}};
}

std::string format_schedule_report(const Schedule& s, int64_t m, int64_t n) {
  std::ostringstream out;
  out << m << " micro-batches on " << n << " partitions: " << s.size() << " clocks (m + n - 1 = " << m + n - 1
      << "); (i,j) is micro-batch i on partition j\n\n"
      << format_schedule_table(s, n);
  // Forward-only GPipe with equal stages: m * n busy slots out of (m + n - 1) * n.
  const double busy = static_cast<double>(m) / static_cast<double>(s.size());
  out << "\nevery partition is busy " << m << " of " << s.size() << " clocks (" << 100.0 * busy << " %), idle "
      << 100.0 * (1 - busy) << " % (the bubble)\n";
  return out.str();
}

}  // namespace kit
