// DeepSeek-V4.1 state rollback and flat batches on the goldens' tiny models (every layer role: Full,
// Reuse, Reindex, candidate source, ratio 1 and 2 compressors, Engram, DSpark rings):
// - "append k tokens, truncate k" leaves every row a later forward reads bitwise as before, returns
//   the blocks, and the next tokens' logits are bitwise those of a state that never saw the k tokens;
// - one flat forward of many sequences (prefill chunks and decode tokens mixed) gives each sequence
//   bitwise the logits it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "v41_golden_model.h"

namespace deepinfer {
namespace {

constexpr int64_t kRollback = 6;

model::V41Model& model_for(const std::string& c) {
  static std::map<std::string, std::unique_ptr<model::V41Model>> cache;
  auto& m = cache[c];
  if (!m) {
    m = testing::load_v41_golden(c);
    testing::with_options(*m, [](model::V41Options& o) { o.max_rollback_tokens = kRollback; });
  }
  return *m;
}

int32_t token(int64_t seq, int64_t pos, int64_t vocab) { return static_cast<int32_t>((seq * 131 + pos * 37 + 11) % vocab); }

// Feeds tokens [from, to) of sequence `seq` to `st` in one forward; logits of every row.
std::vector<float> feed(model::V41Model& m, model::SequenceState& st, int64_t seq, int64_t to) {
  model::ForwardBatch b;
  for (int64_t p = st.length(); p < to; ++p) {
    b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.token_ids.push_back(token(seq, p, m.vocab_size()));
  }
  b.seq_start = {0, static_cast<int32_t>(b.token_ids.size())};
  b.states = {&st};
  std::vector<float> logits;
  m.forward(b, logits);
  return logits;
}

// Everything of a state that a later forward can read.
struct Snapshot {
  std::vector<std::vector<float>> rings, ckv, ik;
  std::vector<int64_t> engram_hist;
  int64_t length = 0, blocks = 0;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const model::V41Model& m, model::V41SequenceState& st) {
  Snapshot s;
  const auto& c = m.config();
  for (int64_t r = 0; r < c.n_layers + c.n_mtp_layers; ++r) s.rings.push_back(st.ring(r));
  for (auto& src : st.sources) {
    s.ckv.push_back(model::V41SequenceState::floats(src.ckv));
    s.ik.push_back(model::V41SequenceState::floats(src.ik));
  }
  // the hash of the next token looks back max_ngram-1 positions; the rest is rollback reserve
  const size_t look = static_cast<size_t>(std::max<int64_t>(c.engram_max_ngram_size - 1, 0));
  s.engram_hist.assign(st.engram_hist.end() - std::min(look, st.engram_hist.size()), st.engram_hist.end());
  s.length = st.length();
  s.blocks = st.blocks();
  return s;
}

class V41State : public ::testing::TestWithParam<std::string> {};

TEST_P(V41State, TruncateTakesBackTokensExactly) {
  auto& m = model_for(GetParam());
  const auto& c = m.config();
  std::string roles;
  for (int64_t l = 0; l < c.n_layers; ++l) roles += " " + c.role(l);
  std::printf("[v41-rollback] %s layer roles:%s\n", GetParam().c_str(), roles.c_str());
  for (int64_t prefix : {41, 48}) {            // both group phases of the ratio-2 compressors
    for (int64_t k : {int64_t{1}, kRollback}) {
      for (bool decode : {false, true}) {      // the k tokens as one chunk or as k decode steps
        auto st = m.new_sequence();
        auto* vs = dynamic_cast<model::V41SequenceState*>(st.get());
        feed(m, *st, 0, prefix);
        const Snapshot before = snapshot(m, *vs);
        if (decode)
          for (int64_t p = prefix + 1; p <= prefix + k; ++p) feed(m, *st, 7, p);  // other tokens than seq 0's
        else
          feed(m, *st, 7, prefix + k);
        st->truncate(prefix);
        const std::string what = GetParam() + " prefix " + std::to_string(prefix) + " k " + std::to_string(k) +
                                 (decode ? " decode" : " chunk");
        EXPECT_TRUE(snapshot(m, *vs) == before) << what;
        EXPECT_EQ(vs->blocks(), m.state_blocks_for(prefix)) << what;
        // The next tokens: bitwise as on a state that never saw the k tokens.
        auto ref = m.new_sequence();
        feed(m, *ref, 0, prefix);
        EXPECT_EQ(feed(m, *st, 0, prefix + 3), feed(m, *ref, 0, prefix + 3)) << what;
        if (c.dspark_block_size > 0) {
          auto* vr = dynamic_cast<model::V41SequenceState*>(ref.get());
          EXPECT_EQ(m.draft(*vs, 5).logits, m.draft(*vr, 5).logits) << what;
        }
      }
    }
  }
}

TEST_P(V41State, TruncateRefusesWhatItCannotTakeBack) {
  auto& m = model_for(GetParam());
  auto st = m.new_sequence();
  feed(m, *st, 0, 30);
  EXPECT_THROW(st->truncate(30 - kRollback - 1), Error);  // more than the rollback rows hold
  EXPECT_THROW(st->truncate(31), Error);
  EXPECT_EQ(st->length(), 30);
  st->truncate(30);  // nothing to take back
  EXPECT_EQ(st->length(), 30);
  st->truncate(30 - kRollback);
  EXPECT_EQ(st->length(), 30 - kRollback);
  EXPECT_THROW(st->truncate(30 - kRollback - 1), Error);  // the reserve is spent until new tokens come
  feed(m, *st, 0, 30 - kRollback + 2);
  st->truncate(30 - kRollback);  // what came since can go again
  EXPECT_EQ(st->length(), 30 - kRollback);
}

TEST_P(V41State, FlatBatchGivesEachSequenceItsOwnLogits) {
  auto& m = model_for(GetParam());
  const int64_t V = m.vocab_size();
  // Per sequence: the steps it takes (tokens per forward); 0 = not in that forward.
  const std::vector<std::vector<int64_t>> plan = {
      {9, 1, 1, 1}, {1, 1, 1, 1}, {30, 0, 5, 1}, {2, 17, 1, 0}, {0, 45, 1, 1}, {64, 1, 8, 1}};
  const size_t S = plan.size();
  std::vector<std::unique_ptr<model::SequenceState>> alone(S), together(S);
  for (size_t s = 0; s < S; ++s) {
    alone[s] = m.new_sequence();
    together[s] = m.new_sequence();
  }
  for (size_t step = 0; step < plan[0].size(); ++step) {
    model::ForwardBatch b;
    b.seq_start = {0};
    std::vector<std::vector<float>> want(S);
    for (size_t s = 0; s < S; ++s) {
      const int64_t n = plan[s][step], from = together[s]->length();
      if (n) want[s] = feed(m, *alone[s], static_cast<int64_t>(s), from + n);
      for (int64_t i = 0; i < n; ++i) {
        b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()));
        b.token_ids.push_back(token(static_cast<int64_t>(s), from + i, V));
        b.positions.push_back(from + i);
      }
      b.seq_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.states.push_back(together[s].get());
    }
    std::vector<float> got;
    m.forward(b, got);
    for (size_t s = 0; s < S; ++s) {
      const size_t r0 = static_cast<size_t>(b.seq_start[s]) * V, r1 = static_cast<size_t>(b.seq_start[s + 1]) * V;
      EXPECT_EQ(std::vector<float>(got.begin() + r0, got.begin() + r1), want[s])
          << GetParam() << " step " << step << " sequence " << s;
    }
  }
  // Drafting all sequences in one flat forward gives each the draft it gets alone, bit for bit.
  if (m.config().dspark_block_size > 0 && m.config().n_mtp_layers > 0) {
    std::vector<model::V41SequenceState*> sts;
    std::vector<int32_t> anchors;
    for (size_t s = 0; s < S; ++s) {
      sts.push_back(dynamic_cast<model::V41SequenceState*>(together[s].get()));
      anchors.push_back(static_cast<int32_t>(3 + s));
    }
    const std::vector<model::V41Draft> batch = m.draft(sts, anchors);
    ASSERT_EQ(batch.size(), S);
    for (size_t s = 0; s < S; ++s) {
      const model::V41Draft one = m.draft(*sts[s], anchors[s]);
      EXPECT_EQ(batch[s].tokens, one.tokens) << "draft of sequence " << s;
      EXPECT_EQ(batch[s].logits, one.logits) << "draft of sequence " << s;
      EXPECT_EQ(batch[s].confidence, one.confidence) << "draft of sequence " << s;
    }
    EXPECT_THROW(m.draft({sts[0], sts[0]}, {1, 2}), Error);  // one state twice
  }
  // Positions that do not continue the state are refused.
  model::ForwardBatch bad;
  bad.token_ids = {1};
  bad.seq_start = {0, 1};
  bad.states = {together[0].get()};
  bad.positions = {together[0]->length() + 1};
  std::vector<float> out;
  EXPECT_THROW(m.forward(bad, out), Error);
}

