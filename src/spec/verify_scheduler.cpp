#include "spec/verify_scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::spec {

VerifyPlan schedule_by_confidence(const std::vector<VerifyRequest>& requests, int64_t base_tokens, int64_t sampling,
                                  int64_t budget, const StepCostTable& cost) {
  VerifyPlan plan;
  plan.lengths.assign(requests.size(), 0);
  plan.expected_tokens = static_cast<double>(sampling);
  struct Candidate {
    double a;
    int j, r;
  };
  std::vector<Candidate> cands;
  for (size_t r = 0; r < requests.size(); ++r) {
    const VerifyRequest& q = requests[r];
    double a = 1.0;
    const int m = std::min<int>(q.max_tokens, static_cast<int>(q.confidence.size()));
    for (int j = 0; j < m; ++j) {
      check(q.confidence[j] >= 0.0 && q.confidence[j] <= 1.0, "verify scheduler: confidence ", q.confidence[j],
            " is outside [0, 1]");
      a *= q.confidence[j];
      if (!(a > 0.0)) break;
      cands.push_back({a, j, static_cast<int>(r)});
    }
  }
  if (cands.empty() || budget <= 0 || cost.empty()) return plan;
  std::sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
    if (x.a != y.a) return x.a > y.a;
    return x.j != y.j ? x.j < y.j : x.r < y.r;  // value-independent tie-break; a prefix before its extension
  });
  double best = plan.expected_tokens * cost.sps(base_tokens);
  double tau = plan.expected_tokens;
  for (const Candidate& c : cands) {
    if (plan.draft_tokens >= budget) break;
    // a is non-increasing in j and ties put j first, so (r, j) always extends r's admitted prefix.
    check(plan.lengths[c.r] == c.j, "verify scheduler: internal: candidate is not the next of its prefix");
    const double t = tau + c.a, theta = t * cost.sps(base_tokens + plan.draft_tokens + 1);
    if (!(theta > best)) break;  // early stop: never look past the first candidate that does not pay
    best = theta;
    tau = t;
    ++plan.lengths[c.r];
    ++plan.draft_tokens;
  }
  plan.expected_tokens = tau;
  return plan;
}

VerifyPlan schedule_fixed(const std::vector<VerifyRequest>& requests, int k, int64_t budget) {
  VerifyPlan plan;
  plan.lengths.assign(requests.size(), 0);
  for (size_t r = 0; r < requests.size(); ++r) {
    int l = std::min<int64_t>({static_cast<int64_t>(k), static_cast<int64_t>(requests[r].max_tokens),
                               static_cast<int64_t>(requests[r].confidence.size()), budget - plan.draft_tokens});
    l = std::max(l, 0);
    plan.lengths[r] = l;
    plan.draft_tokens += l;
  }
  return plan;
}

}  // namespace deepinfer::spec
