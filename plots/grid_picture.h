// The 3D process grid of Problem 6.1 (Megatron-LM's PTD-P) as a picture and as text, for
// the handout: every rank a box labelled with its rank and (dp,pp,tp), one row per node,
// one colour per tensor group (a colour family per pipeline stage, a shade per data index).
//   ./build/plot_figures grid 2,2,4 --gpus-per-node 4 -o handout/figures/grid_w16_d2_p2_t4.png
// Everything comes from grid/grid.h's functions (coordinates_of, group_ranks, node_of), not
// from a formula of its own, so the picture shows what the kit computes: built from starter/,
// the student's own grid, once Problem 6.1 is done.
#pragma once
#include <iosfwd>
#include <string>

#include "gnuplot_png.h"
#include "grid/grid.h"

namespace kit::plots {

// Parses "D,P,T": the data, pipeline and tensor sizes, each at least 1. kit::Error naming
// what is wrong and the expected form otherwise, or when the picture would be unreadable.
grid::GridShape parse_grid_shape(const std::string& text);

// kit::Error unless 1 <= gpus_per_node (ranks per node; ranks fill the nodes in order).
void check_gpus_per_node(int gpus_per_node);

// "grid_w16_d2_p2_t4.png": the default file name of the picture.
std::string grid_png_name(const grid::GridShape& shape);

// The tensor, data and pipeline groups, whether each kind crosses nodes, and every rank's
// coordinates and node, as text for the handout.
void print_grid(std::ostream& out, const grid::GridShape& shape, int gpus_per_node);

// The picture, one row of boxes per node. kit::Error when the grid functions return
// coordinates or ranks outside the grid (e.g. an unfinished Problem 6.1), or gnuplot fails.
void draw_grid(const std::string& png_path, const grid::GridShape& shape, int gpus_per_node, PngOptions png);

}  // namespace kit::plots
