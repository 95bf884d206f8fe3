// Flat batches: a sequence's logits are bitwise the same alone or batched with other sequences at
// other positions, and a batch advances every sequence's state independently; and a token's logits are
// the same bits whether its sequence was fed in one prefill, in chunks of any size or by decode.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer {
namespace {

std::vector<int32_t> ids(int n, int seed) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 131 + seed * 17 + 3) % 777);
  return v;
}

TEST(V4Batching, LogitsDoNotDependOnTheRestOfTheBatch) {
  auto m = model::V4Model::load("tests/data/goldens/v4/tiny-b");
  const std::vector<int32_t> a = ids(45, 1), b = ids(70, 2), c = ids(3, 3);

  // Alone: prefill 40 tokens of `a`, then 5 single-token steps.
  auto alone = m->new_sequence();
  std::vector<float> logits, alone_rows;
  model::ForwardBatch pre{{a.begin(), a.begin() + 40}, {0, 40}, {alone.get()}, {39}};
  m->forward(pre, logits);
  alone_rows = logits;
  for (int t = 40; t < 45; ++t) {
    model::ForwardBatch step{{a[t]}, {0, 1}, {alone.get()}, {0}};
    m->forward(step, logits);
    alone_rows.insert(alone_rows.end(), logits.begin(), logits.end());
  }

  // Batched: `a` shares every forward with a long prefill of `b` and a short `c`.
  auto sa = m->new_sequence(), sb = m->new_sequence(), sc = m->new_sequence();
  std::vector<float> batched_rows;
  model::ForwardBatch first;
  first.token_ids.assign(b.begin(), b.begin() + 33);
  first.token_ids.insert(first.token_ids.end(), a.begin(), a.begin() + 40);
  first.token_ids.insert(first.token_ids.end(), c.begin(), c.end());
  first.seq_start = {0, 33, 73, 76};
  first.states = {sb.get(), sa.get(), sc.get()};
  first.logit_rows = {72, 75};
  m->forward(first, logits);
  batched_rows.assign(logits.begin(), logits.begin() + 777);
  for (int t = 40; t < 45; ++t) {
    model::ForwardBatch step;
    step.token_ids = {b[33 + t - 40], b[34 + t - 40], a[t]};  // `b` advances two tokens per step
    step.seq_start = {0, 2, 3};
    step.states = {sb.get(), sa.get()};
    step.logit_rows = {2};
    if (t % 2) {  // vary the batch shape between steps
      step.token_ids.insert(step.token_ids.begin(), c[0]);
      step.seq_start = {0, 1, 3, 4};
      step.states = {sc.get(), sb.get(), sa.get()};
      step.logit_rows = {3};
    }
    m->forward(step, logits);
    batched_rows.insert(batched_rows.end(), logits.begin(), logits.end());
  }
  EXPECT_EQ(sa->length(), 45);
  EXPECT_EQ(sb->length(), 43);
  EXPECT_EQ(sc->length(), 5);
  ASSERT_EQ(batched_rows.size(), alone_rows.size());
  EXPECT_TRUE(batched_rows == alone_rows) << "batched logits differ from the sequence alone";
}

// One prefill, chunks of 1, 2, 3, 7 and 64 tokens (boundaries inside the CSA / HCA compression groups and the
// sliding window) and a prefix then decode steps give every position the same logit bits: what makes
// preemption by recompute exact. The CPU backend sums in one order in either mode; on CUDA this holds with
// DEEPINFER_BATCH_INVARIANT=1 (scripts/gpu_model_check.sh runs this test so).
TEST(V4Batching, PrefillChunksAndDecodeGiveTheSameBits) {
  for (const char* name : {"tiny-a", "tiny-b"}) {
    auto m = model::V4Model::load(std::string("tests/data/goldens/v4/") + name);
    const std::vector<int32_t> a = ids(75, 4);
    const std::vector<float> once = model::logits_in_steps(*m, a, {0, 75});
    ASSERT_EQ(once.size(), 75u * m->vocab_size());
    for (int64_t chunk : {1, 2, 3, 7, 64}) {
      std::vector<int64_t> cuts;
      for (int64_t t = 0; t < 75; t += chunk) cuts.push_back(t);
      cuts.push_back(75);
      EXPECT_TRUE(model::logits_in_steps(*m, a, cuts) == once) << name << ": chunks of " << chunk;
    }
    std::vector<int64_t> decode = {0, 11};  // a prefill of 11, then 64 decode steps
    for (int64_t t = 12; t <= 75; ++t) decode.push_back(t);
    EXPECT_TRUE(model::logits_in_steps(*m, a, decode) == once) << name << ": prefill then decode";
  }
}

TEST(V4Batching, RejectsMalformedBatches) {
  auto m = model::V4Model::load("tests/data/goldens/v4/tiny-a");
  auto s = m->new_sequence();
  std::vector<float> logits;
  model::ForwardBatch bad_id{{5, 1000}, {0, 2}, {s.get()}, {1}};
  EXPECT_THROW(m->forward(bad_id, logits), Error);
  model::ForwardBatch bad_start{{5, 6}, {0, 1}, {s.get()}, {1}};
  EXPECT_THROW(m->forward(bad_start, logits), Error);
  model::ForwardBatch bad_row{{5, 6}, {0, 2}, {s.get()}, {2}};
  EXPECT_THROW(m->forward(bad_row, logits), Error);
  EXPECT_EQ(s->length(), 0);  // a rejected batch leaves the state untouched
}

}  // namespace
}  // namespace deepinfer
