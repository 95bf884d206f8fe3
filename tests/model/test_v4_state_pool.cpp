// V4 state lives in blocks of one pool: exactly state_blocks_for(length) blocks per sequence, all
// returned on reset/destruction, a full pool is an error, and the block size never changes logits.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::model {
namespace {

std::vector<int32_t> ids(int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 53 + 7) % 777);
  return v;
}

std::vector<float> feed(V4Model& m, SequenceState& st, const std::vector<int32_t>& toks) {
  ForwardBatch b{toks, {0, static_cast<int32_t>(toks.size())}, {&st}, {static_cast<int32_t>(toks.size()) - 1}};
  std::vector<float> logits;
  m.forward(b, logits);
  return logits;
}

TEST(V4StatePool, BlocksMatchTheFormulaAndReturnOnReset) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-b");
  // small blocks (whole rows of every width: 48, 96, 24 and 48 floats): many arrays span several
  auto pool = std::make_shared<BlockPool>(1152, 0);
  m->set_state_pool(pool);
  auto a = m->new_sequence(), b = m->new_sequence();
  EXPECT_EQ(pool->used(), 0);  // nothing before the first token
  const auto toks = ids(100);
  int64_t fed_a = 0, fed_b = 0;
  for (int step : {1, 7, 32, 33, 1, 1, 25}) {
    feed(*m, *a, {toks.begin() + fed_a, toks.begin() + fed_a + step});
    fed_a += step;
    if (step > 1) {
      feed(*m, *b, {toks.begin() + fed_b, toks.begin() + fed_b + 3});
      fed_b += 3;
    }
    EXPECT_EQ(pool->used(), m->state_blocks_for(fed_a) + m->state_blocks_for(fed_b)) << "after " << fed_a;
    EXPECT_EQ(a->bytes(), m->state_blocks_for(fed_a) * 1152);
  }
  EXPECT_GT(m->state_blocks_for(100), m->state_blocks_for(1));  // compressed rows grow
  a->reset();
  EXPECT_EQ(pool->used(), m->state_blocks_for(fed_b));
  b.reset();
  EXPECT_EQ(pool->used(), 0);
}

TEST(V4StatePool, AFullPoolIsAnError) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-a");
  m->set_state_pool(std::make_shared<BlockPool>(1024, m->state_blocks_for(1) - 1));
  auto s = m->new_sequence();
  std::vector<float> logits;
  ForwardBatch b{{5}, {0, 1}, {s.get()}, {0}};
  EXPECT_THROW(m->forward(b, logits), Error);
}

TEST(V4StatePool, BlockSizeDoesNotChangeLogits) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-a");
  const auto toks = ids(70);
  std::vector<std::vector<float>> runs;
  for (int64_t block : {256, 4096, 16384}) {
    m->set_state_pool(std::make_shared<BlockPool>(block, 0));
    auto s = m->new_sequence();
    std::vector<float> out = feed(*m, *s, {toks.begin(), toks.begin() + 50});
    for (int t = 50; t < 70; ++t) {
      auto step = feed(*m, *s, {toks[t]});
      out.insert(out.end(), step.begin(), step.end());
    }
    runs.push_back(out);
  }
  EXPECT_TRUE(runs[0] == runs[1]);
  EXPECT_TRUE(runs[1] == runs[2]);
}

TEST(V4StatePool, BlocksThatSplitARowAreAClearError) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-b");  // head_dim 48: rows of 192 and 384 bytes
  try {
    m->set_state_pool(std::make_shared<BlockPool>(1024, 0));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("whole rows"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deepinfer::model
