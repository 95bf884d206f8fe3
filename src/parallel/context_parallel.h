// Balanced context parallelism (spec §6.4): the tokens a forward gives each sequence are split over
// the CP ranks so that each rank computes about 1/cp of the queries, and the rows a rank's tokens
// need from the others (window KV, compressor inputs, the final hidden states) are all-gathered.
// Layouts: zigzag (the sequence's chunk in 2·cp equal blocks, rank r owns blocks r and 2·cp−1−r,
// so every rank has equal causal work) and round-robin (token t to rank t mod cp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace deepinfer::parallel {

enum class CpLayout : uint8_t { kZigzag, kRoundRobin };
CpLayout parse_cp_layout(const std::string& name);  // "zigzag" | "round_robin"; else an Error

// The rank computing token i of a chunk of n tokens (0 <= i < n) on `ranks` ranks.
int cp_owner(CpLayout layout, int64_t i, int64_t n, int ranks);

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

 private:
  Communicator* comm_;
  const CpLayout layout_;
};

}  // namespace deepinfer::parallel
