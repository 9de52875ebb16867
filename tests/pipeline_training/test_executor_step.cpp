// Problem 3.2 in one process: forward_step and backward_step with p = 1 rank and v = 2
// chunks (two virtual stages on rank 0, so their messages are handed over in memory); also
// v = 3 chunks with one micro-batch, and backwards in reverse micro-batch order.
// Checked against the plain model on the whole batch:
//   - the batch loss, and every parameter's gradient (chunk 0's only arrive if chunk 1
//     sent the gradient of its input back, and if what was kept stayed in the graph);
//   - what forward keeps: one entry more after each F, one less after each B, nothing
//     left at the end (kept_count, observed before every action);
//   - the messages: one activation per F on chunk 0, one gradient per B on chunk 1;
//   - each F runs its chunk's forward exactly once (counted by a stage that counts).
// Tolerance: 1e-5 + 1e-4 |want| elementwise (float32 sums in another order).
// The subject parts run the executor (student code) and record what it produced and what was
// observed (Outcome::put); the plain model and every check are the judge's (tests/judge/judge.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>

#include "judge/judge.h"
#include "judge/tensor.h"
#include "model/gpt2.h"
#include "pipeline_training/executor.h"
#include "pipeline_training/p2p.h"
#include "pipeline_training/stage_model.h"
#include "train/loss.h"

namespace {
namespace pp = kit::pp;
namespace judge = kit::judge;

constexpr int64_t kBatch = 4, kSeqLen = 8, kVocab = 50;

// One block per chunk.
kit::GPT2 tiny_model(int64_t chunks = 2) {
  kit::GPT2Config cfg = kit::gpt2_preset("tiny");
  cfg.dropout = 0;
  cfg.n_layer = chunks;
  return kit::build_model(cfg, kVocab, kSeqLen, 11);
}

struct Data {
  torch::Tensor idx, labels, mask;
};
Data batch() {
  torch::manual_seed(5);
  auto t = torch::randint(kVocab, {kBatch, kSeqLen + 1}, torch::kInt64);
  auto mask = torch::ones({kBatch, kSeqLen});
  mask.narrow(1, 0, 3).narrow(0, 1, 1).zero_();  // a row with fewer counted tokens
  return {t.narrow(1, 0, kSeqLen).contiguous(), t.narrow(1, 1, kSeqLen).contiguous(), mask};
}

// A stage that counts its forward calls. Each F must run its chunk once: a second forward (say
// one under NoGradGuard for the activation it sends) costs a forward more and, with dropout on,
// sends one draw of the masks while backpropagating through another. (With dropout 0, as here,
// the two agree, so only the count can tell.)
class CountingStageImpl : public pp::StageModuleImpl {
 public:
  using pp::StageModuleImpl::StageModuleImpl;
  torch::Tensor forward(const torch::Tensor& input) override {
    ++calls;
    return pp::StageModuleImpl::forward(input);
  }
  int64_t calls = 0;
};

struct Outcome {
  std::vector<int64_t> forwards;  // forward calls per chunk
  pp::BatchResult result;         // recorded: loss and peak_kept
  std::vector<size_t> kept_before;  // kept_count() before each action
  size_t kept_after = 0;
  int64_t sent = 0, received = 0;
  std::map<std::string, torch::Tensor> grads;  // by the full model's names

