// plan: the AMP-style planner (Problem 8): the predicted step time of every parallel strategy
// of a cluster for a model and a batch, the best first (a table; --json writes them too).
//
//   ./build/plan --cluster starter/planner/clusters/a100_4x8.json --model gpt2 --batch 512 --seq-len 1024
//   ./build/plan --cluster runs/planner/this_machine.json --model cpu-small --batch 16 --seq-len 128 \
//                --grids "4,1,1 2,2,1 1,1,4" --micro-batches 4 --even      # predict given grids only
//   ./build/plan --cluster my.json --model layers.json --schedules 1f1b,gpipe,interleaved --zero 0,1,2
//   ./build/plan --cluster my.json --model gpt2 --recompute off      # never recompute activations
//
// Options: --help. Formats: planner/cluster.h (cluster), planner/model_spec.h (--model layers).
#include <CLI/CLI.hpp>

#include <iostream>
#include <sstream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kit/errors.h"
#include "planner/report.h"
#include "planner/search.h"

namespace pl = kit::planner;

namespace {

struct Options {
  std::string cluster, model = "cpu-small", json_out, grids, schedules = "1f1b", zero = "0", micro_batch_sizes,
              recompute = "off,on";
  int64_t batch = 16, seq_len = 128, top = 10, virtual_chunks = 2, micro_batches = 0;
  pl::Shape shape;
  bool even = false, keep_infeasible = false, variants = false;
};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t whole(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw kit::Error(what + ": \"" + text + "\" is not a whole number");
}

pl::SearchOptions search_options(const Options& o) {
  pl::SearchOptions s;
  s.schedules.clear();
  for (const auto& name : split(o.schedules, ',')) s.schedules.push_back(pl::schedule_from_name(name));
  s.zero_stages.clear();
  for (const auto& z : split(o.zero, ',')) {
    const int64_t stage = whole(z, "--zero");
    if (stage > 2) throw kit::Error("--zero: stage " + z + " is not modelled; use 0, 1 or 2");
    s.zero_stages.push_back(static_cast<int>(stage));
  }
  s.recompute.clear();
  for (const auto& r : split(o.recompute, ',')) {
    if (r != "off" && r != "on") throw kit::Error("--recompute: \"" + r + "\" is not off or on");
    s.recompute.push_back(r == "on");
  }
  if (s.recompute.empty()) throw kit::Error("--recompute: give off, on or off,on");
  for (const auto& mb : split(o.micro_batch_sizes, ','))
    s.micro_batch_sizes.push_back(whole(mb, "--micro-batch-sizes"));
  s.micro_batches = o.micro_batches;
  s.interleaved_chunks = o.virtual_chunks;
  s.even = o.even;
  s.keep_infeasible = o.keep_infeasible;
  return s;
}

// --grids "d,p,t ...": only these (d, p, t), every other choice searched as usual.
bool wanted(const pl::Strategy& s, const std::string& grids) {
  if (grids.empty()) return true;
  for (const auto& g : split(grids, ' ')) {
    const auto dpt = split(g, ',');
    if (dpt.size() != 3) throw kit::Error("--grids: \"" + g + "\" is not d,p,t (e.g. \"2,1,2\")");
    if (whole(dpt[0], "--grids") == s.dp && whole(dpt[1], "--grids") == s.pp && whole(dpt[2], "--grids") == s.tp)
      return true;
  }
  return false;
}

int run(const Options& o);

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The AMP-style planner (Problem 8): predicted step time of every (data, pipeline, tensor) strategy "
               "of a cluster, the best first, with the terms of each cost."};
  Options o;
  const CLI::Validator zero_or_more(
      [](std::string& v) { return !v.empty() && v[0] == '-' ? "must be 0 or more, not " + v : std::string(); },
      "0 OR MORE");
  app.add_option("--cluster", o.cluster, "Cluster JSON (planner/cluster.h; examples in starter/planner/clusters/)")
      ->required();
  app.add_option("--model", o.model, "A GPT-2 preset (kit/config.h) or a JSON file of layers (planner/model_spec.h)")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Global batch (sequences per step)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq-len", o.seq_len, "Tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--vocab-size", o.shape.vocab_size, "A preset's vocabulary (0: the kit's tokenizer default, 1000)")
      ->capture_default_str()->check(zero_or_more);
  app.add_option("--n-layer", o.shape.n_layer, "Replace the preset's blocks (0: keep)")
      ->capture_default_str()->check(zero_or_more);
  app.add_option("--n-embd", o.shape.n_embd, "Replace the preset's width (0: keep)")
      ->capture_default_str()->check(zero_or_more);
  app.add_option("--n-head", o.shape.n_head, "Replace the preset's heads (0: keep)")
      ->capture_default_str()->check(zero_or_more);
  app.add_option("--schedules", o.schedules, "Pipeline schedules to consider: gpipe, 1f1b, interleaved (comma list)")
      ->capture_default_str();
  app.add_option("--virtual", o.virtual_chunks, "Model chunks per rank v of the interleaved schedule (as train_parallel --virtual)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--zero", o.zero, "ZeRO stages to consider (comma list of 0, 1, 2)")->capture_default_str();
  app.add_option("--recompute", o.recompute,
                 "Activation recomputation (Problem 6.3) to consider: off, on, or off,on (both; \" rc\" in a "
                 "strategy's label when on)")
      ->capture_default_str();
  app.add_option("--micro-batch-sizes", o.micro_batch_sizes,
                 "Micro-batch sizes (sequences) to consider, comma list (default: every divisor)");
  app.add_option("--micro-batches,--microbatches,--chunks", o.micro_batches,
                 "Only strategies with this many micro-batches m per replica (as train_parallel --micro-batches; 0: any)")
      ->capture_default_str()->check(zero_or_more);
  app.add_option("--grids", o.grids, "Only these d,p,t (space-separated, e.g. \"4,1,1 2,2,1\")");
  app.add_flag("--even", o.even, "Split the layers as the kit's pipelines do instead of by the partition DP");
  app.add_flag("--keep-infeasible", o.keep_infeasible, "List the strategies that do not fit in memory too");
  app.add_flag("--variants", o.variants,
               "List every micro-batch size, schedule, ZeRO stage and recomputation choice of a (d, p, t), "
               "not only its best");
  app.add_option("--top", o.top, "How many to print (0: all)")->capture_default_str()->check(zero_or_more);
  app.add_option("--json", o.json_out, "Also write them (and the cluster) to this JSON file");
  try {
    app.parse(argc, argv);
    return run(o);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kit::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const kit::NotImplemented& e) {
    std::cerr << "error: " << e.what() << " (fill it in, then rebuild)\n";
    return 1;
  }
}

