// MoE expert parallelism over a Communicator (spec §6.1-6.2; the shape of DeepEP's normal mode):
//
//   plan_dispatch   every (token, k) goes to the rank owning a replica of its expert; ranks swap
//                   per-slot row counts, so each knows what it sends and receives (DeepEP's handle)
//   dispatch        token rows -> the owners, received grouped by local expert slot: the input
//                   layout of a grouped expert GEMM (slot s's rows at expert_offsets[s]...)
//   combine         expert outputs -> back to the tokens' ranks, summed per token from 0 in
//                   ascending logical expert order (the reference's order, which the V4.1 model
//                   gets from ops::Backend::moe_combine with its slots in expert order), so EP
//                   equals one rank bitwise when the expert function is row-independent.
//                   combine_rows hands back the unsummed [token][k] rows for moe_combine itself.
//
// Order inside a slot's group: source rank, then token, then k, so every run lays rows out alike.
// The shared expert stays on the token's rank (attention DP), outside these functions.
// Rows are bytes on dispatch (bf16, or fp8 + scales as DeepEP sends them) and fp32 on combine.
// Host memory (CPU ranks); the CUDA path needs the pack/unpack as kernels (docs/parallelism.md).
#pragma once
#include <cstdint>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/expert_map.h"

namespace deepinfer::parallel {

struct DispatchPlan {
  int num_ranks = 1;
  int64_t num_tokens = 0, topk = 0, slots_per_rank = 0;
  // Send side, in send order (by physical slot, then token, then k): the (token * topk + k) pair.
  std::vector<int64_t> send_pair;
  std::vector<size_t> send_rows, recv_rows;  // rows to / from each peer
  // Receive side: received row i (source-major order) sits at expert_row[i] in the slot-major
  // layout; slot s's rows are [expert_offsets[s], expert_offsets[s + 1]).
  std::vector<int64_t> expert_row;
  std::vector<int64_t> expert_offsets;
  // Per (token, k): the logical expert, -1 where not routed.
  std::vector<int64_t> pair_expert;

  int64_t num_received() const { return expert_offsets.empty() ? 0 : expert_offsets.back(); }
};

// topk_ids: [num_tokens][topk] logical experts of this rank's tokens, -1 for an unused entry (a
// padded or idle token). token_keys: [num_tokens] a stable id per token (e.g. request and
// position) for the replica choice; nullptr uses (rank, row). Collective: every rank calls it.
DispatchPlan plan_dispatch(Communicator& comm, const ExpertMap& map, const int32_t* topk_ids, int64_t num_tokens,
                           int64_t topk, const uint64_t* token_keys = nullptr);

// x: [num_tokens][row_bytes] -> expert_rows: [plan.num_received()][row_bytes], slot-major.
void dispatch(Communicator& comm, const DispatchPlan& plan, const void* x, size_t row_bytes, void* expert_rows);
// topk_weights [num_tokens][topk] -> expert_weights [plan.num_received()]: each received row's
// routing weight, for experts that scale inside (V4.1 does, before w2). Collective as dispatch.
void dispatch_weights(Communicator& comm, const DispatchPlan& plan, const float* topk_weights, float* expert_weights);

// expert_rows: [plan.num_received()][row_bytes], slot-major, as dispatch laid it out. Returns each
// (token, k)'s row to its rank: rows [num_tokens][topk][row_bytes], zero bytes where not routed.
// Any row format (bf16 for the model's combine, as DeepEP sends it).
void return_rows(Communicator& comm, const DispatchPlan& plan, const void* expert_rows, size_t row_bytes, void* rows);
// return_rows for fp32 rows of `hidden` values.
void combine_rows(Communicator& comm, const DispatchPlan& plan, const float* expert_out, int64_t hidden, float* rows);

// out[t] = 0 + w[t, k] * y[t, k] + ... over t's routed k by ascending logical expert (w = 1 when
// topk_weights is nullptr: the expert already applied it). out: [num_tokens][hidden].
void combine(Communicator& comm, const DispatchPlan& plan, const float* expert_out, int64_t hidden,
             const float* topk_weights, float* out);

}  // namespace deepinfer::parallel
