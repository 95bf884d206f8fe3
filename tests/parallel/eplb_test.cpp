// EPLB against DeepSeek's own eplb.py outputs (tests/data/eplb/eplb_goldens.json, copied unchanged
// from the shared goldens), and the placement properties the engine relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "parallel/eplb.h"

using namespace deepinfer;
using namespace deepinfer::parallel;
using nlohmann::json;

namespace {

const json& goldens() {
  static const json j = [] {
    std::ifstream f("tests/data/eplb/eplb_goldens.json");
    if (!f) throw std::runtime_error("tests/data/eplb/eplb_goldens.json not found (run from the repo root)");
    return json::parse(f);
  }();
  return j;
}

std::vector<float> flat_weight(const json& c) {
  std::vector<float> w;
  for (auto& row : c["weight"])
    for (auto& x : row) w.push_back(x.get<float>());
  return w;
}

EplbPlacement run_case(const json& c) {
  const std::vector<float> w = flat_weight(c);
  return rebalance_experts(w.data(), c["weight"].size(), c["weight"][0].size(), c["num_replicas"], c["num_groups"],
                           c["num_nodes"], c["num_gpus"]);
}

template <typename T>
std::vector<T> flatten(const json& j) {
  std::vector<T> out;
  if (j.is_array()) {
    for (auto& x : j) {
      auto part = flatten<T>(x);
      out.insert(out.end(), part.begin(), part.end());
    }
  } else {
    out.push_back(j.get<T>());
  }
  return out;
}

}  // namespace

TEST(Eplb, ReproducesEveryGoldenCaseExactly) {
  ASSERT_EQ(goldens()["cases"].size(), 22u);
  for (auto& c : goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const EplbPlacement r = run_case(c);
    EXPECT_EQ(r.max_replicas, static_cast<int64_t>(c["log2phy"][0][0].size()));
    EXPECT_EQ(r.phy2log, flatten<int64_t>(c["phy2log"]));
    EXPECT_EQ(r.log2phy, flatten<int64_t>(c["log2phy"]));
    EXPECT_EQ(r.logcnt, flatten<int64_t>(c["logcnt"]));
  }
}

TEST(Eplb, ReadmeExample) {  // deepseek-ai/EPLB README: 2 layers x 12 experts, 16 replicas, 4 groups, 2 nodes, 8 GPUs
  const float w[] = {90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86,
                     20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27};
  const EplbPlacement r = rebalance_experts(w, 2, 12, 16, 4, 2, 8);
  const std::vector<int64_t> row0(r.phy2log.begin(), r.phy2log.begin() + 16);
  EXPECT_EQ(row0, (std::vector<int64_t>{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1}));
}

// Every expert has a replica, log2phy and phy2log agree, and the hierarchical policy keeps each
// expert group on one node; the heaviest GPU is lighter than with the identity placement.
TEST(Eplb, PlacementProperties) {
  for (auto& c : goldens()["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const EplbPlacement r = run_case(c);
    const int64_t E = r.num_experts, P = r.num_replicas, K = r.max_replicas;
    const int64_t gpus = c["num_gpus"], nodes = c["num_nodes"], groups = c["num_groups"];
    const bool hierarchical = groups % nodes == 0;
    const std::vector<float> w = flat_weight(c);
    for (int64_t l = 0; l < r.num_layers; ++l) {
      int64_t total = 0;
      for (int64_t e = 0; e < E; ++e) {
        const int64_t cnt = r.logcnt[l * E + e];
        EXPECT_GE(cnt, 1);
        total += cnt;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t p = r.log2phy[(l * E + e) * K + k];
          if (k < cnt) EXPECT_EQ(r.phy2log[l * P + p], e);
          else EXPECT_EQ(p, -1);
        }
      }
      EXPECT_EQ(total, P);
      if (hierarchical) {  // all replicas of a group's experts on one node
        const int64_t group_size = E / groups, slots_per_node = P / nodes;
        std::vector<int64_t> node_of_group(groups, -1);
        for (int64_t p = 0; p < P; ++p) {
          const int64_t g = r.phy2log[l * P + p] / group_size, node = p / slots_per_node;
          if (node_of_group[g] < 0) node_of_group[g] = node;
          EXPECT_EQ(node_of_group[g], node);
        }
      }
      // Heaviest GPU: balanced placement vs experts laid out in order, E / gpus per GPU.
      std::vector<double> balanced(gpus, 0), identity(gpus, 0);
      for (int64_t p = 0; p < P; ++p) {
        const int64_t e = r.phy2log[l * P + p];
        balanced[p / (P / gpus)] += w[l * E + e] / r.logcnt[l * E + e];
      }
      for (int64_t e = 0; e < E; ++e) identity[e * gpus / E] += w[l * E + e];
      EXPECT_LE(*std::max_element(balanced.begin(), balanced.end()),
                *std::max_element(identity.begin(), identity.end()));
    }
  }
}

TEST(Eplb, BadShapesGetClearErrors) {
  const std::vector<float> w(12, 1.0f);
  EXPECT_THROW(rebalance_experts(w.data(), 1, 12, 8, 4, 2, 8), Error);    // fewer replicas than experts
  EXPECT_THROW(rebalance_experts(w.data(), 1, 12, 18, 4, 2, 8), Error);   // replicas not a multiple of GPUs
  EXPECT_THROW(rebalance_experts(w.data(), 1, 12, 16, 5, 5, 8), Error);   // groups do not split the experts
  EXPECT_THROW(rebalance_experts(w.data(), 1, 12, 16, 4, 2, 3), Error);   // GPUs do not split over nodes
  EXPECT_THROW(rebalance_experts(w.data(), 1, 12, 16, 0, 2, 8), Error);
  std::vector<float> bad = w;
  bad[3] = -1.0f;
  EXPECT_THROW(rebalance_experts(bad.data(), 1, 12, 16, 4, 2, 8), Error);
  bad[3] = std::nanf("");
  EXPECT_THROW(rebalance_experts(bad.data(), 1, 12, 16, 4, 2, 8), Error);
}
