// plot_figures as a student runs it: exit status, what it prints, what it writes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>

#include "build_programs.h"
#include "gnuplot_png.h"
#include "plots_test_util.h"

namespace {
using namespace plots_test;

struct Result {
  int status = -1;
  std::string out, err;
};

std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs plot_figures with `args` (already quoted) in `dir`, capturing stdout and stderr.
Result plot_figures(const TempDir& dir, const std::string& args) {
  const std::string out = dir / "stdout.txt", err = dir / "stderr.txt";
  const std::string cmd = "cd " + sh_quote(dir.path()) + " && " + sh_quote(kit_test::build_program("plot_figures")) + " " + args + " >" +
                          sh_quote(out) + " 2>" + sh_quote(err);
  const int raw = std::system(cmd.c_str());
  Result r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

TEST(PlotsCli, FullRunPrintsTheTableAndWritesTheFigures) {
  TempDir dir;
  const std::vector<double> l = {3.0, 2.0};
  write_json(dir / "runs/data_parallel/world1/rank0.json",
             run_file("run_data_parallel", 1, 64, {epoch(1, 0, 1, 9, 90, l), epoch(2, 0, 1, 8, 100, l)}));
  for (int r = 0; r < 2; ++r)
    write_json(dir / ("runs/data_parallel/world2/rank" + std::to_string(r) + ".json"),
               run_file("run_data_parallel", 2, 128, {epoch(1, r, 2, 5, 80, l), epoch(2, r, 2, 4, 90, l)}));
  // train's default output (the setup check writes it): not one of the figures' runs.
  write_json(dir / "runs/train.json", run_file("train", 1, 64, {epoch(1, 0, 1, 9, 90, l)}));
  // Defaults: the programs' default output paths, relative to the working directory.
  const Result r = plot_figures(dir, "");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data parallel, world 2, batch 128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.80x"), std::string::npos) << "tokens/s ratio (90+90)/100:\n" << r.out;
  EXPECT_NE(r.out.find("note: no --model-parallel run"), std::string::npos) << r.out;
  EXPECT_TRUE(kit::plots::is_png_file(dir / "submit_figures/dp_tokens_per_sec.png"));
  EXPECT_TRUE(fs::exists(dir / "submit_figures/summary.json"));
  EXPECT_NE(r.out.find("not drawn: runs/train.json (pass --single runs/train.json"), std::string::npos) << r.out;
  EXPECT_EQ(read_text(dir / "submit_figures/summary.json").find("\"train\""), std::string::npos)
      << "runs/train.json was drawn although --single was not given";
}

TEST(PlotsCli, MalformedInputExitsWithTheFileAndField) {
  TempDir dir;
  json j = run_file("train", 1, 64, {epoch(1, 0, 1, 9, 90)});
  j["epochs"][0].erase("training_time");
  write_json(dir / "train.json", j);
  const Result r = plot_figures(dir, "--single train.json --out figs");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("error: train.json: epochs[0].training_time is missing"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "figs/summary.json"));
}

TEST(PlotsCli, ScheduleOnly) {
  TempDir dir;
  const Result r = plot_figures(dir, "schedule 5x2 -o pics/s.png");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(kit::plots::is_png_file(dir / "pics/s.png"));
  const Result named = plot_figures(dir, "schedule 3x3");
  ASSERT_EQ(named.status, 0) << named.out << named.err;
  EXPECT_TRUE(kit::plots::is_png_file(dir / "schedule_3x3.png"));
}

TEST(PlotsCli, BadScheduleSizeIsAnError) {
  TempDir dir;
  const Result r = plot_figures(dir, "--schedule 4by3");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("write e.g. 4x3"), std::string::npos) << r.err;
}

// The 3D grid of Problem 6.1 as the kit computes it (grid.h's functions, the solution build):
// Megatron's numbering puts a tensor group of t = 4 consecutive ranks on each 4-GPU node.
TEST(PlotsCli, GridDrawsThePictureAndPrintsTheGroups) {
  TempDir dir;
  const Result r = plot_figures(dir, "grid 2,2,4 --gpus-per-node 4 -o pics/g.png");
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(kit::plots::is_png_file(dir / "pics/g.png"));
  for (const char* line :
       {"grid d=2 p=2 t=4: W = 16 ranks on 4 nodes of 4 GPUs",
        "\ntensor groups (4, consecutive ranks, inside one node each): {0,1,2,3} {4,5,6,7} {8,9,10,11} {12,13,14,15}\n",
        "\ndata groups (8, ranks 4 apart, across 2 nodes each): {0,4} {1,5} {2,6} {3,7} {8,12} {9,13} {10,14} {11,15}\n",
        "\npipeline groups (8, ranks 8 apart, across 2 nodes each): {0,8} {1,9} {2,10} {3,11} {4,12} {5,13} {6,14} "
        "{7,15}\n",
        "\nnode 2: 8 9 10 11\n", "\n   6 (1,0,2)       1\n", "\nwrote pics/g.png\n"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
}

TEST(PlotsCli, BadGridInputIsAnErrorNamingTheFix) {
  TempDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {"grid 2,2", "grid shape '2,2' is not three positive integers D,P,T: write e.g. 2,2,4"},
      {"grid 0,2,4", "grid shape '0,2,4': D (data) is 0, each size must be at least 1"},
      {"grid 2,2,4 --gpus-per-node 0", "--gpus-per-node is 0: give the number of ranks (GPUs) per node, at least 1"},
      {"grid 16,16,1", "256 ranks, too many to draw readably"}};
  for (const auto& [args, message] : cases) {
    const Result r = plot_figures(dir, args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_NE(r.err.find(message), std::string::npos) << args << ":\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
  EXPECT_FALSE(fs::exists(dir / "grid_w16_d2_p2_t4.png"));
}

}  // namespace