  void put(judge::Record& out) const {
    out.put("forwards", forwards);
    out.put("loss", result.loss);
    out.put("peak_kept", result.peak_kept);
    out.put("kept_before", kept_before);
    out.put("kept_after", kept_after);
    out.put("sent", sent);
    out.put("received", received);
    out.put("grads", grads);
  }
  static Outcome get(const judge::Record& got) {
    Outcome o;
    o.forwards = got.get<std::vector<int64_t>>("forwards");
    o.result.loss = got.get<double>("loss");
    o.result.peak_kept = got.get<int64_t>("peak_kept");
    o.kept_before = got.get<std::vector<size_t>>("kept_before");
    o.kept_after = got.get<size_t>("kept_after");
    o.sent = got.get<int64_t>("sent");
    o.received = got.get<int64_t>("received");
    o.grads = got.get<std::map<std::string, torch::Tensor>>("grads");
    return o;
  }
};

Outcome run_in_process(const pp::RankSchedule& schedule, int64_t m, int64_t v = 2) {
  auto full = tiny_model(v);
  const pp::PipelineShape shape{1, m, v};
  std::vector<pp::StageModule> chunks;
  std::vector<std::shared_ptr<CountingStageImpl>> counted;
  for (int64_t c = 0; c < v; ++c) {
    counted.push_back(std::make_shared<CountingStageImpl>(full, c, v));
    chunks.push_back(pp::StageModule(std::static_pointer_cast<pp::StageModuleImpl>(counted.back())));
  }
  pp::P2P p2p(shape, 0, torch::TensorOptions().dtype(torch::kFloat32));
  pp::Executor ex(chunks, shape, 0, p2p);
  const Data d = batch();
  const auto micro = pp::split_batch(d.idx, d.labels, d.mask, m);
  Outcome o;
  o.result = ex.run(schedule, micro, [&](size_t, const pp::Action&) { o.kept_before.push_back(ex.kept_count()); });
  o.kept_after = ex.kept_count();
  for (const auto& c : counted) o.forwards.push_back(c->calls);
  o.sent = p2p.messages_sent();
  o.received = p2p.messages_received();
  pp::sum_tied_gradients(chunks, shape, 0);
  for (const auto& c : chunks)
    for (const auto& [name, p] : c->named_model_parameters())
      o.grads[name] = p.grad().defined() ? p.grad().detach().clone() : torch::Tensor();
  return o;
}

// The executor's run of `schedule`, in a subject part; its record in the judge (nullopt in the
// subject, which checks nothing, and when the run threw: the case has then failed, saying so).
std::optional<Outcome> student_run(const pp::RankSchedule& schedule, int64_t m, int64_t v = 2) {
  const judge::Record got = judge::subject([&](judge::Record& out) { run_in_process(schedule, m, v).put(out); },
                                           "the executor on " + pp::to_string(schedule));
  if (!judge::judging() || !got.ok()) return std::nullopt;
  return Outcome::get(got);
}

struct Plain {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
};
Plain plain_model(int64_t chunks = 2) {
  auto model = tiny_model(chunks);
  const Data d = batch();
  auto loss = kit::masked_cross_entropy(model->forward(d.idx), d.labels, d.mask);
  loss.backward();
  Plain p;
  p.loss = loss.item<double>();
  for (const auto& q : model->named_parameters()) p.grads[q.key()] = q.value().grad().detach().clone();
  return p;
}

void expect_gradients_match(const Outcome& o, const Plain& want) {
  for (const auto& [name, g] : want.grads) {
    ASSERT_TRUE(o.grads.count(name)) << name << " is in no chunk";
    ASSERT_TRUE(o.grads.at(name).defined())
        << name << " got no gradient: backward never reached it (was the gradient of chunk 1's input sent back to "
        << "chunk 0, and did chunk 0 keep the very output autograd built?)";
    const auto& got = o.grads.at(name);
    const double excess = ((got - g).abs() - (1e-5 + 1e-4 * g.abs())).max().item<double>();
    EXPECT_LE(excess, 0) << name << ": gradient differs from the plain model's by up to "
                         << (got - g).abs().max().item<double>() << " (norm ratio "
                         << got.norm().item<double>() / std::max(1e-30, g.norm().item<double>())
                         << "; m = 2 would be a loss not scaled by the micro-batch weight)";
  }
}

// F0.0 F0.1 B0.1 B0.0 F1.0 F1.1 B1.1 B1.0: one micro-batch at a time through both chunks.
TEST(ExecutorStep, TwoChunksOneMicroBatchAtATimeMatchPlainModel) {
  const pp::RankSchedule s = {pp::F(0, 0), pp::F(0, 1), pp::B(0, 1), pp::B(0, 0),
                              pp::F(1, 0), pp::F(1, 1), pp::B(1, 1), pp::B(1, 0)};
  const auto got = student_run(s, 2);
  if (!got) return;
  const Outcome& o = *got;
  const Plain want = plain_model();
  EXPECT_NEAR(o.result.loss, want.loss, 1e-5 + 1e-4 * want.loss)
      << "the batch loss is the sum of the micro-batch losses, each times its weight (1/m)";
  expect_gradients_match(o, want);
}

TEST(ExecutorStep, KeptStateGrowsWithForwardsAndIsFreedByBackwards) {
  const pp::RankSchedule s = {pp::F(0, 0), pp::F(0, 1), pp::B(0, 1), pp::B(0, 0),
                              pp::F(1, 0), pp::F(1, 1), pp::B(1, 1), pp::B(1, 0)};
  const auto got = student_run(s, 2);
  if (!got) return;
  const Outcome& o = *got;
  EXPECT_EQ(o.kept_before, (std::vector<size_t>{0, 1, 2, 1, 0, 1, 2, 1}))
      << "forward_step must keep() one entry, backward_step must take() it (and not keep it again)";
  EXPECT_EQ(o.kept_after, 0u);
  EXPECT_EQ(o.result.peak_kept, 2);
  EXPECT_EQ(o.sent, 4) << "one activation per forward of chunk 0, one input gradient per backward of chunk 1";
  EXPECT_EQ(o.received, 4);
}

// All forwards first (GPipe order over the two chunks): every micro-batch is kept at once,
// and the backwards still find their own micro-batch's tensors.
TEST(ExecutorStep, AllForwardsFirstKeepsEveryMicroBatchAndMatchesPlainModel) {
  pp::RankSchedule s;
  const int64_t m = 4;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < m; ++i) s.push_back(pp::F(i, c));
  for (int64_t c = 1; c >= 0; --c)
    for (int64_t i = 0; i < m; ++i) s.push_back(pp::B(i, c));
  const auto got = student_run(s, m);
  if (!got) return;
  const Outcome& o = *got;
  EXPECT_EQ(o.result.peak_kept, 2 * m);
  EXPECT_EQ(o.kept_after, 0u);
  const Plain want = plain_model();
  EXPECT_NEAR(o.result.loss, want.loss, 1e-5 + 1e-4 * want.loss);
  expect_gradients_match(o, want);
}

