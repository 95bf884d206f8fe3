// DeepSeek-V4 state rollback and copies: "append k tokens, truncate k" leaves every state row a later
// forward reads as it was, so the following logits are bitwise those of a state that never saw the k
// tokens (every layer role: sliding, CSA with its indexer, HCA; k across compression groups and the
// window); truncating further than max_rollback() is an error; a copied state continues bitwise like
// its source.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/deepseek_v4/v4_model.h"

namespace deepinfer::model {
namespace {

std::vector<int32_t> ids(int n, int seed) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back((i * 37 + seed * 11 + 5) % 777);
  return v;
}

std::vector<float> feed(V4Model& m, SequenceState& st, const std::vector<int32_t>& toks) {
  ForwardBatch b{toks, {0, static_cast<int32_t>(toks.size())}, {&st}, {}};
  for (int32_t i = 0; i < static_cast<int32_t>(toks.size()); ++i) b.logit_rows.push_back(i);
  std::vector<float> logits;
  m.forward(b, logits);
  return logits;
}

TEST(V4Rollback, TruncateRestoresTheStateExactly) {
  for (const char* name : {"tiny-a", "tiny-b"}) {
    auto m = V4Model::load(std::string("tests/data/goldens/v4/") + name);
    const int64_t R = m->max_rollback();
    ASSERT_GE(R, 5);
    const auto toks = ids(90, 1), other = ids(R, 2);
    for (int64_t prefix : {13, 31, 64}) {
      for (int64_t k : {int64_t{1}, int64_t{3}, R}) {
        auto ref = m->new_sequence(), st = m->new_sequence();
        feed(*m, *ref, {toks.begin(), toks.begin() + prefix});
        feed(*m, *st, {toks.begin(), toks.begin() + prefix});
        feed(*m, *st, {other.begin(), other.begin() + k});  // drafts that are rejected
        st->truncate(prefix);
        EXPECT_EQ(st->length(), prefix);
        EXPECT_EQ(st->bytes(), ref->bytes());
        const std::vector<int32_t> next(toks.begin() + prefix, toks.begin() + prefix + 20);
        EXPECT_TRUE(feed(*m, *st, next) == feed(*m, *ref, next)) << name << " prefix " << prefix << " k " << k;
      }
    }
  }
}

TEST(V4Rollback, TruncatingPastTheRollbackIsAnError) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-a");
  auto st = m->new_sequence();
  feed(*m, *st, ids(40, 3));
  EXPECT_THROW(st->truncate(40 - m->max_rollback() - 1), Error);
  EXPECT_EQ(st->length(), 40);
  st->truncate(40 - m->max_rollback());
  EXPECT_EQ(st->length(), 40 - m->max_rollback());
}

TEST(V4Rollback, ACopiedStateContinuesLikeItsSource) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-b");
  ASSERT_TRUE(m->can_copy_states());
  const auto toks = ids(70, 4);
  auto src = m->new_sequence(), copy = m->new_sequence();
  feed(*m, *src, {toks.begin(), toks.begin() + 45});
  copy->copy_from(*src);
  EXPECT_EQ(copy->length(), 45);
  const std::vector<int32_t> next(toks.begin() + 45, toks.end());
  EXPECT_TRUE(feed(*m, *copy, next) == feed(*m, *src, next));
}

// What prefix caching relies on: a prefill in chunks gives every row the bits of one prefill.
TEST(V4Rollback, ChunksGiveThePrefillsBits) {
  auto m = V4Model::load("tests/data/goldens/v4/tiny-a");
  const auto toks = ids(70, 5);
  auto whole = m->new_sequence(), chunked = m->new_sequence();
  const std::vector<float> expected = feed(*m, *whole, toks);
  std::vector<float> got = feed(*m, *chunked, {toks.begin(), toks.begin() + 29});
  for (int64_t t = 29; t < 70; t += 6) {
    const auto part = feed(*m, *chunked, {toks.begin() + t, toks.begin() + std::min<int64_t>(t + 6, 70)});
    got.insert(got.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(got == expected);
}

}  // namespace
}  // namespace deepinfer::model
