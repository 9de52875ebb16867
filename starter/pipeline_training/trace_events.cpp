#include "pipeline_training/trace_events.h"

#include <algorithm>

#include "pipeline_training/executor.h"

namespace kit::pp {
namespace {

nlohmann::json action_args(const Action& a, int64_t stage, const ActionNaming& naming) {
  nlohmann::json args = {{"chunk", a.chunk}, {"stage", stage}};
  if (naming.slices > 1) {
    args["microbatch"] = a.microbatch / naming.slices;
    args["slice"] = a.microbatch % naming.slices;
    args["unit"] = a.microbatch;
  } else {
    args["microbatch"] = a.microbatch;
  }
  return args;
}

trace::Event action_event(const Action& a, int64_t stage, int64_t track, double start, double end,
                          const ActionNaming& naming) {
  return {track, trace_name(a, naming), a.op == Op::Forward ? "forward" : "backward", start, end,
          action_args(a, stage, naming)};
}

// A receive inside `action`: forward receives the activation, backward the gradient. Kept
// inside the action's interval, so that the UI nests it under the action (the two clocks'
// readings are converted separately and may differ in the last bits).
trace::Event recv_event(const trace::Event& action, const Action& a, double start, double end) {
  start = std::clamp(start, action.start_s, action.end_s);
  end = std::clamp(end, start, action.end_s);
  nlohmann::json args = action.args;
  args.erase("recv_seconds");  // the action's total, not this receive's
  args["for"] = action.name;
  return {action.track, std::string(a.op == Op::Forward ? "recv activation " : "recv gradient ") + action.name,
          "recv", start, end, args};
}

}  // namespace

std::string trace_name(const Action& a, const ActionNaming& naming) {
  std::string name = a.op == Op::Forward ? "F" : "B";
  if (naming.slices > 1)
    name += " mb" + std::to_string(a.microbatch / naming.slices) + " s" + std::to_string(a.microbatch % naming.slices);
  else
    name += " mb" + std::to_string(a.microbatch);
  if (naming.virtual_chunks > 1) name += " c" + std::to_string(a.chunk);
  return name;
}

trace::Trace timeline_trace(const Timeline& t) {
  trace::Trace out;
  const ActionNaming naming{t.shape.virtual_chunks, 1};
  for (int64_t r = 0; r < static_cast<int64_t>(t.ranks.size()); ++r) {
    out.tracks.push_back({r, "rank " + std::to_string(r)});
    for (const TimedAction& a : t.ranks[static_cast<size_t>(r)])
      out.events.push_back(action_event(a.action, a.stage, r, a.start, a.end, naming));
  }
  out.other = {{"ranks", t.shape.ranks},     {"microbatches", t.shape.microbatches},
               {"virtual_chunks", t.shape.virtual_chunks}, {"makespan", t.makespan},
               {"bubble_fraction", t.bubble_fraction}};
  return out;
}

std::vector<trace::Event> measured_events(const BatchResult& batch, int64_t track, const ActionNaming& naming,
                                          int64_t step) {
  std::vector<trace::Event> out;
  const double origin = batch.clock_origin;
  for (const ActionTime& a : batch.timeline) {
    trace::Event action = action_event(a.action, a.stage, track, origin + a.start, origin + a.end, naming);
    action.args["step"] = step;
    action.args["recv_seconds"] = a.recv;
    out.push_back(action);
    for (const auto& [from, to] : a.recv_spans) out.push_back(recv_event(action, a.action, origin + from, origin + to));
  }
  return out;
}

}  // namespace kit::pp
