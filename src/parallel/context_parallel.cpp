#include "parallel/context_parallel.h"

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

}  // namespace deepinfer::parallel
