// Problem 8.2: the layer partition that minimises the slowest pipeline stage (AMP).
//
// seconds[j][i] is what layer i costs when stage j holds it (stage j's device speed and links
// folded in, so uneven layers and uneven devices are one problem). Stage j holds a run of
// consecutive layers, every stage at least one, in order; its time is the sum of its layers'
// seconds[j][i]. A pipeline runs at the pace of its slowest stage, so the best partition is
// the one whose largest stage time is smallest.
#pragma once
#include <cstdint>
#include <vector>

namespace kit::planner {

// Layers per stage (seconds.size() entries, each 1 or more, summing to the layer count) with
// the smallest largest stage time; among equal ones, any. kit::Error when there are fewer
// layers than stages or the rows differ in length.
std::vector<int64_t> partition_layers(const std::vector<std::vector<double>>& seconds);

// The largest stage time of a partition (given; the tests' brute force uses it too).
double slowest_stage_seconds(const std::vector<std::vector<double>>& seconds,
                             const std::vector<int64_t>& layers_per_stage);

}  // namespace kit::planner
