// V4.1 indexer top-k on the device, raw pointers: ops::Backend::index_select's contract, with the CPU
// reference's exact selection (cpu::torch_topk: libstdc++'s partial_sort when m * 64 <= n, else
// nth_element, on (value, column) pairs compared by value only), so ties break as on the CPU.
//   token t: n = ranked[t] columns of scores[t, :] (mask[t, w] == 0 counts -inf, mask may be null),
//   m = min(topk[t], n); the chosen columns in ascending order, column -> -1 when >= visible[t],
//   then -1 up to K: sel [tokens, K].
//
// One CTA per token (a persistent grid). A radix select (4 passes of 8 bits over order-preserving
// keys) finds the m-th largest value T and how many values equal it; when every T is needed (no tie
// straddles the boundary, the usual case for fp32 scores) the set is {v >= T} whatever the algorithm.
// Otherwise the CPU's algorithm is replayed exactly for the ties: nth_element as a CTA-parallel
// introselect (each Hoare partition computed from prefix counts of its left and right stop positions,
// stopping as soon as the ties left in the range are all in or all out), partial_sort's heap_select by
// the CTA filtering each tile of columns against the heap root and one thread replaying the insertions
// (a sequential chain: ~2 ms a row at n = 32768 with ties, see docs/kernels.md).
// The chosen columns are written in order by a CTA-wide prefix sum.
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepinfer::cuda {

// How values equal to the m-th one are chosen when only some of them fit: kCpuTorch is the contract of
// ops::Backend::index_select (the CPU's order, replayed); kLowestColumn takes the lowest columns, which
// the radix select gives at no cost (an option for a relaxed contract: see docs/kernels.md).
enum class TopkTies { kCpuTorch, kLowestColumn };

struct IndexTopkArgs {
  const float* scores = nullptr;  // [tokens, ld]
  const uint8_t* mask = nullptr;  // [tokens, ld] or null
  int64_t ld = 0;
  const int32_t* ranked = nullptr;  // [tokens]: columns ranked (<= ld)
  const int32_t* visible = nullptr;  // [tokens]
  const int32_t* topk = nullptr;  // [tokens]
  int64_t tokens = 0, K = 0;
  int32_t* sel = nullptr;  // [tokens, K]
  TopkTies ties = TopkTies::kCpuTorch;
};

// Device workspace for index_topk (the introselect's rows, one per resident CTA).
size_t index_topk_workspace_bytes(int64_t tokens, int64_t ld, int64_t K);
void index_topk(const IndexTopkArgs& args, void* workspace, void* stream);

}  // namespace deepinfer::cuda