// More chunks than micro-batches: v = 3 chunks, m = 1. Every message's shape is the shape of
// its micro-batch (activation_shape(i)), whatever the stage: here stage 2 exists, micro-batch 2
// does not.
TEST(ExecutorStep, ThreeChunksOneMicroBatchMatchPlainModel) {
  const pp::RankSchedule s = {pp::F(0, 0), pp::F(0, 1), pp::F(0, 2), pp::B(0, 2), pp::B(0, 1), pp::B(0, 0)};
  const auto got = student_run(s, 1, 3);
  if (!got) return;
  const Plain want = plain_model(3);
  EXPECT_NEAR(got->result.loss, want.loss, 1e-5 + 1e-4 * want.loss);
  expect_gradients_match(*got, want);
  EXPECT_EQ(got->kept_after, 0u);
}

// Gradients accumulate over the micro-batches whatever order their backwards come in: here
// micro-batch 3's first, 0's last, on both chunks (a backward_step that zeroes the gradients
// at micro-batch 0 keeps that one's only).
TEST(ExecutorStep, BackwardsInReverseMicroBatchOrderAccumulateEveryMicroBatch) {
  const int64_t m = 4;
  pp::RankSchedule s;
  for (int64_t i = 0; i < m; ++i)
    for (const auto& a : {pp::F(i, 0), pp::F(i, 1)}) s.push_back(a);
  for (int64_t i = m - 1; i >= 0; --i)
    for (const auto& a : {pp::B(i, 1), pp::B(i, 0)}) s.push_back(a);
  const auto got = student_run(s, m);
  if (!got) return;
  const Plain want = plain_model();
  EXPECT_NEAR(got->result.loss, want.loss, 1e-5 + 1e-4 * want.loss);
  expect_gradients_match(*got, want);
}

TEST(ExecutorStep, EachForwardStepRunsItsChunkOnce) {
  const int64_t m = 4;
  pp::RankSchedule s;
  for (int64_t i = 0; i < m; ++i)
    for (const auto& a : {pp::F(i, 0), pp::F(i, 1), pp::B(i, 1), pp::B(i, 0)}) s.push_back(a);
  const auto got = student_run(s, m);
  if (!got) return;
  const Outcome& o = *got;
  EXPECT_EQ(o.forwards, (std::vector<int64_t>{m, m}))
      << "forward calls of chunk 0 and chunk 1 for " << m << " micro-batches: each forward_step runs its chunk once "
      << "and keeps that very output (a second forward, with dropout on, would draw other masks)";
}

// A backward whose forward never ran is an error naming the action, never a crash.
TEST(ExecutorStep, BackwardWithoutForwardIsAnError) {
  const pp::RankSchedule s = {pp::B(0, 1)};
  const judge::Record got = judge::subject(
      [&](judge::Record& out) { out.outcome("run", [&] { run_in_process(s, 1); }); }, "the executor on B0.1 alone");
  JUDGE {
    const auto o = got.get<judge::Outcome>("run");
    if (!o.threw()) FAIL() << "B(0) before F(0) must throw";
    ASSERT_EQ(o.kind, "kit::Error") << "B(0) before F(0) must throw a kit::Error, not " << o.describe();
    EXPECT_NE(o.message.find("micro-batch 0"), std::string::npos) << o.message;
  }
}

}  // namespace
