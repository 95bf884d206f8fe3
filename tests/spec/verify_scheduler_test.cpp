// The confidence scheduler and the step-cost table on synthetic confidences and cost curves.
#include "spec/verify_scheduler.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace deepinfer::spec {
namespace {

VerifyRequest req(std::vector<double> c, int max_tokens = 5) { return {std::move(c), max_tokens}; }

TEST(StepCostTable, MonotoneAndInterpolated) {
  StepCostTable t({1, 2, 4, 8}, {1.0, 0.9, 2.0, 4.0});  // a noisy dip at 2 is lifted to 1.0
  EXPECT_DOUBLE_EQ(t.seconds(2), 1.0);
  EXPECT_DOUBLE_EQ(t.seconds(3), 1.5);
  EXPECT_DOUBLE_EQ(t.seconds(6), 3.0);
  EXPECT_DOUBLE_EQ(t.seconds(16), 8.0);  // past the last size: the last segment's slope
  for (int64_t b = 1; b < 20; ++b) EXPECT_LE(t.seconds(b), t.seconds(b + 1));
  EXPECT_THROW(StepCostTable({2, 1}, {1.0, 1.0}), Error);
  EXPECT_THROW(StepCostTable({1}, {0.0}), Error);
}

TEST(StepCostTable, ProfileMeasuresEverySize) {
  std::vector<int64_t> seen;
  auto t = StepCostTable::profile([&](int64_t b) { seen.push_back(b); }, 5, 1);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(seen.size(), 8u);  // warm-up + one timed run each
}

TEST(VerifyScheduler, FreeStepsVerifyEveryDraft) {
  auto flat = StepCostTable::from_sps({1, 64}, {1.0, 1.0});
  auto p = schedule_by_confidence({req({0.9, 0.8, 0.1}, 3), req({0.5, 0.5}, 2)}, 2, 2, 100, flat);
  EXPECT_EQ(p.lengths, (std::vector<int>{3, 2}));
  EXPECT_EQ(p.draft_tokens, 5);
  EXPECT_NEAR(p.expected_tokens, 2 + 0.9 + 0.72 + 0.072 + 0.5 + 0.25, 1e-12);
}

TEST(VerifyScheduler, CostlyStepsVerifyNothing) {
  auto steep = StepCostTable({1, 2, 3, 4}, {1.0, 2.0, 3.0, 4.0});  // cost linear in B
  auto p = schedule_by_confidence({req({0.9, 0.9})}, 1, 1, 10, steep);  // (1 + 0.9) / 2 < 1
  EXPECT_EQ(p.lengths, (std::vector<int>{0}));
  EXPECT_EQ(p.expected_tokens, 1.0);
}

TEST(VerifyScheduler, TradesSurvivalAgainstCost) {
  // seconds(B) = 1 + 0.25 (B - 2): two decodes (T = 2), theta = tau / seconds.
  auto cost = StepCostTable({2, 10}, {1.0, 3.0});
  // candidates by survival: 0.9 (r0), 0.81 (r0), 0.6 (r1), 0.36 (r1), 0.2 (r0: 0.81 * 0.25)...
  // theta: 2/1 = 2 -> 2.9/1.25 = 2.32 -> 3.71/1.5 = 2.47 -> 4.31/1.75 = 2.46: stop before 0.6.
  auto p = schedule_by_confidence({req({0.9, 0.9, 0.25}), req({0.6, 0.6})}, 2, 2, 100, cost);
  EXPECT_EQ(p.lengths, (std::vector<int>{2, 0}));
  EXPECT_NEAR(p.expected_tokens, 3.71, 1e-12);
}

TEST(VerifyScheduler, EarlyStopDoesNotLookPastTheFirstLoss) {
  // A staircase curve where verifying 3 would pay (4 * 0.5 = 2 > 1) but the first token alone does not
  // (2 * 0.5 = 1, not above 1): the non-anticipating walk stops there.
  auto stairs = StepCostTable::from_sps({1, 2, 3, 4}, {1.0, 0.5, 0.5, 0.5});
  auto p = schedule_by_confidence({req({1.0, 1.0, 1.0})}, 1, 1, 10, stairs);
  EXPECT_EQ(p.lengths, (std::vector<int>{0}));
}

TEST(VerifyScheduler, PrefixesAreContiguousAndWithinCaps) {
  // request 1 has a zero in the middle: nothing after it; request 2 may verify only 1.
  auto p = schedule_by_confidence({req({0.3, 0.9, 0.9}), req({0.9, 0.0, 0.9}), req({0.9, 0.9}, 1)}, 3, 3, 100,
                                  StepCostTable::from_sps({1, 1000}, {1.0, 1.0}));
  EXPECT_EQ(p.lengths, (std::vector<int>{3, 1, 1}));
}

TEST(VerifyScheduler, TiesBreakByPositionThenRequest) {
  auto free_steps = StepCostTable::from_sps({1, 1000}, {1.0, 1.0});
  // all survival products equal 1: order (j=0,r=0), (j=0,r=1), (j=1,r=0), ...; budget 3.
  auto p = schedule_by_confidence({req({1, 1, 1}), req({1, 1, 1})}, 2, 2, 3, free_steps);
  EXPECT_EQ(p.lengths, (std::vector<int>{2, 1}));
  // equal values in any order of the requests give the same split by index
  auto q = schedule_by_confidence({req({0.5, 1}), req({0.5, 1})}, 2, 2, 1, free_steps);
  EXPECT_EQ(q.lengths, (std::vector<int>{1, 0}));
}

TEST(VerifyScheduler, BudgetIsNeverExceeded) {
  auto free_steps = StepCostTable::from_sps({1, 1000}, {1.0, 1.0});
  std::vector<VerifyRequest> rs(10, req({0.9, 0.9, 0.9, 0.9, 0.9}));
  for (int64_t budget : {0, 1, 7, 50, 100}) {
    auto p = schedule_by_confidence(rs, 10, 10, budget, free_steps);
    EXPECT_EQ(p.draft_tokens, std::min<int64_t>(budget, 50));
    int64_t sum = 0;
    for (int l : p.lengths) sum += l;
    EXPECT_EQ(sum, p.draft_tokens);
  }
}

TEST(VerifyScheduler, RejectsConfidencesOutsideUnitInterval) {
  EXPECT_THROW(schedule_by_confidence({req({1.5})}, 1, 1, 5, StepCostTable::from_sps({1}, {1.0})), Error);
}

TEST(VerifyScheduler, FixedCountIgnoresConfidence) {
  auto p = schedule_fixed({req({0.01, 0.01, 0.01}), req({0.9, 0.9, 0.9}, 1), req({0.9, 0.9, 0.9})}, 2, 4);
  EXPECT_EQ(p.lengths, (std::vector<int>{2, 1, 1}));  // caps, then the budget in request order
  EXPECT_EQ(p.draft_tokens, 4);
}

}  // namespace
}  // namespace deepinfer::spec
