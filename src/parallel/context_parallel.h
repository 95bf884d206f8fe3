// Balanced context parallelism (spec §6.4): the tokens a forward gives each sequence are split over
// the CP ranks so that each rank computes about 1/cp of the queries, and the rows a rank's tokens
// need from the others (window KV, compressor inputs, the final hidden states) are all-gathered.
// Layouts: zigzag (the sequence's chunk in 2·cp equal blocks, rank r owns blocks r and 2·cp−1−r,
// so every rank has equal causal work) and round-robin (token t to rank t mod cp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace deepinfer::parallel {

enum class CpLayout : uint8_t { kZigzag, kRoundRobin };
CpLayout parse_cp_layout(const std::string& name);  // "zigzag" | "round_robin"; else an Error

// The rank computing token i of a chunk of n tokens (0 <= i < n) on `ranks` ranks.
int cp_owner(CpLayout layout, int64_t i, int64_t n, int ranks);

// The rows of one forward that each rank needs for sliding-window attention (the spec's SWA tail
// exchange), instead of every row: row i of a sequence is read by the queries of rows i .. i +
// window - 1 of that sequence, and the last tail[s] rows of sequence s go to every rank (each keeps
// the whole window ring). owner: [T] the rank computing each row; seq_begin: [S + 1]. What this
// rank sends each peer (its rows, numbered among its own) and receives from each (whole-step rows),
// both ascending, so that a peer's send list is this rank's receive list.
struct RowExchange {
  std::vector<std::vector<int32_t>> send;  // [peer] this rank's rows (local numbers)
  std::vector<std::vector<int32_t>> recv;  // [peer] whole-step rows
  int64_t rows_received() const;
};
RowExchange window_exchange(const std::vector<int32_t>& owner, const std::vector<int64_t>& seq_begin,
                            const std::vector<int64_t>& tail, int64_t window, int rank, int ranks);

class ContextParallel {
 public:
  explicit ContextParallel(Communicator& comm, CpLayout layout = CpLayout::kZigzag) : comm_(&comm), layout_(layout) {}
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  // A new communicator of the same rank and size (after a failed forward broke the old group).
  void rebind(Communicator& comm);
  CpLayout layout() const { return layout_; }
  int owner(int64_t i, int64_t n) const { return cp_owner(layout_, i, n, size()); }
  // Every rank's rows, concatenated in rank order into `all` (sum of rows_of[r] rows of `row_bytes`):
  // rank r contributes rows_of[r] rows from `mine` (rows_of agrees on every rank).
  void all_gather_rows(const void* mine, const std::vector<int64_t>& rows_of, size_t row_bytes, void* all);
  // The rows of x.send to each peer from `mine` (this rank's rows of `row_bytes`); x.recv's rows
  // arrive in `recv`, packed in peer order (peer 0's first).
  void exchange_rows(const RowExchange& x, const void* mine, size_t row_bytes, void* recv);
  int64_t rows_received() const { return rows_received_; }  // by exchange_rows, since construction

 private:
  Communicator* comm_;
  const CpLayout layout_;
  int64_t rows_received_ = 0;
};

}  // namespace deepinfer::parallel
