// run_collectives: the ring all-reduce built from send/recv (Problem 5.1,
// kit::ring::ring_all_reduce) timed against the dist layer's built-in all-reduce (Gloo's or
// NCCL's own algorithm) for a range of sizes, the way nccl-tests' all_reduce_perf reports them.
//
//   ./build/run_collectives --world-size 2                          # 1 KiB .. 256 MiB, x4 apart
//   ./build/run_collectives --world-size 4 --max-bytes 16M --iters 10
//   srun -n 2 ./build/run_collectives --backend nccl                  # one rank per task
//
// Per size each rank fills a tensor with its own random numbers and times --iters in-place SUMs
// (after --warmup untimed ones; the first results of the two must agree), the slowest rank's
// mean (and median). What is reported: collectives/bandwidth.h; the options: --help.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli.h"
#include "app/run.h"
#include "collectives/bandwidth.h"
#include "collectives/ring.h"
#include "dist/dist.h"
#include "kit/threads.h"

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

std::vector<int64_t> sizes_of(const CollectivesOptions& o) {
  return kit::ring::sweep_sizes(o.min_bytes, o.max_bytes, o.factor);
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

int worker_main(const CollectivesOptions& o, const kit::WorldInfo& me);

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

namespace {

int worker_main(const CollectivesOptions& o, const kit::WorldInfo& me) {
  const int rank = me.rank, W = me.world_size;
  check_options(o, W);
  kit::dist::init_process_group(o.backend, rank, W);
  kit::set_threads(o.threads);
  const torch::Device device = kit::dist::device();
  const kit::dist::Group world = kit::dist::world_group();
  const double bus = 2.0 * (W - 1) / W;
  if (rank == 0) kit::ring::print_bandwidth_heading(std::cout, o.backend, me.launcher_name(), W, o.warmup, o.iters);
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
      throw kit::Error("at " + kit::ring::human_bytes(bytes) + " the ring all-reduce's result differs from the built-in all-reduce's "
                       "by up to " + std::to_string(diff) + ": fix ring_all_reduce (the tests in ctest -R zero.Ring "
                       "say where)");
    // Every rank waits for the slowest: the largest time over the ranks.
    torch::Tensor times =
        torch::tensor({ring.mean_s, builtin.mean_s, ring.median_s, builtin.median_s}, torch::kFloat64).to(device);
    kit::dist::all_reduce(times, kit::dist::ReduceOp::MAX, world);
    times = times.cpu();
    const kit::ring::AllReduceTimes t{times[0].item<double>(), times[1].item<double>(), times[2].item<double>(),
                                      times[3].item<double>()};
    rows.push_back(kit::ring::bandwidth_row(bytes, t, W, static_cast<double>(ring_sent) / (o.warmup + o.iters), diff));
    if (rank == 0) kit::ring::print_bandwidth_line(std::cout, rows.back());
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
