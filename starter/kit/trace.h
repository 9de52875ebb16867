// Timelines as Chrome trace-event JSON, the format that Perfetto's UI (https://ui.perfetto.dev,
// "Open trace file") and chrome://tracing open, and that PyTorch's profiler exports.
//
// Every program that records a timeline (train_parallel, schedule
// --kind) turns it into this neutral list of events and writes it here, so the format lives in
// one place. One track per rank: pid 0 (named by `process`), tid = the track's id, a
// "thread_name" metadata event per track. Each event is a complete event ("ph": "X") with ts
// and dur in microseconds:
//
//   {"traceEvents": [
//      {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": "pipeline"}},
//      {"ph": "M", "pid": 0, "tid": 1, "name": "thread_name", "args": {"name": "rank 1"}},
//      {"ph": "X", "pid": 0, "tid": 1, "name": "F mb3", "cat": "forward", "ts": 1500.0, "dur": 250.0,
//       "args": {"microbatch": 3, "chunk": 0, "stage": 1}}, ...],
//    "displayTimeUnit": "ms", "otherData": {"program": ..., ...}}
//
// A program that writes one file per rank gives each file its own rank's track (its own tid),
// so merging the files is concatenating their traceEvents.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kit::trace {

// One interval on one track. start_s and end_s are seconds on the trace's clock (measured
// programs: the machine's steady clock, so the ranks of one machine line up).
struct Event {
  int64_t track = 0;
  std::string name;      // "F mb3", "B mb3 c1"
  std::string category;  // "forward", "backward", "send", "recv" or "wait"
  double start_s = 0, end_s = 0;
  nlohmann::json args = nlohmann::json::object();  // micro-batch, chunk, stage, slice, ...
};

struct Track {
  int64_t id = 0;    // the events' track: tid
  std::string name;  // "rank 1", "stage 0"
};

struct Trace {
  std::string process = "pipeline";  // process_name of pid 0
  std::vector<Track> tracks;
  std::vector<Event> events;
  nlohmann::json other = nlohmann::json::object();  // otherData: program, schedule, world, ...
};

// The trace as Chrome trace-event JSON (the layout above). kit::Error when an event ends
// before it starts or names a track that is not in `tracks`.
nlohmann::json to_chrome_json(const Trace& trace);

// kit::Error naming the path and the fix when `path`'s directory does not exist (`flag`: the
// option that gave it). Programs call it before any work, so a typo costs nothing.
void check_trace_path(const std::string& path, const std::string& flag);

// check_trace_path, then the JSON written to `path`.
void write_chrome_trace(const std::string& path, const Trace& trace, const std::string& flag);

}  // namespace kit::trace
