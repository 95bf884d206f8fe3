// DeepSeek-V4.1 per-sequence state in pool blocks (issue 4) on the goldens' tiny models: after prefill,
// chunked prefill and decode steps the pool holds exactly state_blocks_for(length) blocks per live
// sequence, reset() and destruction return them, a spent pool fails forward() cleanly (state unchanged),
// and the block size changes no logit or draft bit.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v41/v41_model.h"
#include "v41_golden_model.h"

namespace deepinfer {
namespace {

model::V41Model& model_for(const std::string& c) {
  static std::map<std::string, std::unique_ptr<model::V41Model>> cache;
  auto& m = cache[c];
  if (!m) m = testing::load_v41_golden(c);
  return *m;
}

int32_t token(int64_t seq, int64_t pos, int64_t vocab) { return static_cast<int32_t>((seq * 131 + pos * 37 + 11) % vocab); }

// One forward advancing each state by its count of tokens (0: skipped); logits of every row.
std::vector<float> step(model::V41Model& m, const std::vector<model::SequenceState*>& states,
                        const std::vector<int64_t>& counts) {
  model::ForwardBatch b;
  b.seq_start = {0};
  for (size_t s = 0; s < states.size(); ++s) {
    for (int64_t i = 0; i < counts[s]; ++i) {
      b.logit_rows.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.token_ids.push_back(token(static_cast<int64_t>(s), states[s]->length() + i, m.vocab_size()));
    }
    b.seq_start.push_back(static_cast<int32_t>(b.token_ids.size()));
  }
  b.states = states;
  std::vector<float> logits;
  m.forward(b, logits);
  return logits;
}

class V41Pool : public ::testing::TestWithParam<std::string> {};

TEST_P(V41Pool, PoolHoldsExactlyStateBlocksFor) {
  auto& m = model_for(GetParam());
  for (int64_t bb : {16384, 4096, 1024}) {
    auto pool = std::make_shared<BlockPool>(bb, 0);
    m.set_state_pool(pool);
    EXPECT_EQ(m.state_block_bytes(), bb);
    EXPECT_EQ(m.state_blocks_for(0), 0);
    for (int64_t t = 1; t < 400; ++t) EXPECT_LE(m.state_blocks_for(t - 1), m.state_blocks_for(t));
    std::vector<std::unique_ptr<model::SequenceState>> seqs;
    for (int i = 0; i < 3; ++i) seqs.push_back(m.new_sequence());
    EXPECT_EQ(pool->used(), 0);  // nothing before the first token
    auto expect_exact = [&](const std::string& when) {
      int64_t want = 0;
      for (auto& s : seqs) {
        if (!s) continue;
        want += m.state_blocks_for(s->length());
        EXPECT_EQ(s->bytes(), m.state_blocks_for(s->length()) * bb) << when << " length " << s->length();
      }
      EXPECT_EQ(pool->used(), want) << when << " block bytes " << bb;
    };
    std::vector<model::SequenceState*> all = {seqs[0].get(), seqs[1].get(), seqs[2].get()};
    // seq 0: prefill 37 then decode; seq 1: chunks of various sizes; seq 2: decode from the first token.
    step(m, all, {37, 5, 1});
    expect_exact("first step");
    for (int64_t c : {13, 1, 2, 7, 31, 3, 1, 1, 16, 9}) {
      step(m, all, {1, c, 1});
      expect_exact("chunk " + std::to_string(c));
    }
    for (int i = 0; i < 12; ++i) {
      step(m, all, {i % 3 == 0 ? 0 : 1, 1, 1});
      expect_exact("decode");
    }
    auto* v = dynamic_cast<model::V41SequenceState*>(seqs[0].get());
    const int64_t before = pool->used();
    m.draft(*v, 3);  // drafting reads the stage rings; it allocates nothing
    EXPECT_EQ(pool->used(), before);
    seqs[1]->reset();
    EXPECT_EQ(seqs[1]->length(), 0);
    EXPECT_EQ(seqs[1]->bytes(), 0);
    expect_exact("after reset");
    step(m, all, {0, 3, 0});  // a reset sequence starts over
    expect_exact("after reuse");
    seqs[0].reset();
    expect_exact("after destruction");
    seqs.clear();
    EXPECT_EQ(pool->used(), 0);
  }
  // A long prefill with the SWA bounded replay: the same blocks.
  auto pool = std::make_shared<BlockPool>(4096, 0);
  m.set_state_pool(pool);
  testing::with_options(m, [&](model::V41Options& o) { o.replay_compact = true; });
  {
    auto st = m.new_sequence();
    step(m, {st.get()}, {150});
    EXPECT_EQ(pool->used(), m.state_blocks_for(150));
  }
  testing::with_options(m, [&](model::V41Options& o) { o.replay_compact = false; });
  EXPECT_EQ(pool->used(), 0);
}

TEST_P(V41Pool, SpentPoolFailsForwardAndLeavesTheStateAlone) {
  auto& m = model_for(GetParam());
  auto pool = std::make_shared<BlockPool>(1024, 0);
  m.set_state_pool(pool);
  const int64_t L = 10, cap = m.state_blocks_for(L);
  int64_t more = L + 1;
  while (m.state_blocks_for(more) == cap) ++more;  // the first length needing another block
  auto small = std::make_shared<BlockPool>(1024, cap);
  m.set_state_pool(small);
  auto st = m.new_sequence();
  step(m, {st.get()}, {L});
  EXPECT_EQ(small->used(), cap);
  EXPECT_THROW(step(m, {st.get()}, {more - L}), Error);
  EXPECT_EQ(st->length(), L);
  EXPECT_EQ(small->used(), cap);
  auto other = m.new_sequence();
  EXPECT_THROW(step(m, {st.get(), other.get()}, {0, 1}), Error);  // nothing left for a new sequence
  EXPECT_EQ(other->length(), 0);
  st->reset();
  EXPECT_EQ(small->used(), 0);
  step(m, {other.get()}, {L});  // the freed blocks serve the next sequence
  EXPECT_EQ(small->used(), cap);
  auto tiny = std::make_shared<BlockPool>(1024, m.state_blocks_for(1) - 1);
  m.set_state_pool(tiny);
  auto st2 = m.new_sequence();
  EXPECT_THROW(step(m, {st2.get()}, {1}), Error);
  EXPECT_EQ(tiny->used(), 0);
  EXPECT_EQ(st2->length(), 0);
}

TEST_P(V41Pool, BlockSizeChangesNoBit) {
  auto& m = model_for(GetParam());
  auto run = [&](int64_t bb, std::vector<float>& drafts) {
    m.set_state_pool(std::make_shared<BlockPool>(bb, 0));
    auto a = m.new_sequence(), b = m.new_sequence();
    std::vector<float> out;
    auto add = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
    add(step(m, {a.get(), b.get()}, {64, 7}));
    for (int64_t c : {13, 13, 13, 18}) add(step(m, {a.get(), b.get()}, {1, c}));
    for (int i = 0; i < 8; ++i) add(step(m, {a.get(), b.get()}, {1, 1}));
    model::V41Draft d = m.draft(*dynamic_cast<model::V41SequenceState*>(a.get()), 5);
    drafts = d.logits;
    drafts.insert(drafts.end(), d.confidence.begin(), d.confidence.end());
    return out;
  };
  std::vector<float> d16, d4;
  const std::vector<float> a = run(16384, d16), b = run(4096, d4);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  ASSERT_EQ(d16.size(), d4.size());
  EXPECT_EQ(0, std::memcmp(d16.data(), d4.data(), d16.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(Goldens, V41Pool, ::testing::Values("tiny-a", "tiny-b"));

}  // namespace
}  // namespace deepinfer
