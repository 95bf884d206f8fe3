// The collectives that attention DP, MoE EP and CP need, over N ranks. Two implementations:
// CpuCommunicator (ranks are threads of one process, host memory; cpu_communicator.h) and
// NcclCommunicator (one GPU per rank, device memory, stream-ordered; nccl_communicator.h).
//
// Every rank calls the same collectives in the same order, with sizes that agree (an idle rank
// calls them with zero sizes). Buffers are host pointers for the CPU implementation and device
// pointers for NCCL; results are visible to the host after synchronize().
#pragma once
#include <cstddef>
#include <span>

#include "core/dtype.h"

namespace deepinfer::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank contributes `bytes`; recv (size() * bytes) holds rank r's at r * bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // send holds size() blocks of `count` elements; rank r receives the elementwise sum of every
  // rank's block r. dtype F32 or BF16. (CPU: fp32 sums in rank order, rounded once.)
  virtual void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) = 0;
  // To each peer p: send_bytes[p] bytes from send + send_offsets[p]; from each peer p:
  // recv_bytes[p] bytes into recv + recv_offsets[p]. The sizes of each pair must agree.
  virtual void all_to_all_v(const void* send, std::span<const size_t> send_bytes, std::span<const size_t> send_offsets,
                            void* recv, std::span<const size_t> recv_bytes, std::span<const size_t> recv_offsets) = 0;
  // One message to `dst` and one from `src` at once (a ring step): never deadlocks when every rank
  // calls it; prefer it to a send and a recv on their own.
  virtual void send_recv(const void* send, size_t send_bytes, int dst, void* recv, size_t recv_bytes, int src) = 0;
  // Point-to-point: a send must meet a recv of the same size on the peer (NCCL: the two block each
  // other until both are posted, so order them so that no cycle waits).
  virtual void send(const void* buf, size_t bytes, int peer) = 0;
  virtual void recv(void* buf, size_t bytes, int peer) = 0;
  virtual void barrier() = 0;
  // Waits for every operation issued so far (NCCL: the stream); a no-op on the CPU.
  virtual void synchronize() {}
};

}  // namespace deepinfer::parallel
