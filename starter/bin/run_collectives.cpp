// run_collectives: the ring all-reduce built from send/recv (Problem 5.1,
// kit::ring::ring_all_reduce) timed against the dist layer's built-in all-reduce
// (kit::dist::all_reduce on the world group: Gloo's or NCCL's own algorithm), the way
// nccl-tests' all_reduce_perf reports them.
//
//   ./build/run_collectives --world-size 2                          # 1 KiB .. 256 MiB, x4 apart
//   ./build/run_collectives --world-size 4 --max-bytes 16M --iters 10
//   srun -n 2 ./build/run_collectives --backend nccl                  # one rank per task
//
// As in the other multi-process programs, without RANK or an srun step in the environment
// the program is the launcher: it checks the flags, serves the rendezvous and starts n =
// --world-size copies of itself.
//
// For every size (float32, --min-bytes to --max-bytes, --factor apart) each rank fills a
// source tensor with its own random numbers; each iteration copies it into the buffer, waits
// at a barrier (neither untimed), then times one in-place SUM over the world: the ring's, then
// the built-in's, on separate buffers. The first --warmup iterations are not timed; after the
// first one the two results must agree (torch::allclose, rtol 1e-5, atol 1e-5 x the largest
// value; else a kit::Error naming the size). A size's time is the mean over the --iters timed
// operations, the largest over the ranks (every rank waits for the slowest); the median is
// reported too (*_time_median_s: less moved by a stall on a busy machine). Per size:
//   time_s (ring_time_s, builtin_time_s), algbw = bytes / time, and busbw = algbw x 2(n-1)/n
//   (nccl-tests' bus bandwidth: what each rank's link carries in a bandwidth-optimal
//   all-reduce, comparable across n), ratio = ring_time_s / builtin_time_s (< 1: the ring
//   is faster), ring_send_bytes_per_op (counted by the world group: 2(n-1)/n x bytes, up to
//   the last chunk's rounding), max_abs_diff between the two results.
// Printed as a table by rank 0 and written (--out, {rank} and {world} replaced) by every rank.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "collectives/ring.h"
#include "dist/dist.h"
#include "train/loop.h"

namespace {

struct CollectivesOptions {
  int world_size = 2;
  std::string min_bytes = "1K", max_bytes = "256M";
  int64_t factor = 4;
  int64_t warmup = 5, iters = 20;  // nccl-tests' defaults
  int64_t threads = 1;
  uint64_t seed = 42;
  std::string backend = "gloo";
  int port = 0;
  std::string out = "runs/collectives/{world}/rank{rank}.json";
};

// "1024", "1K", "4M", "1G" (powers of 1024) -> bytes; kit::Error naming the flag otherwise.
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

std::vector<int64_t> sizes_of(const CollectivesOptions& o) {
  const int64_t lo = parse_bytes(o.min_bytes, "--min-bytes"), hi = parse_bytes(o.max_bytes, "--max-bytes");
  if (lo % 4 != 0 || hi % 4 != 0)
    throw kit::Error("--min-bytes and --max-bytes must be multiples of 4 (float32 elements): got " +
                     std::to_string(lo) + " and " + std::to_string(hi));
  if (lo > hi)
    throw kit::Error("--min-bytes " + o.min_bytes + " is larger than --max-bytes " + o.max_bytes);
  if (o.factor < 2) throw kit::Error("--factor must be at least 2 (got " + std::to_string(o.factor) + ")");
  std::vector<int64_t> out;
  for (int64_t b = lo; b <= hi; b *= o.factor) {
    out.push_back(b);
    if (b > hi / o.factor) break;
  }
  return out;
}

void check_options(const CollectivesOptions& o, int world_size) {
  if (world_size < 2)
    throw kit::Error("--world-size must be at least 2 (got " + std::to_string(world_size) +
                     "): with one rank an all-reduce moves nothing");
  if (o.iters < 1) throw kit::Error("--iters must be at least 1 (got " + std::to_string(o.iters) + ")");
  if (o.warmup < 1)
    throw kit::Error("--warmup must be at least 1 (got " + std::to_string(o.warmup) +
                     "): the first operation's results are the ones compared");
  sizes_of(o);
}

struct Timing {
  double mean_s = 0, median_s = 0;
  torch::Tensor first;  // the result of the first operation
};

// --warmup + --iters operations of `op` on `buffer`, each from `source`, each after a barrier.
template <typename Op>
Timing time_op(const CollectivesOptions& o, const torch::Tensor& source, const torch::Tensor& buffer, Op op) {
  Timing t;
  std::vector<double> timed;
  for (int64_t i = 0; i < o.warmup + o.iters; ++i) {
    buffer.copy_(source);
    kit::dist::barrier();
    const auto t0 = std::chrono::steady_clock::now();
    op(buffer);
    if (buffer.is_cuda()) torch::cuda::synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i == 0) t.first = buffer.clone();
    if (i >= o.warmup) timed.push_back(s);
  }
  for (const double s : timed) t.mean_s += s / static_cast<double>(timed.size());
  t.median_s = kit::median(timed);
  return t;
}

