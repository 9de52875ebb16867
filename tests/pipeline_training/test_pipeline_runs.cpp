// Problem 3 end to end: train_parallel --pp 2 and --pp 4 as 2 and 4 real Gloo processes on CPU,
// checked against one process training the whole model on the whole batch.
//
// Each run takes 3 batches with --save; every rank writes, for the model parameters it
// holds (under the full model's names), the gradient after the first batch (the tied
// wte/lm_head gradients already summed), the parameters after 3 AdamW steps, and on the
// last stage's rank the batch losses. This test rebuilds the same model and batches in
// its own process and requires:
//   - every model parameter is in exactly one rank's file, except the tied wte, which the
//     first and the last stage both hold, equal (gradients and parameters);
//   - each gradient and parameter equals the single-process one, the losses too.
// Tolerance, elementwise: |got - want| <= 1e-5 + 1e-4 |want| for gradients and losses,
// 2e-5 + 1e-4 |want| for parameters. Cutting the batch into micro-batches and the model
// into stages only changes the order of float32 sums (relative error ~1e-6 measured);
// AdamW divides by sqrt(v), so a parameter whose true gradient is ~0 (the attention key
// bias) can move by ~lr * noise / eps after 3 steps, which the parameters' atol covers.
// Each wrong executor (gradients not sent, kept outputs detached, the loss not scaled by
// 1/m, micro-batches swapped) is off by 10-100 % of a gradient's scale, or fails.
//
// The real-run tests take their schedules from reference_schedules.h through
// --schedule-file, so they grade the executor whatever the student's schedules do; the
// *BuiltSchedule cases run the program's own schedules (student schedules + executor).
// The subject part runs the program and records its exit, output and every rank's saved dict;
// the single-process reference (the kit's model, loss and AdamW: given code only) and every
// check are the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "reference_schedules.h"
#include "run_test_util.h"

