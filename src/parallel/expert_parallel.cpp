#include "parallel/expert_parallel.h"

#include <algorithm>

#include "core/dtype.h"
#include "core/error.h"
#include "parallel/eplb.h"

namespace deepinfer::parallel {

namespace {

std::vector<uint16_t> to_bf16(const float* x, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

void from_bf16(const std::vector<uint16_t>& v, float* out) {
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(v[i]);
}

}  // namespace

ExpertParallel::ExpertParallel(Communicator& comm, const ExpertParallelConfig& c) : comm_(comm), config_(c) {
  const int R = comm.size();
  check(c.num_layers > 0 && c.num_experts > 0, "expert parallelism: needs MoE layers and experts, got ", c.num_layers,
        " layers of ", c.num_experts, " experts");
  check(R <= c.num_experts, "expert parallelism: ", R, " ranks but only ", c.num_experts,
        " routed experts (every rank must hold at least one)");
  check(c.redundant_experts >= 0, "expert parallelism: redundant experts (DEEPINFER_EPLB_REDUNDANT_EXPERTS) must be "
        ">= 0, got ", c.redundant_experts);
  check((c.num_experts + c.redundant_experts) % R == 0, "expert parallelism: ", c.num_experts, " routed experts",
        c.redundant_experts ? " + " + std::to_string(c.redundant_experts) + " redundant slots" : std::string(),
        " do not split evenly over ", R, " ranks (use an EP size that divides them, or redundant slots "
        "(DEEPINFER_EPLB_REDUNDANT_EXPERTS) that make up the difference)");
  check(c.rebalance_interval >= 0, "expert parallelism: the EPLB interval (DEEPINFER_EPLB_INTERVAL) must be >= 0, got ",
        c.rebalance_interval);
  slots_per_rank_ = (c.num_experts + c.redundant_experts) / R;
  load_.assign(c.num_layers * c.num_experts, 0);
  if (c.redundant_experts == 0) {
    maps_.assign(c.num_layers, ExpertMap::partition(c.num_experts, R));
  } else {
    place(std::vector<float>(c.num_layers * c.num_experts, 1.0f));
  }
}

void ExpertParallel::place(const std::vector<float>& weight) {
  // Global policy (one group, one node): the decode placement; any EP size on one host.
  const EplbPlacement p = rebalance_experts(weight.data(), config_.num_layers, config_.num_experts,
                                            slots_per_rank_ * size(), 1, 1, size());
  maps_.clear();
  for (int64_t l = 0; l < config_.num_layers; ++l) maps_.push_back(ExpertMap::from_eplb(p, l, size()));
}

std::vector<int64_t> ExpertParallel::held_experts(int64_t layer) const {
  std::vector<int64_t> e = map(layer).local_experts(rank());
  std::sort(e.begin(), e.end());
  e.erase(std::unique(e.begin(), e.end()), e.end());
  return e;
}

bool ExpertParallel::begin_step() {
  check(!pending_ && (next_layer_ == 0 || next_layer_ == config_.num_layers),
        "expert parallelism: a step began after ", next_layer_, " of ", config_.num_layers, " MoE layers");
  next_layer_ = 0;
  ++steps_;
  const int64_t every = config_.rebalance_interval;
  if (every == 0 || steps_ % every != 0) return false;
  // Every rank's counts, summed in rank order: all ranks place from the same loads.
  const size_t n = load_.size();
  std::vector<int64_t> all(n * size());
  comm_.all_gather(load_.data(), all.data(), n * sizeof(int64_t));
  comm_.synchronize();
  std::vector<float> weight(n, 0.0f);
  for (int r = 0; r < size(); ++r)
    for (size_t i = 0; i < n; ++i) weight[i] += static_cast<float>(all[r * n + i]);
  std::fill(load_.begin(), load_.end(), 0);
  const std::vector<ExpertMap> before = maps_;
  place(weight);
  ++rebalances_;
  for (int64_t l = 0; l < config_.num_layers; ++l)
    if (maps_[l].phy2log != before[l].phy2log) return true;
  return false;
}

ExpertParallel::Received ExpertParallel::dispatch(int64_t layer, const float* x, int64_t n, int64_t hidden,
                                                  const int32_t* topk_ids, const float* topk_weights, int64_t topk) {
  check(!pending_, "expert parallelism: layer ", next_layer_, " dispatched twice without a combine");
  check(layer == next_layer_, "expert parallelism: dispatch for MoE layer ", layer, ", expected layer ", next_layer_,
        " (every rank runs the layers in order, once per step)");
  const ExpertMap& m = map(layer);
  for (int64_t i = 0; i < n * topk; ++i)
    if (topk_ids[i] >= 0) ++load_[layer * config_.num_experts + topk_ids[i]];
  plan_ = plan_dispatch(comm_, m, topk_ids, n, topk);
  hidden_ = hidden;
  pending_ = true;
  Received r;
  r.offsets = plan_.expert_offsets;
  r.expert = m.local_experts(rank());
  const int64_t M = plan_.num_received();
  const std::vector<uint16_t> send = to_bf16(x, n * hidden);
  std::vector<uint16_t> recv(M * hidden);
  parallel::dispatch(comm_, plan_, send.data(), hidden * sizeof(uint16_t), recv.data());
  r.x.resize(M * hidden);
  from_bf16(recv, r.x.data());
  r.weight.resize(M);
  parallel::dispatch_weights(comm_, plan_, topk_weights, r.weight.data());
  return r;
}

void ExpertParallel::combine(const float* y, float* rows) {
  check(pending_, "expert parallelism: combine without a dispatch");
  const std::vector<uint16_t> send = to_bf16(y, plan_.num_received() * hidden_);
  std::vector<uint16_t> back(plan_.num_tokens * plan_.topk * hidden_);
  return_rows(comm_, plan_, send.data(), hidden_ * sizeof(uint16_t), back.data());
  from_bf16(back, rows);
  pending_ = false;
  ++next_layer_;
}

}  // namespace deepinfer::parallel
