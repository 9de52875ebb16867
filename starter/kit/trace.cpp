#include "kit/trace.h"

#include <filesystem>
#include <fstream>
#include <set>

#include "kit/errors.h"

namespace kit::trace {
namespace {

// Trace-event timestamps are microseconds; the kit's clocks count seconds.
double microseconds(double seconds) { return seconds * 1e6; }

nlohmann::json metadata(const std::string& what, const std::string& value) {
  return {{"ph", "M"}, {"pid", 0}, {"name", what}, {"args", {{"name", value}}}};
}

// Names the track and keeps the tracks in rank order (by default the UI sorts them by name,
// which puts "rank 10" before "rank 2").
std::vector<nlohmann::json> track_metadata(const Track& t) {
  nlohmann::json name = metadata("thread_name", t.name);
  name["tid"] = t.id;
  nlohmann::json order = {{"ph", "M"}, {"pid", 0}, {"tid", t.id}, {"name", "thread_sort_index"},
                          {"args", {{"sort_index", t.id}}}};
  return {name, order};
}

nlohmann::json complete_event(const Event& e) {
  return {{"ph", "X"},
          {"pid", 0},
          {"tid", e.track},
          {"name", e.name},
          {"cat", e.category},
          {"ts", microseconds(e.start_s)},
          {"dur", microseconds(e.end_s - e.start_s)},
          {"args", e.args}};
}

}  // namespace

nlohmann::json to_chrome_json(const Trace& trace) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back(metadata("process_name", trace.process));
  std::set<int64_t> tracks;
  for (const Track& t : trace.tracks) {
    tracks.insert(t.id);
    for (auto& m : track_metadata(t)) events.push_back(std::move(m));
  }
  for (const Event& e : trace.events) {
    if (!tracks.count(e.track))
      throw Error("trace event '" + e.name + "' is on track " + std::to_string(e.track) +
                  ", which the trace does not name: add a Track for it");
    if (!(e.end_s >= e.start_s))
      throw Error("trace event '" + e.name + "' on track " + std::to_string(e.track) + " ends (" +
                  std::to_string(e.end_s) + " s) before it starts (" + std::to_string(e.start_s) + " s)");
    events.push_back(complete_event(e));
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", trace.other}};
}

void check_trace_path(const std::string& path, const std::string& flag) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    throw Error(flag + " " + path + ": the directory " + dir.string() + " does not exist: create it first (mkdir -p " +
                dir.string() + ") or write the trace elsewhere");
}

void write_chrome_trace(const std::string& path, const Trace& trace, const std::string& flag) {
  check_trace_path(path, flag);
  const std::string text = to_chrome_json(trace).dump() + "\n";
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write " + flag + " " + path + ": check that the path names a writable file");
}

}  // namespace kit::trace
