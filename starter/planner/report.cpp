#include "planner/report.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kit/errors.h"

namespace kit::planner {

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 1 ? "%.2f s" : "%.1f ms", s >= 1 ? s : s * 1e3);
  return buf;
}

std::string gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  return buf;
}

}  // namespace

void print_cost_table(const std::vector<Cost>& costs, std::ostream& out) {
  char line[512];
  std::snprintf(line, sizeof line, "%-4s %-40s %5s %10s %10s %10s %10s %10s %10s %7s %10s %10s\n", "#", "strategy", "m",
                "step", "pipeline", "data", "compute", "tensor", "p2p", "bubble", "memory", "of");
  out << line;
  for (size_t k = 0; k < costs.size(); ++k) {
    const Cost& c = costs[k];
    std::snprintf(line, sizeof line, "%-4zu %-40s %5lld %10s %10s %10s %10s %10s %10s %6.1f%% %10s %10s%s\n", k + 1,
                  c.strategy.label().c_str(), static_cast<long long>(c.micro_batches), seconds(c.total).c_str(),
                  seconds(c.pipeline).c_str(), seconds(c.data).c_str(), seconds(c.compute).c_str(),
                  seconds(c.tensor).c_str(), seconds(c.p2p).c_str(), 100 * c.bubble, gib(c.memory.total()).c_str(),
                  gib(c.memory_limit).c_str(), c.fits ? "" : "  does not fit");
    out << line;
  }
  out << "step: predicted seconds per step; compute, tensor (all-reduces), p2p (sends): the slowest stage's, per "
         "micro-batch; memory: the rank closest to its device's limit\n";
}

void write_costs_json(const std::string& path, const Cluster& cluster, const std::string& model, int64_t batch,
                      int64_t seq_len, const std::vector<Cost>& costs) {
  nlohmann::json j = {{"cluster", to_json(cluster)},
                      {"model", model},
                      {"batch", batch},
                      {"seq_len", seq_len},
                      {"strategies", nlohmann::json::array()}};
  for (const auto& c : costs) j["strategies"].push_back(to_json(c));
  std::ofstream f(path);
  if (!(f << j.dump(1) << "\n")) throw kit::Error("cannot write " + path);
}

}  // namespace kit::planner
