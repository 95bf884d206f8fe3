#include "parallel/moe_dispatch.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"

namespace deepinfer::parallel {

namespace {

// Byte sizes and offsets of row blocks, one per peer, laid out back to back.
struct Blocks {
  std::vector<size_t> bytes, offsets;
};

Blocks blocks(const std::vector<size_t>& rows, size_t row_bytes) {
  Blocks b;
  b.bytes.resize(rows.size());
  b.offsets.resize(rows.size());
  size_t at = 0;
  for (size_t p = 0; p < rows.size(); ++p) b.bytes[p] = rows[p] * row_bytes, b.offsets[p] = at, at += b.bytes[p];
  return b;
}

void all_to_all_rows(Communicator& comm, const void* send, const std::vector<size_t>& send_rows, void* recv,
                     const std::vector<size_t>& recv_rows, size_t row_bytes) {
  const Blocks s = blocks(send_rows, row_bytes), r = blocks(recv_rows, row_bytes);
  comm.all_to_all_v(send, s.bytes, s.offsets, recv, r.bytes, r.offsets);
  comm.synchronize();
}

}  // namespace

DispatchPlan plan_dispatch(Communicator& comm, const ExpertMap& map, const int32_t* topk_ids, int64_t num_tokens,
                           int64_t topk, const uint64_t* token_keys) {
  const int R = comm.size(), me = comm.rank();
  check(map.num_ranks == R, "expert parallelism: the expert map is for ", map.num_ranks, " ranks, the communicator has ",
        R);
  check(num_tokens >= 0 && topk > 0, "expert parallelism: need num_tokens >= 0 and topk > 0, got ", num_tokens, ", ",
        topk);
  const int64_t S = map.slots_per_rank, P = map.num_slots();
  DispatchPlan plan;
  plan.num_ranks = R, plan.num_tokens = num_tokens, plan.topk = topk, plan.slots_per_rank = S;
  plan.pair_expert.assign(num_tokens * topk, -1);

  // Each routed (token, k) -> a physical slot; counting sort by slot keeps (token, k) order inside.
  std::vector<int64_t> pair_slot(num_tokens * topk, -1);
  std::vector<int64_t> slot_count(P, 0);
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t e = topk_ids[t * topk + k];
      if (e < 0) continue;
      check(e < map.num_experts, "expert parallelism: token ", t, " routes to expert ", e, " of ", map.num_experts);
      for (int64_t j = 0; j < k; ++j)
        check(plan.pair_expert[t * topk + j] != e, "expert parallelism: token ", t, " routes to expert ", e, " twice");
      plan.pair_expert[t * topk + k] = e;
      const uint64_t key = token_keys ? token_keys[t] : (static_cast<uint64_t>(me) << 40) + static_cast<uint64_t>(t);
      const int64_t slot = map.choose_slot(e, key);
      pair_slot[t * topk + k] = slot;
      ++slot_count[slot];
    }
  std::vector<int64_t> slot_start(P + 1, 0);
  std::partial_sum(slot_count.begin(), slot_count.end(), slot_start.begin() + 1);
  plan.send_pair.resize(slot_start[P]);
  {
    std::vector<int64_t> at(slot_start.begin(), slot_start.end() - 1);
    for (int64_t i = 0; i < num_tokens * topk; ++i)
      if (pair_slot[i] >= 0) plan.send_pair[at[pair_slot[i]]++] = i;
  }
  plan.send_rows.assign(R, 0);
  for (int64_t p = 0; p < P; ++p) plan.send_rows[map.owner(p)] += slot_count[p];

  // Swap the per-slot counts: from each source rank, how many rows for each of my slots.
  std::vector<int64_t> recv_count(static_cast<size_t>(R) * S);
  {
    const std::vector<size_t> rows(R, S);
    all_to_all_rows(comm, slot_count.data(), rows, recv_count.data(), rows, sizeof(int64_t));
  }
  plan.recv_rows.assign(R, 0);
  plan.expert_offsets.assign(S + 1, 0);
  for (int src = 0; src < R; ++src)
    for (int64_t s = 0; s < S; ++s) {
      plan.recv_rows[src] += recv_count[src * S + s];
      plan.expert_offsets[s + 1] += recv_count[src * S + s];
    }
  std::partial_sum(plan.expert_offsets.begin(), plan.expert_offsets.end(), plan.expert_offsets.begin());
  // Received rows come source-major (each source's already slot-sorted); slot-major puts slot s's
  // rows of source 0, then of source 1, ...
  plan.expert_row.resize(plan.num_received());
  std::vector<int64_t> at(plan.expert_offsets.begin(), plan.expert_offsets.end() - 1);
  int64_t i = 0;
  for (int src = 0; src < R; ++src)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t j = 0; j < recv_count[src * S + s]; ++j) plan.expert_row[i++] = at[s]++;
  return plan;
}

