#include "grid_picture.h"

#include <gnuplot-iostream.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ostream>
#include <set>
#include <tuple>
#include <vector>

#include "kit/errors.h"

namespace kit::plots {
namespace {

constexpr int kMaxAxis = 128;       // before multiplying, so d * p * t cannot overflow
constexpr int kMaxRanks = 128;      // beyond this the boxes are too small to label
constexpr int kMaxNodes = 32;       // rows of the picture
constexpr int kMaxRanksPerRow = 16;
constexpr int kMaxKeyEntries = 16;  // one per tensor group up to here, else one per stage
const char* const kExample = "write e.g. 2,2,4 for d = 2 (data), p = 2 (pipeline), t = 4 (tensor)";

// Okabe-Ito (colour-blind friendly): one family per pipeline stage, cycling.
const int kStageColors[] = {0x0072B2, 0xE69F00, 0x009E73, 0xCC79A7, 0xD55E00, 0x56B4E9};
const char* const kStageColorNames[] = {"blue", "orange", "green", "purple", "red", "sky blue"};
constexpr int kNumStageColors = sizeof(kStageColors) / sizeof(kStageColors[0]);

// The grid as the kit computes it: every number here comes from grid.h's functions.
struct GridFacts {
  grid::GridShape shape;
  int gpus_per_node = 1;
  std::vector<grid::Coordinates> coords;  // per rank
  std::vector<int> node, column;          // per rank: its row (node) and place in it
  int nodes = 0, columns = 0;
  // Every group of each kind once, ordered by its lowest rank.
  std::vector<std::vector<int>> tensor, data, pipeline;
  std::vector<int> tensor_group_of;  // per rank: its index in `tensor`
};

std::string braces(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

// In the picture, a long group as "{0,1,...,15}", so the key and caption stay narrow.
std::string short_braces(const std::vector<int>& ranks) {
  if (ranks.size() <= 6) return braces(ranks);
  return "{" + std::to_string(ranks[0]) + "," + std::to_string(ranks[1]) + ",...," + std::to_string(ranks.back()) + "}";
}

std::string coords_text(const grid::Coordinates& c) {
  return "(" + std::to_string(c.dp) + "," + std::to_string(c.pp) + "," + std::to_string(c.tp) + ")";
}

// group_ranks for every rank, each group once. A rank outside the grid, or a group without
// the rank that asked for it, would draw nonsense (or index out of bounds): say which.
std::vector<std::vector<int>> all_groups(grid::GroupKind kind, const grid::GridShape& shape) {
  std::set<std::vector<int>> seen;
  std::vector<std::vector<int>> out;
  for (int r = 0; r < shape.world(); ++r) {
    auto g = grid::group_ranks(kind, r, shape);
    const bool has_r = std::find(g.begin(), g.end(), r) != g.end();
    for (int x : g)
      if (x < 0 || x >= shape.world() || !has_r)
        throw Error(std::string("group_ranks(") + grid::name_of(kind) + ", " + std::to_string(r) + ") = " + braces(g) +
                    " on the grid " + shape.str() + ": each member must be a rank below " +
                    std::to_string(shape.world()) + ", and the group must hold rank " + std::to_string(r));
    if (seen.insert(g).second) out.push_back(std::move(g));
  }
  return out;
}

GridFacts grid_facts(const grid::GridShape& shape, int gpus_per_node) {
  GridFacts f;
  f.shape = shape;
  f.gpus_per_node = gpus_per_node;
  const int w = shape.world();
  try {
    for (int r = 0; r < w; ++r) {
      const grid::Coordinates c = grid::coordinates_of(r, shape);
      if (c.dp < 0 || c.dp >= shape.dp || c.pp < 0 || c.pp >= shape.pp || c.tp < 0 || c.tp >= shape.tp)
        throw Error("coordinates_of(" + std::to_string(r) + ") = (dp,pp,tp) " + coords_text(c) +
                    " is outside the grid " + shape.str() + ": fix coordinates_of in grid/grid.cpp");
      f.coords.push_back(c);
    }
    f.tensor = all_groups(grid::GroupKind::Tensor, shape);
    f.data = all_groups(grid::GroupKind::Data, shape);
    f.pipeline = all_groups(grid::GroupKind::Pipeline, shape);
  } catch (const NotImplemented& e) {
    throw Error(std::string(e.what()) + ": the grid picture shows what grid/grid.cpp computes, so finish Problem 6.1 "
                "(coordinates_of, rank_of, group_ranks) and rebuild");
  }
  f.tensor_group_of.assign(w, 0);
  for (int g = static_cast<int>(f.tensor.size()) - 1; g >= 0; --g)  // the first group holding r wins
    for (int r : f.tensor[g]) f.tensor_group_of[r] = g;
  // Rows are nodes; a rank's column is its place among the ranks of its node.
  std::vector<int> used;
  for (int r = 0; r < w; ++r) {
    const int n = grid::node_of(r, gpus_per_node);
    if (n >= static_cast<int>(used.size())) used.resize(n + 1, 0);
    f.node.push_back(n);
    f.column.push_back(used[n]++);
  }
  f.nodes = static_cast<int>(used.size());
  f.columns = *std::max_element(used.begin(), used.end());
  return f;
}

// "consecutive ranks" / "ranks 4 apart" when every group steps evenly by the same amount, else "".
std::string spacing(const std::vector<std::vector<int>>& groups) {
  int step = 0;
  for (const auto& g : groups)
    for (size_t i = 1; i < g.size(); ++i) {
      if (step == 0) step = g[i] - g[i - 1];
      if (g[i] - g[i - 1] != step) return "";
    }
  if (step == 0) return "";
  return step == 1 ? "consecutive ranks" : "ranks " + std::to_string(step) + " apart";
}

// "inside one node each" / "across 2 nodes each" / "across 1 to 2 nodes".
std::string node_span(const GridFacts& f, const std::vector<std::vector<int>>& groups) {
  int lo = 1 << 30, hi = 0;
  for (const auto& g : groups) {
    std::set<int> nodes;
    for (int r : g) nodes.insert(f.node[r]);
    lo = std::min(lo, static_cast<int>(nodes.size()));
    hi = std::max(hi, static_cast<int>(nodes.size()));
  }
  if (hi <= 1) return "inside one node each";
  if (lo == hi) return "across " + std::to_string(hi) + " nodes each";
  return "across " + std::to_string(lo) + " to " + std::to_string(hi) + " nodes";
}

// Every group in full (the text), or the first four, shortened (the picture's caption).
std::string group_list(const std::vector<std::vector<int>>& groups, bool all) {
  const size_t at_most = all ? groups.size() : 4;
  std::string s;
  for (size_t i = 0; i < groups.size() && i < at_most; ++i)
    s += (i ? " " : "") + (all ? braces(groups[i]) : short_braces(groups[i]));
  if (groups.size() > at_most) s += " ...";
  return s;
}

// A tensor group's fill: its stage's colour family (the stage of its first member), lighter
// for the first data index, darker for the last, so stages and groups both stand out.
std::vector<int> tensor_group_colors(const GridFacts& f) {
  std::vector<int> per_stage(f.shape.pp, 0), index_in_stage;
  for (const auto& g : f.tensor) index_in_stage.push_back(per_stage[f.coords[g[0]].pp]++);
  std::vector<int> colors;
  for (size_t i = 0; i < f.tensor.size(); ++i) {
    const int stage = f.coords[f.tensor[i][0]].pp, n = per_stage[stage];
    const double white = n > 1 ? 0.72 - 0.45 * index_in_stage[i] / (n - 1) : 0.55;
    const int base = kStageColors[stage % kNumStageColors];
    int rgb = 0;
    for (int shift : {16, 8, 0}) {
      const int c = (base >> shift) & 0xFF;
      rgb |= static_cast<int>(c + (255 - c) * white + 0.5) << shift;
    }
    colors.push_back(rgb);
  }
  return colors;
}

std::string hex(int rgb) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%06X", rgb);
  return buf;
}

// The rank `r`'s group of `kind` when all its members sit in column `col` (one per row), so
// that a bracket beside that column reads unambiguously; else empty.
std::vector<int> column_group(const GridFacts& f, grid::GroupKind kind, int r, int col) {
  const auto& groups = kind == grid::GroupKind::Data ? f.data : f.pipeline;
  for (const auto& g : groups) {
    if (std::find(g.begin(), g.end(), r) == g.end()) continue;
    std::set<int> rows;
    for (int x : g)
      if (f.column[x] != col || !rows.insert(f.node[x]).second) return {};
    return g.size() > 1 ? g : std::vector<int>{};
  }
  return {};
}

// A bracket from the box edge at `edge` out to `x`, over the rows of `members`, labelled.
void bracket(Gnuplot& gp, const GridFacts& f, const std::vector<int>& members, double edge, double x,
             const std::string& text, const char* color, const char* align) {
  int top = f.nodes, bottom = -1;
  for (int r : members) {
    top = std::min(top, f.node[r]);
    bottom = std::max(bottom, f.node[r]);
    gp << "set arrow from " << edge << "," << f.node[r] << " to " << x << "," << f.node[r] << " nohead lw 2 lc rgb \""
       << color << "\" front\n";
  }
  gp << "set arrow from " << x << "," << top << " to " << x << "," << bottom << " nohead lw 2 lc rgb \"" << color
     << "\" front\n";
  const double gap = std::string(align) == "left" ? 0.08 : -0.08;
  gp << "set label " << gp_quote(text) << " at " << x + gap << "," << (top + bottom) / 2.0 << " " << align
     << " tc rgb \"" << color << "\" front\n";
}

}  // namespace

grid::GridShape parse_grid_shape(const std::string& text) {
  std::vector<std::string> parts(1);
  for (char ch : text) {
    if (ch == ',')
      parts.emplace_back();
    else if (!std::isspace(static_cast<unsigned char>(ch)))
      parts.back() += ch;
  }
  const bool digits = std::all_of(parts.begin(), parts.end(), [](const std::string& p) {
    return !p.empty() && p.size() <= 6 &&
           std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  });
  if (parts.size() != 3 || !digits)
    throw Error("grid shape '" + text + "' is not three positive integers D,P,T: " + kExample);
  const int v[3] = {std::stoi(parts[0]), std::stoi(parts[1]), std::stoi(parts[2])};
  const char* const axis[3] = {"D (data)", "P (pipeline)", "T (tensor)"};
  for (int i = 0; i < 3; ++i) {
    if (v[i] < 1) throw Error("grid shape '" + text + "': " + axis[i] + " is 0, each size must be at least 1: " + kExample);
    if (v[i] > kMaxAxis)
      throw Error("grid shape '" + text + "': " + axis[i] + " is " + std::to_string(v[i]) + ", too large to draw: at most " +
                  std::to_string(kMaxRanks) + " ranks in all");
  }
  grid::GridShape shape{v[0], v[1], v[2]};
  if (shape.world() > kMaxRanks)
    throw Error("grid shape '" + text + "' has " + std::to_string(shape.world()) + " ranks, too many to draw readably: " +
                "choose sizes whose product D*P*T is at most " + std::to_string(kMaxRanks));
  return shape;
}

void check_gpus_per_node(int gpus_per_node) {
  if (gpus_per_node < 1)
    throw Error("--gpus-per-node is " + std::to_string(gpus_per_node) +
                ": give the number of ranks (GPUs) per node, at least 1, e.g. --gpus-per-node 4");
}

std::string grid_png_name(const grid::GridShape& s) {
  return "grid_w" + std::to_string(s.world()) + "_d" + std::to_string(s.dp) + "_p" + std::to_string(s.pp) + "_t" +
         std::to_string(s.tp) + ".png";
}

void print_grid(std::ostream& out, const grid::GridShape& shape, int gpus_per_node) {
  check_gpus_per_node(gpus_per_node);
  const GridFacts f = grid_facts(shape, gpus_per_node);
  out << "grid " << shape.str() << ": W = " << shape.world() << " rank" << (shape.world() == 1 ? "" : "s") << " on "
      << f.nodes << " node"
      << (f.nodes == 1 ? "" : "s") << " of " << gpus_per_node << " GPU" << (gpus_per_node == 1 ? "" : "s")
      << " (ranks fill the nodes in order)\n";
  const std::tuple<const char*, const std::vector<std::vector<int>>*> kinds[] = {
      {"tensor", &f.tensor}, {"data", &f.data}, {"pipeline", &f.pipeline}};
  for (const auto& [name, groups] : kinds) {
    const std::string apart = spacing(*groups);
    out << name << " groups (" << groups->size() << ", " << (apart.empty() ? "" : apart + ", ")
        << node_span(f, *groups) << "): " << group_list(*groups, true) << "\n";
  }
  for (int n = 0; n < f.nodes; ++n) {
    out << "node " << n << ":";
    for (int r = 0; r < shape.world(); ++r)
      if (f.node[r] == n) out << " " << r;
    out << "\n";
  }
  out << "rank (dp,pp,tp) node\n";
  for (int r = 0; r < shape.world(); ++r) {
    char line[64];
    std::snprintf(line, sizeof line, "%4d %-10s %4d\n", r, coords_text(f.coords[r]).c_str(), f.node[r]);
    out << line;
  }
}

void draw_grid(const std::string& png_path, const grid::GridShape& shape, int gpus_per_node, PngOptions png) {
  check_gpus_per_node(gpus_per_node);
  const GridFacts f = grid_facts(shape, gpus_per_node);
  if (f.nodes > kMaxNodes || f.columns > kMaxRanksPerRow)
    throw Error("the grid " + shape.str() + " with --gpus-per-node " + std::to_string(gpus_per_node) + " fills " +
                std::to_string(f.nodes) + " node(s) with up to " + std::to_string(f.columns) +
                " rank(s) each, too large to draw: at most " + std::to_string(kMaxNodes) + " nodes and " +
                std::to_string(kMaxRanksPerRow) + " ranks per node; change --gpus-per-node");
  const std::vector<int> colors = tensor_group_colors(f);
  const int w = shape.world();

  // Examples beside the boxes: the pipeline of the first rank on the left, the data group of
  // node 0's last rank on the right, when their members line up in that column.
  const int last = f.columns - 1;
  int last_of_node0 = 0;
  for (int r = 0; r < w; ++r)
    if (f.node[r] == 0) last_of_node0 = r;
  const std::vector<int> pipe = column_group(f, grid::GroupKind::Pipeline, 0, 0);
  const std::vector<int> data = column_group(f, grid::GroupKind::Data, last_of_node0, last);
  const double left = pipe.empty() ? 0.1 : 0.9, right = data.empty() ? 0.1 : 1.0;

  // About 150 x 100 pixels a box, plus room for the title, the caption and the key.
  const bool key_per_group = static_cast<int>(f.tensor.size()) <= kMaxKeyEntries;
  png.width = std::max(820, 110 + static_cast<int>(150 * (f.columns + left + right)) + 270);
  png.height = 90 + 100 * f.nodes + 110;
  png.height = std::max(png.height, 90 + 22 * static_cast<int>(key_per_group ? f.tensor.size() : shape.pp) + 140);

  std::vector<std::tuple<int, int, int>> boxes;                // column, node, colour
  std::vector<std::tuple<int, double, int, int, int, int>> text;  // column, y, rank, dp, pp, tp
  for (int r = 0; r < w; ++r) {
    boxes.emplace_back(f.column[r], f.node[r], colors[f.tensor_group_of[r]]);
    const auto& c = f.coords[r];
    text.emplace_back(f.column[r], f.node[r], r, c.dp, c.pp, c.tp);
  }

  std::string families;
  for (int s = 0; s < std::min(shape.pp, kNumStageColors); ++s)
    families += std::string(s ? ", " : "") + kStageColorNames[s] + " = stage " + std::to_string(s);
  if (shape.pp > kNumStageColors) families += ", then again";
  auto apart = [](const std::vector<std::vector<int>>& groups) {
    const std::string s = spacing(groups);
    return s.empty() ? s : ", " + s;
  };
  const std::string caption[] = {
      "box: rank and (dp,pp,tp); colour: its tensor group (" + families + "; darker = higher dp)",
      "tensor group: same dp and stage, every tp" + apart(f.tensor) + ": " + group_list(f.tensor, false),
      "data group: same tp and stage (same colour family, other shade), every dp" + apart(f.data) + ": " +
          group_list(f.data, false),
      "pipeline: same dp and tp, one rank per stage (colour family changes)" + apart(f.pipeline) + ": " +
          group_list(f.pipeline, false)};

  char title[256];
  std::snprintf(title, sizeof title,
                "3D process grid: W = %d rank%s, d = %d (data) x p = %d (pipeline) x t = %d (tensor)\n"
                "%d node%s of %d GPU%s, one row per node",
                w, w == 1 ? "" : "s", shape.dp, shape.pp, shape.tp, f.nodes, f.nodes == 1 ? "" : "s", gpus_per_node,
                gpus_per_node == 1 ? "" : "s");

  render_png(png_path, png, [&](Gnuplot& gp) {
    gp << "set title " << gp_quote(title) << "\n"
       << "unset border\n"
       << "unset xtics\n"
       << "set key outside right top vertical Left reverse samplen 2 spacing 1.3 title \"tensor groups\"\n"
       << "set lmargin 10\n"
       << "set bmargin 6\n"
       << "set xrange [" << -0.5 - left << ":" << f.columns - 0.5 + right << "]\n"
       << "set yrange [" << f.nodes - 0.5 << ":-0.5]\n";  // reversed: node 0 on top
    gp << "set ytics scale 0 nomirror (";
    for (int n = 0; n < f.nodes; ++n) gp << (n ? ", " : "") << "\"node " << n << "\" " << n;
    gp << ")\n";
    // Node frames: a thick outline around each row.
    for (int n = 0; n < f.nodes; ++n) {
      int used = 0;
      for (int r = 0; r < w; ++r) used += f.node[r] == n;
      gp << "set object " << n + 1 << " rect from -0.49," << n - 0.47 << " to " << used - 0.51 << "," << n + 0.47
         << " fs empty border lc rgb \"#222222\" lw 2.5 behind\n";
    }
    if (!pipe.empty())
      bracket(gp, f, pipe, -0.44, -0.62, "pipeline\n" + braces(pipe), "#000000", "right");
    if (!data.empty())
      bracket(gp, f, data, last + 0.44, last + 0.62, "data group\n" + braces(data), "#555555", "left");
    // The caption, bottom up from 8 pixels above the lower edge, 18 pixels a line.
    const int lines = sizeof caption / sizeof caption[0];
    for (int i = 0; i < lines; ++i)
      gp << "set label " << gp_quote(caption[i]) << " at screen 0.01, screen "
         << (8.0 + 18.0 * (lines - 1 - i)) / png.height << " left font \"sans,10\"\n";
    gp << "plot '-' using 1:2:(0.44):(0.4):3 with boxxyerror fs solid 1.0 border lc rgb \"#333333\" "
          "lc rgb variable notitle, "
       << "'-' using 1:($2 - 0.12):(sprintf(\"rank %d\", $3)) with labels font \"sans,13\" notitle, "
       << "'-' using 1:($2 + 0.17):(sprintf(\"(%d,%d,%d)\", $4, $5, $6)) with labels font \"sans,10\" notitle";
    // The key: invisible plots whose only trace is their entry.
    if (key_per_group) {
      for (size_t g = 0; g < f.tensor.size(); ++g) {
        const auto& c = f.coords[f.tensor[g][0]];
        gp << ", NaN with boxes fs solid 1.0 border lc rgb \"#333333\" lc rgb \"" << hex(colors[g]) << "\" title "
           << gp_quote(short_braces(f.tensor[g]) + ": stage " + std::to_string(c.pp) + ", dp " + std::to_string(c.dp));
      }
    } else {
      for (int s = 0; s < std::min(shape.pp, kNumStageColors); ++s)
        gp << ", NaN with boxes fs solid 1.0 lc rgb \"" << hex(kStageColors[s]) << "\" title "
           << gp_quote("stage " + std::to_string(s) + " (lighter = lower dp)");
    }
    gp << "\n";
    gp.send1d(boxes);
    gp.send1d(text);
    gp.send1d(text);
  });
}

}  // namespace kit::plots
