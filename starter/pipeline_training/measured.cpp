// A pipeline rank's measured batches as JSON and tensors (see pipeline_training/measured.h).
#include "pipeline_training/measured.h"

#include "kit/memory.h"

#include <torch/torch.h>

#include <algorithm>

#include "pipeline_training/simulate.h"

namespace kit::pp {

nlohmann::json action_row(const ActionTime& a) {
  return {a.action.op == Op::Forward ? 0 : 1, a.action.microbatch, a.action.chunk, a.stage, a.start, a.end, a.recv};
}

nlohmann::json step_json(const BatchResult& r, int64_t step) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& a : r.timeline) rows.push_back(action_row(a));
  return {{"step", step}, {"clock_origin", r.clock_origin}, {"actions", rows}};
}

torch::Tensor timeline_tensor(const std::vector<ActionTime>& t) {
  auto out = torch::zeros({static_cast<int64_t>(t.size()), 6}, torch::kFloat64);
  for (size_t k = 0; k < t.size(); ++k) {
    const auto& a = t[k];
    const double row[6] = {a.action.op == Op::Forward ? 0.0 : 1.0, static_cast<double>(a.action.microbatch),
                           static_cast<double>(a.action.chunk), static_cast<double>(a.stage), a.start, a.end};
    for (int c = 0; c < 6; ++c) out[static_cast<int64_t>(k)][c] = row[c];
  }
  return out;
}

nlohmann::json rank_timeline_json(const std::vector<ActionTime>& t, const PipelineShape& shape, int rank,
                                  int64_t peak_kept) {
  Timeline tl;
  tl.shape = shape;
  tl.ranks.resize(static_cast<size_t>(shape.ranks));
  tl.peak_in_flight.assign(static_cast<size_t>(shape.ranks), 0);
  tl.peak_in_flight[static_cast<size_t>(rank)] = peak_kept;
  double busy = 0;
  for (const auto& a : t) {
    tl.ranks[static_cast<size_t>(rank)].push_back({a.action, a.stage, a.start, a.end});
    tl.makespan = std::max(tl.makespan, a.end);
    busy += a.end - a.start;
  }
  tl.bubble_fraction = tl.makespan > 0 ? 1.0 - busy / tl.makespan : 0.0;  // this rank's idle share
  nlohmann::json j = timeline_to_json(tl);
  j["rank"] = rank;
  j["measured"] = true;
  return j;
}

nlohmann::json memory_json(bool counted, const torch::Device& device, const BatchMemory& m) {
  if (!counted) return {{"measured", false}, {"why", "run without --memory"}};
  const std::string why = kit::memory::why_not_counted(device);
  if (!why.empty()) return {{"measured", false}, {"why", "not measured: " + why}};
  return {{"measured", true}, {"device", device.str()}, {"peak_bytes", m.peak}, {"kept_bytes", m.kept}};
}

}  // namespace kit::pp
