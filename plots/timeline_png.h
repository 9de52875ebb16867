// A pipeline schedule's timeline as a PNG: one row per rank (rank 0 on top), time to the
// right, each action a box from its start to its end, forwards in blues and backwards in
// oranges (one shade per model chunk) with the action written inside, idle time (the
// bubble) blank.
// It takes plain data, so it knows nothing of LibTorch or of the schedules themselves:
// the `schedule` program fills it from a simulated or a measured timeline.
#pragma once
#include <string>
#include <vector>

#include "gnuplot_png.h"

namespace kit::plots {

struct TimelineBox {
  std::string label;      // written inside the box where it fits, e.g. "F3" or "B3.1"
  bool backward = false;  // false: a forward
  int chunk = 0;          // picks the shade
  double start = 0, end = 0;
};

struct TimelinePicture {
  std::string title;                          // '\n' breaks the line
  std::string xlabel = "time";                // with the unit
  int virtual_chunks = 1;                             // > 1: the key names each chunk's shade
  std::vector<std::vector<TimelineBox>> ranks;  // one row per rank, rank 0 first
};

// Throws kit::Error when there is nothing to draw, a box ends before it starts, or the
// picture would be unreadably large (more than 64 ranks).
void draw_timeline(const std::string& png_path, const TimelinePicture& picture, PngOptions png = {});

// Several timelines stacked in one PNG, one panel each (top to bottom), on one common
// time axis so that their lengths compare at a glance: e.g. each schedule simulated and
// measured. Each panel's title is its heading; `title` heads the whole picture.
void draw_timeline_panels(const std::string& png_path, const std::string& title,
                          const std::vector<TimelinePicture>& panels, PngOptions png = {});

}  // namespace kit::plots
