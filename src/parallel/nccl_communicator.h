// The Communicator over NCCL: one rank per GPU (a thread per GPU in one process, or one process
// per GPU across hosts). Buffers are device pointers; every call is enqueued on the stream given
// at construction and returns at once; synchronize() waits for it. Built with DEEPINFER_CUDA only.
#pragma once
#include <array>

#include "parallel/communicator.h"
#include "parallel/rendezvous.h"

struct CUstream_st;  // cudaStream_t
struct ncclComm;     // ncclComm_t

namespace deepinfer::parallel {

class NcclCommunicator final : public Communicator {
 public:
  using UniqueId = std::array<char, 128>;  // ncclUniqueId's bytes, as a launcher passes them around
  // Made on rank 0 and handed to every rank (threads: shared memory; hosts: a TCP rendezvous).
  static UniqueId unique_id();
  // Across hosts: rank 0 makes the id and the TCP rendezvous hands it to every rank.
  static UniqueId unique_id(const RendezvousConfig& rendezvous);
  // Binds `device` on the calling thread; stream null: the communicator's own stream. Every rank
  // of the group calls it at the same time (NCCL's init is collective). NVLink multicast (NVLS)
  // stays off unless NCCL_NVLS_ENABLE is set.
  NcclCommunicator(const UniqueId& id, int rank, int size, int device, CUstream_st* stream = nullptr);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  CUstream_st* stream() const { return stream_; }
  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) override;
  void all_to_all_v(const void* send, std::span<const size_t> send_bytes, std::span<const size_t> send_offsets,
                    void* recv, std::span<const size_t> recv_bytes, std::span<const size_t> recv_offsets) override;
  void send_recv(const void* send, size_t send_bytes, int dst, void* recv, size_t recv_bytes, int src) override;
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  void barrier() override;
  void synchronize() override;

 private:
  void use_device() const;  // NCCL calls need the communicator's device current on this thread
  ncclComm* comm_ = nullptr;
  CUstream_st* stream_ = nullptr;
  bool own_stream_ = false;
  int rank_, size_, device_;
  int* barrier_word_ = nullptr;  // device memory for barrier()'s all-reduce
};

}  // namespace deepinfer::parallel