// With chunk-invariant selection (the default) a token's logits do not depend
// on how its sequence was cut into forwards: one prefill, chunks of any size, prefix then decode steps
// all give the same bits (SWA bounded replay off: it changes the window of the last layers by design).
// This is what makes preemption by recompute and draft verification exact.
// Chunks of 1, 2, 3, 7 and 64 tokens and uneven ones. The CPU backend sums in one order in either mode; on CUDA
// this holds with DEEPINFER_BATCH_INVARIANT=1 (scripts/gpu_model_check.sh runs this test so).
TEST_P(V41State, PrefillChunksAndDecodeGiveTheSameBits) {
  auto& m = model_for(GetParam());
  std::vector<int32_t> ids;
  for (int64_t p = 0; p < 70; ++p) ids.push_back(token(3, p, m.vocab_size()));
  const auto once = model::logits_in_steps(m, ids, {0, 70});
  std::vector<std::vector<int64_t>> all = {{0, 1, 2, 70}, {0, 7, 20, 33, 46, 59, 70}};
  for (int64_t chunk : {1, 2, 3, 7, 64}) {
    all.emplace_back();
    for (int64_t p = 0; p < 70; p += chunk) all.back().push_back(p);
    all.back().push_back(70);
  }
  std::vector<int64_t> decode = {0, 9};
  for (int64_t p = 10; p <= 70; ++p) decode.push_back(p);
  all.push_back(decode);
  for (const auto& cuts : all) {
    std::string shown;
    for (int64_t c : cuts) shown += " " + std::to_string(c);
    EXPECT_TRUE(model::logits_in_steps(m, ids, cuts) == once) << GetParam() << " cuts" << shown;
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, V41State, ::testing::Values("tiny-a", "tiny-b"));

}  // namespace
}  // namespace deepinfer