namespace {
using pp_run::RunSpec;

kit::pp::Schedules reference_schedules(const RunSpec& s) {
  if (s.schedule == "gpipe") return pp_test::ref_all_gpipe(s.ranks, s.microbatches);
  if (s.schedule == "1f1b") return pp_test::ref_all_1f1b(s.ranks, s.microbatches);
  return pp_test::ref_all_interleaved(s.ranks, s.microbatches, s.virtual_chunks);
}

void expect_matches_single_process(const RunSpec& spec, bool built_schedule) {
  const kit::judge::Record rec = kit::judge::subject(
      [&](kit::judge::Record& out) {
        kit_test::TempDir dir("pp_" + spec.schedule + std::to_string(spec.ranks));
        auto args = pp_run::program_args(spec, dir.path());
        args.insert(args.end(), {"--save-ranks", dir / "save"});
        if (!built_schedule) {
          pp_run::write_schedule_file(dir / "schedule.json", reference_schedules(spec));
          args.insert(args.end(), {"--schedule-file", dir / "schedule.json"});
        }
        pp_run::put_run(out, pp_run::run_program(args, {}, dir / "run.log"));
        std::vector<std::string> paths;
        std::vector<std::map<std::string, torch::Tensor>> saved;
        for (int q = 0; q < spec.ranks; ++q) {
          paths.push_back(dir / ("save/rank" + std::to_string(q) + ".pt"));
          saved.push_back(kit_test::load_rank_file(paths.back()));
        }
        out.put("paths", paths);
        out.put("ranks", saved);
        out.put("leftovers", kit_test::leftovers_after(dir.path(), 5));
      },
      "train_parallel --pp " + std::to_string(spec.ranks) + " " + spec.schedule + " on " + std::to_string(spec.ranks) + " ranks");
  if (!kit::judge::judging()) return;
  const auto r = pp_run::get_run(rec);
  ASSERT_EQ(r.exitcode, 0) << pp_run::describe(r);

  const pp_run::Reference ref = pp_run::single_process_reference(spec.n_layer);
  const auto paths = rec.get<std::vector<std::string>>("paths");
  std::vector<std::map<std::string, torch::Tensor>> ranks =
      rec.get<std::vector<std::map<std::string, torch::Tensor>>>("ranks");
  ASSERT_EQ(ranks.size(), static_cast<size_t>(spec.ranks));
  ASSERT_EQ(paths.size(), static_cast<size_t>(spec.ranks));
  for (int q = 0; q < spec.ranks; ++q)
    ASSERT_FALSE(ranks[q].empty()) << "rank " << q << " wrote no " << paths[q];
  const int last = static_cast<int>((spec.ranks * spec.virtual_chunks - 1) % spec.ranks);

  // Where each parameter is: exactly one rank, except wte on the first and the last stage.
  std::map<std::string, std::vector<int>> holders;
  for (int q = 0; q < spec.ranks; ++q)
    for (const auto& [key, t] : ranks[q])
      if (key.rfind("param/", 0) == 0) {
        const std::string name = key.substr(6);
        EXPECT_TRUE(ref.params.count(name)) << "rank " << q << " saved " << name << ", which the model does not have";
        holders[name].push_back(q);
      }
  for (const auto& [name, want] : ref.params) {
    const std::vector<int> expected = name == "wte.weight" && spec.ranks > 1 ? std::vector<int>{0, last}
                                                                             : std::vector<int>{};
    if (!expected.empty()) {
      EXPECT_EQ(holders[name], expected) << name << " (tied to the output projection) must be held by the first "
                                         << "stage's rank 0 and the last stage's rank " << last;
    } else {
      EXPECT_EQ(holders[name].size(), 1u) << name << " must be held by exactly one rank";
    }
  }

  for (const auto& [name, where] : holders) {
    if (!ref.params.count(name)) continue;
    for (int q : where) {
      SCOPED_TRACE("rank " + std::to_string(q) + ", " + name);
      auto& got = ranks[q];
      ASSERT_TRUE(got.count("grad/" + name)) << "no gradient saved";
      const torch::Tensor g = got["grad/" + name], p = got["param/" + name];
      ASSERT_EQ(g.sizes(), ref.grads.at(name).sizes());
      const double eg = pp_run::excess(g, ref.grads.at(name), 1e-5, 1e-4);
      EXPECT_LE(eg, 0) << "the gradient after the first batch differs from one process on the whole batch (by "
                       << (g - ref.grads.at(name)).abs().max().item<double>() << " at most, reference scale "
                       << ref.grads.at(name).abs().max().item<double>() << ", norm ratio "
                       << g.norm().item<double>() / std::max(1e-30, ref.grads.at(name).norm().item<double>())
                       << "): input gradients not sent back, outputs kept detached, the loss not scaled by the "
                          "micro-batch weight, or the wrong micro-batch?";
      const double ep = pp_run::excess(p, ref.params.at(name), 2e-5, 1e-4);
      EXPECT_LE(ep, 0) << "the parameter after " << pp_run::kSteps << " AdamW steps differs by up to "
                       << (p - ref.params.at(name)).abs().max().item<double>();
    }
  }
  // The tied copies stay equal, bit for bit: both take the same summed gradient.
  if (spec.ranks > 1) {
    EXPECT_TRUE(torch::equal(ranks[0]["grad/wte.weight"], ranks[last]["grad/wte.weight"]))
        << "the two copies of wte got different gradients: sum_tied_gradients must give both the sum";
    EXPECT_TRUE(torch::equal(ranks[0]["param/wte.weight"], ranks[last]["param/wte.weight"]))
        << "the two copies of wte drifted apart";
  }
  for (int64_t k = 0; k < pp_run::kSteps; ++k) {
    const std::string key = "loss/step" + std::to_string(k);
    ASSERT_TRUE(ranks[last].count(key)) << "the last stage's rank " << last << " saved no " << key;
    const double got = ranks[last][key].item<double>(), want = ref.losses[static_cast<size_t>(k)];
    EXPECT_NEAR(got, want, 1e-5 + 1e-4 * std::abs(want)) << key << ": the batch loss is the sum of the micro-batch "
                                                         << "losses, each scaled by its weight (1/m)";
  }
  // Each rank performed 2 * m * v actions in the first batch.
  for (int q = 0; q < spec.ranks; ++q) {
    ASSERT_TRUE(ranks[q].count("timeline"));
    EXPECT_EQ(ranks[q]["timeline"].size(0), 2 * spec.microbatches * spec.virtual_chunks) << "rank " << q;
  }
  EXPECT_EQ(rec.get<std::vector<std::string>>("leftovers"), std::vector<std::string>{});
}

TEST(PipelineRun, GPipeTwoRanksMatchesOneProcess) { expect_matches_single_process({2, "gpipe", 4, 1, 2}, false); }
TEST(PipelineRun, GPipeFourRanksMatchesOneProcess) { expect_matches_single_process({4, "gpipe", 4, 1, 4}, false); }
TEST(PipelineRun, OneFOneBTwoRanksMatchesOneProcess) { expect_matches_single_process({2, "1f1b", 4, 1, 2}, false); }
TEST(PipelineRun, OneFOneBFourRanksMatchesOneProcess) { expect_matches_single_process({4, "1f1b", 8, 1, 4}, false); }
TEST(PipelineRun, InterleavedTwoRanksMatchesOneProcess) {
  expect_matches_single_process({2, "interleaved", 4, 2, 4}, false);
}
TEST(PipelineRun, InterleavedFourRanksMatchesOneProcess) {
  expect_matches_single_process({4, "interleaved", 8, 2, 8}, false);
}

// The program's own schedules (Problem 3.1) with the executor (Problem 3.2).
TEST(PipelineRun, GPipeBuiltScheduleMatchesOneProcess) { expect_matches_single_process({2, "gpipe", 4, 1, 2}, true); }
TEST(PipelineRun, OneFOneBBuiltScheduleMatchesOneProcess) {
  expect_matches_single_process({4, "1f1b", 8, 1, 4}, true);
}
TEST(PipelineRun, InterleavedBuiltScheduleMatchesOneProcess) {
  expect_matches_single_process({2, "interleaved", 4, 2, 4}, true);
}

}  // namespace
