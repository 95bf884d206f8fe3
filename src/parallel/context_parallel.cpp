#include "parallel/context_parallel.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/error.h"

namespace deepinfer::parallel {

CpLayout parse_cp_layout(const std::string& name) {
  if (name.empty() || name == "zigzag") return CpLayout::kZigzag;
  check(name == "round_robin", "context parallel layout '", name, "': not supported (zigzag, round_robin)");
  return CpLayout::kRoundRobin;
}

int cp_owner(CpLayout layout, int64_t i, int64_t n, int ranks) {
  check(ranks >= 1 && i >= 0 && i < n, "cp_owner: token ", i, " of ", n, " on ", ranks, " ranks");
  if (layout == CpLayout::kRoundRobin) return static_cast<int>(i % ranks);
  // Block b of B = 2·ranks covers [floor(b·n/B), floor((b+1)·n/B)); i lies in the largest b whose
  // start is <= i, which is floor(((i+1)·B − 1) / n).
  const int64_t B = 2 * static_cast<int64_t>(ranks), b = ((i + 1) * B - 1) / n;
  return static_cast<int>(b < ranks ? b : B - 1 - b);
}

int64_t RowExchange::rows_received() const {
  int64_t n = 0;
  for (const auto& r : recv) n += static_cast<int64_t>(r.size());
  return n;
}

RowExchange window_exchange(const std::vector<int32_t>& owner, const std::vector<int64_t>& seq_begin,
                            const std::vector<int64_t>& tail, int64_t window, int rank, int ranks) {
  check(ranks >= 1 && rank >= 0 && rank < ranks && window >= 0 && !seq_begin.empty() &&
            tail.size() + 1 == seq_begin.size() && seq_begin.back() == static_cast<int64_t>(owner.size()),
        "window_exchange: inconsistent layout (", owner.size(), " rows, ", seq_begin.size(), " sequence starts, ",
        tail.size(), " tails, rank ", rank, " of ", ranks, ")");
  RowExchange x;
  x.send.resize(ranks);
  x.recv.resize(ranks);
  std::vector<int32_t> local(owner.size());  // a row's number among its owner's rows
  std::vector<int32_t> count(ranks, 0);
  for (size_t i = 0; i < owner.size(); ++i) {
    check(owner[i] >= 0 && owner[i] < ranks, "window_exchange: row ", i, " owned by rank ", owner[i]);
    local[i] = count[owner[i]]++;
  }
  constexpr int64_t kNone = INT64_MAX / 2;
  std::vector<int64_t> next(ranks);  // each rank's first row at or after i in this sequence
  for (size_t q = 0; q + 1 < seq_begin.size(); ++q) {
    const int64_t b = seq_begin[q], e = seq_begin[q + 1], tail_from = e - tail[q];
    std::fill(next.begin(), next.end(), kNone);
    std::vector<std::pair<int32_t, int>> needed;  // (row, rank) pairs of this sequence, rows descending
    for (int64_t i = e - 1; i >= b; --i) {
      next[owner[i]] = i;
      for (int p = 0; p < ranks; ++p)
        if (p != owner[i] && (i >= tail_from || next[p] - i < window)) needed.emplace_back(static_cast<int32_t>(i), p);
    }
    for (auto it = needed.rbegin(); it != needed.rend(); ++it) {
      const auto [i, p] = *it;
      if (owner[i] == rank) x.send[p].push_back(local[i]);
      if (p == rank) x.recv[owner[i]].push_back(i);
    }
  }
  return x;
}

void ContextParallel::rebind(Communicator& comm) {
  check(comm.rank() == rank() && comm.size() == size(), "context parallel: rebinding rank ", rank(), " of ", size(),
        " to rank ", comm.rank(), " of ", comm.size());
  comm_ = &comm;
}

void ContextParallel::all_gather_rows(const void* mine, const std::vector<int64_t>& rows_of, size_t row_bytes,
                                      void* all) {
  const int n = size();
  check(static_cast<int>(rows_of.size()) == n, "context parallel: rows of ", rows_of.size(), " ranks, the group has ", n);
  // An all-gather of unequal sizes: the same block to every peer, each peer's block at its offset.
  std::vector<size_t> send_bytes(n, rows_of[rank()] * row_bytes), send_offsets(n, 0), recv_bytes(n), recv_offsets(n);
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    recv_bytes[r] = rows_of[r] * row_bytes;
    recv_offsets[r] = at;
    at += recv_bytes[r];
  }
  comm_->all_to_all_v(mine, send_bytes, send_offsets, all, recv_bytes, recv_offsets);
  comm_->synchronize();
}

void ContextParallel::exchange_rows(const RowExchange& x, const void* mine, size_t row_bytes, void* recv) {
  const int n = size();
  check(static_cast<int>(x.send.size()) == n && static_cast<int>(x.recv.size()) == n,
        "context parallel: a row exchange for ", x.send.size(), " ranks, the group has ", n);
  std::vector<size_t> send_bytes(n), send_offsets(n), recv_bytes(n), recv_offsets(n);
  size_t out = 0, in = 0;
  for (int p = 0; p < n; ++p) {
    send_offsets[p] = out, send_bytes[p] = x.send[p].size() * row_bytes, out += send_bytes[p];
    recv_offsets[p] = in, recv_bytes[p] = x.recv[p].size() * row_bytes, in += recv_bytes[p];
  }
  std::vector<char> packed(out);
  const char* src = static_cast<const char*>(mine);
  int64_t k = 0;
  for (int p = 0; p < n; ++p)
    for (int32_t r : x.send[p]) std::memcpy(packed.data() + (k++) * row_bytes, src + r * row_bytes, row_bytes);
  comm_->all_to_all_v(packed.data(), send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
  comm_->synchronize();
  rows_received_ += x.rows_received();
}

}  // namespace deepinfer::parallel
