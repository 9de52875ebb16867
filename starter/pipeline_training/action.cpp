#include "pipeline_training/action.h"

#include <nlohmann/json.hpp>

#include "kit/errors.h"

namespace kit::pp {

std::string to_string(const Action& a) {
  std::string s = (a.op == Op::Forward ? "F" : "B") + std::to_string(a.microbatch);
  if (a.chunk != 0) s += "." + std::to_string(a.chunk);
  return s;
}

std::string to_string(const RankSchedule& s) {
  std::string out;
  for (const Action& a : s) out += (out.empty() ? "" : " ") + to_string(a);
  return out;
}

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved: return "interleaved";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b" || name == "pipedream-flush") return ScheduleKind::OneFOneB;
  if (name == "interleaved") return ScheduleKind::Interleaved;
  throw Error("unknown schedule kind '" + name + "': use gpipe, 1f1b (or pipedream-flush) or interleaved");
}

nlohmann::json to_json(const Action& a) {
  return {{"op", a.op == Op::Forward ? "F" : "B"}, {"microbatch", a.microbatch}, {"chunk", a.chunk}};
}

Action action_from_json(const nlohmann::json& j) {
  const std::string where = "pipeline action " + j.dump();
  if (!j.is_object()) throw Error(where + " is not an object {\"op\": \"F\"|\"B\", \"microbatch\": i, \"chunk\": c}");
  for (const char* key : {"op", "microbatch"})
    if (!j.contains(key)) throw Error(where + " has no \"" + key + "\"");
  if (!j["op"].is_string() || (j["op"] != "F" && j["op"] != "B"))
    throw Error(where + ": \"op\" must be \"F\" (forward) or \"B\" (backward)");
  const auto index = [&](const char* key) -> int64_t {
    if (!j.contains(key)) return 0;  // "chunk" may be left out without interleaving
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0)
      throw Error(where + ": \"" + key + "\" must be an integer >= 0");
    return j[key].get<int64_t>();
  };
  return {j["op"] == "F" ? Op::Forward : Op::Backward, index("microbatch"), index("chunk")};
}

}  // namespace kit::pp
