// What run_collectives reports of an all-reduce benchmark, the way nccl-tests' all_reduce_perf
// does: the sizes it sweeps, and per size the times, algorithm and bus bandwidth (busbw =
// algbw x 2(n-1)/n), as a JSON row and as a table line. No tensors.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace kit::ring {

// "1024", "1K", "4M", "1G" (powers of 1024) -> bytes; kit::Error naming `flag` otherwise.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// --min-bytes to --max-bytes, --factor apart (the flags' texts; kit::Error naming them when
// a size is not a multiple of 4, min > max or factor < 2).
std::vector<int64_t> sweep_sizes(const std::string& min_bytes, const std::string& max_bytes, int64_t factor);

std::string human_bytes(int64_t bytes);  // "4 MiB", "16 KiB", "12 B"

// One size's results, the times the slowest rank's.
struct AllReduceTimes {
  double ring_s = 0, builtin_s = 0, ring_median_s = 0, builtin_median_s = 0;
};

// {"bytes", "elements", "ring_time_s", ..., "ring_busbw_GBps", "ratio_ring_to_builtin",
//  "ring_send_bytes_per_op", "formula_send_bytes_per_op", "max_abs_diff"} for world size n.
nlohmann::json bandwidth_row(int64_t bytes, const AllReduceTimes& t, int world_size, double ring_send_bytes_per_op,
                             double max_abs_diff);

// The table's heading (what runs, n, the operations per size, the columns) and one line per row.
void print_bandwidth_heading(std::ostream& out, const std::string& backend, const std::string& launcher,
                             int world_size, int64_t warmup, int64_t iters);
void print_bandwidth_line(std::ostream& out, const nlohmann::json& row);

}  // namespace kit::ring
