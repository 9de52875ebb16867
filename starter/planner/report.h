// What plan prints of a search: the table of strategies with the terms of their cost, and the
// JSON file of --json (the cluster, the model, the workload and each strategy's cost).
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "planner/cluster.h"
#include "planner/search.h"

namespace kit::planner {

// One row per cost, best first ("#", strategy, m, step, its terms, bubble, memory and the
// device's limit; "does not fit" after those that do not), then a line saying what the terms are.
void print_cost_table(const std::vector<Cost>& costs, std::ostream& out);

// {"cluster", "model" (as given), "batch", "seq_len", "strategies": [to_json(cost), ...]} into
// `path`; kit::Error when it cannot be written.
void write_costs_json(const std::string& path, const Cluster& cluster, const std::string& model, int64_t batch,
                      int64_t seq_len, const std::vector<Cost>& costs);

}  // namespace kit::planner
