#include "collectives/bandwidth.h"

#include <iomanip>

#include "kit/errors.h"

namespace kit::ring {

int64_t parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  int64_t scale = 1;
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k" || suffix == "KiB" || suffix == "KB") scale = 1024;
  else if (suffix == "M" || suffix == "MiB" || suffix == "MB") scale = 1024 * 1024;
  else if (suffix == "G" || suffix == "GiB" || suffix == "GB") scale = 1024LL * 1024 * 1024;
  else if (!suffix.empty()) used = 0;
  if (used == 0 || value < 1)
    throw kit::Error(flag + " " + text + " is not a size: give a positive number of bytes, optionally with K, M "
                     "or G (powers of 1024), e.g. 1K or 256M");
  return value * scale;
}

std::vector<int64_t> sweep_sizes(const std::string& min_bytes, const std::string& max_bytes, int64_t factor) {
  const int64_t lo = parse_bytes(min_bytes, "--min-bytes"), hi = parse_bytes(max_bytes, "--max-bytes");
  if (lo % 4 != 0 || hi % 4 != 0)
    throw kit::Error("--min-bytes and --max-bytes must be multiples of 4 (float32 elements): got " +
                     std::to_string(lo) + " and " + std::to_string(hi));
  if (lo > hi)
    throw kit::Error("--min-bytes " + min_bytes + " is larger than --max-bytes " + max_bytes);
  if (factor < 2) throw kit::Error("--factor must be at least 2 (got " + std::to_string(factor) + ")");
  std::vector<int64_t> out;
  for (int64_t b = lo; b <= hi; b *= factor) {
    out.push_back(b);
    if (b > hi / factor) break;
  }
  return out;
}

std::string human_bytes(int64_t bytes) {
  if (bytes >= (1LL << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1LL << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

nlohmann::json bandwidth_row(int64_t bytes, const AllReduceTimes& t, int world_size, double ring_send_bytes_per_op,
                             double max_abs_diff) {
  const double bus = 2.0 * (world_size - 1) / world_size, b = static_cast<double>(bytes);
  return {{"bytes", bytes},
          {"elements", bytes / 4},
          {"ring_time_s", t.ring_s},
          {"builtin_time_s", t.builtin_s},
          {"ring_time_median_s", t.ring_median_s},
          {"builtin_time_median_s", t.builtin_median_s},
          {"ring_algbw_GBps", b / t.ring_s / 1e9},
          {"builtin_algbw_GBps", b / t.builtin_s / 1e9},
          {"ring_busbw_GBps", bus * b / t.ring_s / 1e9},
          {"builtin_busbw_GBps", bus * b / t.builtin_s / 1e9},
          {"ratio_ring_to_builtin", t.ring_s / t.builtin_s},
          {"ring_send_bytes_per_op", ring_send_bytes_per_op},
          {"formula_send_bytes_per_op", bus * b},
          {"max_abs_diff", max_abs_diff}};
}

void print_bandwidth_heading(std::ostream& out, const std::string& backend, const std::string& launcher,
                             int world_size, int64_t warmup, int64_t iters) {
  out << "ring all-reduce vs the built-in all-reduce (" << backend << ", " << launcher << "), n = " << world_size
      << ", float32, " << warmup << " warmup + " << iters << " timed operations per size\n"
      << std::setw(10) << "size" << std::setw(13) << "ring ms" << std::setw(13) << "built-in ms" << std::setw(15)
      << "ring busbw" << std::setw(15) << "built-in busbw" << std::setw(10) << "ratio"
      << "   (busbw in GB/s; ratio = ring time / built-in time)" << std::endl;
}

void print_bandwidth_line(std::ostream& out, const nlohmann::json& row) {
  out << std::setw(10) << human_bytes(row["bytes"].get<int64_t>()) << std::fixed << std::setprecision(3)
      << std::setw(13) << 1e3 * row["ring_time_s"].get<double>() << std::setw(13)
      << 1e3 * row["builtin_time_s"].get<double>() << std::setw(15) << row["ring_busbw_GBps"].get<double>()
      << std::setw(15) << row["builtin_busbw_GBps"].get<double>() << std::setw(10)
      << row["ratio_ring_to_builtin"].get<double>() << std::endl;
}

}  // namespace kit::ring