void dispatch(Communicator& comm, const DispatchPlan& plan, const void* x, size_t row_bytes, void* expert_rows) {
  const size_t n_send = plan.send_pair.size(), n_recv = plan.expert_row.size();
  std::vector<std::byte> send(n_send * row_bytes), recv(n_recv * row_bytes);
  const auto* src = static_cast<const std::byte*>(x);
  for (size_t i = 0; i < n_send; ++i)
    std::memcpy(send.data() + i * row_bytes, src + (plan.send_pair[i] / plan.topk) * row_bytes, row_bytes);
  all_to_all_rows(comm, send.data(), plan.send_rows, recv.data(), plan.recv_rows, row_bytes);
  auto* dst = static_cast<std::byte*>(expert_rows);
  for (size_t i = 0; i < n_recv; ++i) std::memcpy(dst + plan.expert_row[i] * row_bytes, recv.data() + i * row_bytes, row_bytes);
}

void dispatch_weights(Communicator& comm, const DispatchPlan& plan, const float* topk_weights, float* expert_weights) {
  const size_t n_send = plan.send_pair.size(), n_recv = plan.expert_row.size();
  std::vector<float> send(n_send), recv(n_recv);
  for (size_t i = 0; i < n_send; ++i) send[i] = topk_weights[plan.send_pair[i]];
  all_to_all_rows(comm, send.data(), plan.send_rows, recv.data(), plan.recv_rows, sizeof(float));
  for (size_t i = 0; i < n_recv; ++i) expert_weights[plan.expert_row[i]] = recv[i];
}

void return_rows(Communicator& comm, const DispatchPlan& plan, const void* expert_rows, size_t row_bytes, void* rows) {
  const size_t n_send = plan.expert_row.size(), n_back = plan.send_pair.size();
  // The way back: slot-major -> source-major, the reverse all-to-all, then each row to its pair.
  std::vector<std::byte> send(n_send * row_bytes), back(n_back * row_bytes);
  const auto* src = static_cast<const std::byte*>(expert_rows);
  for (size_t i = 0; i < n_send; ++i) std::memcpy(send.data() + i * row_bytes, src + plan.expert_row[i] * row_bytes, row_bytes);
  all_to_all_rows(comm, send.data(), plan.recv_rows, back.data(), plan.send_rows, row_bytes);
  auto* dst = static_cast<std::byte*>(rows);
  if (plan.num_tokens * plan.topk > 0) std::memset(dst, 0, plan.num_tokens * plan.topk * row_bytes);  // an idle rank's rows may be null
  for (size_t i = 0; i < n_back; ++i) std::memcpy(dst + plan.send_pair[i] * row_bytes, back.data() + i * row_bytes, row_bytes);
}

void combine_rows(Communicator& comm, const DispatchPlan& plan, const float* expert_out, int64_t hidden, float* rows) {
  return_rows(comm, plan, expert_out, hidden * sizeof(float), rows);
}

void combine(Communicator& comm, const DispatchPlan& plan, const float* expert_out, int64_t hidden,
             const float* topk_weights, float* out) {
  const int64_t T = plan.num_tokens, K = plan.topk, H = hidden;
  std::vector<float> rows(T * K * H);
  combine_rows(comm, plan, expert_out, hidden, rows.data());
  std::vector<int64_t> order(K);
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * H;
    std::fill_n(o, H, 0.0f);
    const int64_t* ex = plan.pair_expert.data() + t * K;
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ex[a] < ex[b]; });
    for (int64_t k : order) {
      if (ex[k] < 0) continue;
      const float* y = rows.data() + (t * K + k) * H;
      if (topk_weights)
        for (int64_t h = 0; h < H; ++h) o[h] += topk_weights[t * K + k] * y[h];
      else
        for (int64_t h = 0; h < H; ++h) o[h] += y[h];
    }
  }
}

}  // namespace deepinfer::parallel