namespace {

int run(const Options& o) {
  const pl::Cluster cluster = pl::read_cluster(o.cluster);
  const pl::ModelSpec model = pl::read_model(o.model, o.seq_len, o.shape);
  const pl::Workload work{o.batch, o.seq_len};
  std::vector<pl::Cost> costs;
  // By default the best of each (d, p, t): its micro-batch size, schedule, ZeRO and
  // recomputation variants often cost the same and would fill the table.
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  for (auto& c : pl::search(cluster, model, work, search_options(o)))
    if (wanted(c.strategy, o.grids) && (o.variants || seen.insert({c.strategy.dp, c.strategy.pp, c.strategy.tp}).second))
      costs.push_back(std::move(c));
  const size_t found = costs.size();
  if (o.top > 0 && costs.size() > static_cast<size_t>(o.top)) costs.resize(static_cast<size_t>(o.top));
  std::cout << cluster.name << " (" << cluster.devices() << " devices), " << model.name << ", batch " << o.batch
            << " x " << o.seq_len << " tokens: " << found << (o.variants ? " strategies" : " grids (d, p, t)")
            << (o.keep_infeasible ? "" : " that fit") << ", the best " << costs.size() << ":\n";
  if (costs.empty())
    std::cout << "none: no strategy " << (o.grids.empty() ? "" : "of --grids ") << "fits in the devices' memory with "
              << "these options; try ZeRO (--zero 0,1,2), recomputation (--recompute off,on), smaller "
              << "micro-batches, or --keep-infeasible to see why\n";
  else
    pl::print_cost_table(costs, std::cout);
  if (!o.json_out.empty()) pl::write_costs_json(o.json_out, cluster, o.model, o.batch, o.seq_len, costs);
  return 0;
}

}  // namespace