std::string human(int64_t bytes) {
  if (bytes >= (1LL << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1LL << 10)) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

int worker_main(const CollectivesOptions& o, const kit::WorldInfo& me) {
  const int rank = me.rank, W = me.world_size;
  check_options(o, W);
  kit::dist::init_process_group(o.backend, rank, W);
  kit::set_threads(o.threads);
  const torch::Device device = kit::dist::device();
  const kit::dist::Group world = kit::dist::world_group();
  const double bus = 2.0 * (W - 1) / W;
  if (rank == 0)
    std::cout << "ring all-reduce vs the built-in all-reduce (" << o.backend << ", " << me.launcher_name() << "), n = " << W
              << ", float32, " << o.warmup << " warmup + " << o.iters << " timed operations per size\n"
              << std::setw(10) << "size" << std::setw(13) << "ring ms" << std::setw(13) << "built-in ms"
              << std::setw(15) << "ring busbw" << std::setw(15) << "built-in busbw" << std::setw(10) << "ratio"
              << "   (busbw in GB/s; ratio = ring time / built-in time)" << std::endl;
  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t bytes : sizes_of(o)) {
    const int64_t numel = bytes / 4;
    torch::manual_seed(o.seed + static_cast<uint64_t>(rank));
    const torch::Tensor source = torch::randn({numel}, torch::TensorOptions().dtype(torch::kFloat32)).to(device);
    const torch::Tensor ring_buffer = torch::empty_like(source), builtin_buffer = torch::empty_like(source);
    world.reset_counters();
    const Timing ring = time_op(o, source, ring_buffer, [&](const torch::Tensor& t) {
      kit::ring::ring_all_reduce(t, world);
    });
    const int64_t ring_sent = world.counters().send_bytes;
    const Timing builtin = time_op(o, source, builtin_buffer, [&](const torch::Tensor& t) {
      kit::dist::all_reduce(t, kit::dist::ReduceOp::SUM, world);
    });
    const double scale = builtin.first.abs().max().item<double>();
    const double diff = (ring.first - builtin.first).abs().max().item<double>();
    if (!torch::allclose(ring.first, builtin.first, 1e-5, 1e-5 * std::max(scale, 1.0)))
      throw kit::Error("at " + human(bytes) + " the ring all-reduce's result differs from the built-in all-reduce's "
                       "by up to " + std::to_string(diff) + ": fix ring_all_reduce (the tests in ctest -R zero.Ring "
                       "say where)");
    // Every rank waits for the slowest: the largest time over the ranks.
    torch::Tensor times =
        torch::tensor({ring.mean_s, builtin.mean_s, ring.median_s, builtin.median_s}, torch::kFloat64).to(device);
    kit::dist::all_reduce(times, kit::dist::ReduceOp::MAX, world);
    times = times.cpu();
    const double ring_s = times[0].item<double>(), builtin_s = times[1].item<double>();
    const double b = static_cast<double>(bytes);
    nlohmann::json row = {{"bytes", bytes},
                          {"elements", numel},
                          {"ring_time_s", ring_s},
                          {"builtin_time_s", builtin_s},
                          {"ring_time_median_s", times[2].item<double>()},
                          {"builtin_time_median_s", times[3].item<double>()},
                          {"ring_algbw_GBps", b / ring_s / 1e9},
                          {"builtin_algbw_GBps", b / builtin_s / 1e9},
                          {"ring_busbw_GBps", bus * b / ring_s / 1e9},
                          {"builtin_busbw_GBps", bus * b / builtin_s / 1e9},
                          {"ratio_ring_to_builtin", ring_s / builtin_s},
                          {"ring_send_bytes_per_op", static_cast<double>(ring_sent) / (o.warmup + o.iters)},
                          {"formula_send_bytes_per_op", bus * b},
                          {"max_abs_diff", diff}};
    rows.push_back(row);
    if (rank == 0)
      std::cout << std::setw(10) << human(bytes) << std::fixed << std::setprecision(3) << std::setw(13)
                << 1e3 * ring_s << std::setw(13) << 1e3 * builtin_s << std::setw(15)
                << row["ring_busbw_GBps"].get<double>() << std::setw(15) << row["builtin_busbw_GBps"].get<double>()
                << std::setw(10) << row["ratio_ring_to_builtin"].get<double>() << std::endl;
  }
  if (!o.out.empty()) {
    const nlohmann::json m = {{"program", "run_collectives"}, {"world_size", W}, {"rank", rank},
                              {"backend", o.backend}, {"launcher", me.launcher_name()}, {"dtype", "float32"},
                              {"warmup", o.warmup}, {"iters", o.iters}, {"threads", o.threads},
                              {"busbw_factor", bus}, {"sizes", rows}};
    kit::write_rank_json(o.out, rank, W, m.dump(1));
  }
  kit::dist::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The ring all-reduce built from send/recv (kit::ring::ring_all_reduce) against the dist layer's "
               "built-in all-reduce: float32, time per operation, algorithm and bus bandwidth for a range of sizes, "
               "and a check that both give the same sums."};
  CollectivesOptions o;
  app.add_option("--world-size,--world_size", o.world_size,
                 "Ranks n the kit starts (under srun or torchrun: taken from there)")
      ->capture_default_str();
  app.add_option("--min-bytes", o.min_bytes, "Smallest tensor (bytes; K, M, G: powers of 1024)")
      ->capture_default_str();
  app.add_option("--max-bytes", o.max_bytes, "Largest tensor")->capture_default_str();
  app.add_option("--factor", o.factor, "Each size is this many times the previous one")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Untimed operations per size and algorithm (the first one's results are "
                                       "compared)")
      ->capture_default_str();
  app.add_option("--iters", o.iters, "Timed operations per size and algorithm")->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op threads per process (the ring's additions)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the random tensors (rank r uses seed + r)")->capture_default_str();
  app.add_option("--backend", o.backend, "gloo (CPU) or nccl (one GPU per rank)")
      ->check(CLI::IsMember({"gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--port", o.port, "Rendezvous port when the kit starts the ranks (default: MASTER_PORT if set, "
                                   "else a free port)");
  app.add_option("--out", o.out, "Results JSON per rank ({rank}, {world} replaced; \"\": none)")
      ->capture_default_str();
  app.footer("Per size: time per operation (mean of --iters, the slowest rank's; the median too), algbw = "
             "bytes / time, busbw = 2(n-1)/n x algbw (nccl-tests' definition), the ratio ring time / built-in "
             "time, and the bytes the ring sent per operation (counted).");
  return kit::guarded_main(argc, argv, app, [&] {
    return kit::run_ranks(  // a bad flag fails in the launcher, before any process
        app.count("--world-size") > 0 ? o.world_size : 0, o.world_size, o.port, "ranks (" + o.backend + ")",
        [&] { check_options(o, o.world_size); }, [&](const kit::WorldInfo& w) { return worker_main(o, w); });
  });
}
