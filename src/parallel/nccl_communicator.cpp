#include "parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace deepinfer::parallel {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclCommunicator::UniqueId), "ncclUniqueId is 128 bytes");

namespace {

void cuda_check(cudaError_t e, const char* what) {
  check(e == cudaSuccess, "NCCL communicator: ", what, ": ", cudaGetErrorString(e));
}

void nccl_check(ncclResult_t r, const char* what) {
  check(r == ncclSuccess, "NCCL communicator: ", what, ": ", ncclGetErrorString(r));
}

// Byte payloads travel as ncclUint8 in chunks NCCL's int-sized counts can hold.
constexpr size_t kMaxChunk = size_t(1) << 30;

}  // namespace

NcclCommunicator::UniqueId NcclCommunicator::unique_id() {
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  UniqueId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

NcclCommunicator::UniqueId NcclCommunicator::unique_id(const RendezvousConfig& rendezvous_config) {
  std::vector<uint8_t> mine;
  if (rendezvous_config.rank == 0) {
    const UniqueId id = unique_id();
    mine.assign(id.begin(), id.end());
  }
  const std::vector<uint8_t> got = rendezvous(rendezvous_config, mine);
  UniqueId out;
  check(got.size() == out.size(), "NCCL communicator: the rendezvous brought ", got.size(), " bytes, not an ncclUniqueId");
  std::memcpy(out.data(), got.data(), out.size());
  return out;
}

NcclCommunicator::NcclCommunicator(const UniqueId& id, int rank, int size, int device, CUstream_st* stream)
    : stream_(stream), rank_(rank), size_(size), device_(device) {
  check(size > 0 && rank >= 0 && rank < size, "NCCL communicator: rank ", rank, " is outside a group of ", size);
  int devices = 0;
  cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  check(device >= 0 && device < devices, "NCCL communicator: device ", device, " does not exist (", devices,
        " visible)");
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast off (docs/parallelism.md)
  use_device();
  if (!stream_) {
    cudaStream_t s;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = s, own_stream_ = true;
  }
  cuda_check(cudaMalloc(&barrier_word_, sizeof(int)), "cudaMalloc");
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t comm = nullptr;
  nccl_check(ncclCommInitRank(&comm, size, nid, rank), "ncclCommInitRank");
  comm_ = comm;
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (comm_) ncclCommDestroy(comm_);
  if (barrier_word_) cudaFree(barrier_word_);
  if (own_stream_) cudaStreamDestroy(stream_);
}

void NcclCommunicator::use_device() const { cuda_check(cudaSetDevice(device_), "cudaSetDevice"); }

void NcclCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  use_device();
  check(bytes <= kMaxChunk, "NCCL communicator all_gather: ", bytes, " bytes per rank is more than 1 GiB");
  if (bytes == 0) return;  // every rank has the same size, so every rank skips
  nccl_check(ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_), "ncclAllGather");
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype) {
  check(dtype == DType::F32 || dtype == DType::BF16, "NCCL communicator reduce_scatter: dtype must be F32 or BF16, got ",
        dtype_name(dtype));
  use_device();
  if (count == 0) return;
  nccl_check(ncclReduceScatter(send, recv, count, dtype == DType::F32 ? ncclFloat32 : ncclBfloat16, ncclSum, comm_,
                               stream_),
             "ncclReduceScatter");
}

void NcclCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_bytes,
                                    std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_bytes,
                                    std::span<const size_t> recv_offsets) {
  const size_t n = size_;
  check(send_bytes.size() == n && send_offsets.size() == n && recv_bytes.size() == n && recv_offsets.size() == n,
        "NCCL communicator all_to_all_v: every size and offset list needs one entry per rank (", n, ")");
  use_device();
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (int p = 0; p < size_; ++p) {
    // Pairs with nothing to move post nothing; the peer sees the same zero and posts nothing too.
    for (size_t at = 0; at < send_bytes[p]; at += kMaxChunk)
      nccl_check(ncclSend(static_cast<const char*>(send) + send_offsets[p] + at, std::min(kMaxChunk, send_bytes[p] - at),
                          ncclUint8, p, comm_, stream_),
                 "ncclSend");
    for (size_t at = 0; at < recv_bytes[p]; at += kMaxChunk)
      nccl_check(ncclRecv(static_cast<char*>(recv) + recv_offsets[p] + at, std::min(kMaxChunk, recv_bytes[p] - at),
                          ncclUint8, p, comm_, stream_),
                 "ncclRecv");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclCommunicator::send_recv(const void* send_buf, size_t send_bytes, int dst, void* recv_buf, size_t recv_bytes,
                                 int src) {
  check(dst >= 0 && dst < size_ && src >= 0 && src < size_, "NCCL communicator send_recv: peers ", dst, ", ", src,
        " are outside a group of ", size_);
  check(send_bytes <= kMaxChunk && recv_bytes <= kMaxChunk, "NCCL communicator send_recv: more than 1 GiB");
  use_device();
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  if (send_bytes) nccl_check(ncclSend(send_buf, send_bytes, ncclUint8, dst, comm_, stream_), "ncclSend");
  if (recv_bytes) nccl_check(ncclRecv(recv_buf, recv_bytes, ncclUint8, src, comm_, stream_), "ncclRecv");
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclCommunicator::send(const void* buf, size_t bytes, int peer) {
  check(peer >= 0 && peer < size_, "NCCL communicator send: peer ", peer, " is outside a group of ", size_);
  check(bytes <= kMaxChunk, "NCCL communicator send: more than 1 GiB");
  use_device();
  if (bytes) nccl_check(ncclSend(buf, bytes, ncclUint8, peer, comm_, stream_), "ncclSend");
}

void NcclCommunicator::recv(void* buf, size_t bytes, int peer) {
  check(peer >= 0 && peer < size_, "NCCL communicator recv: peer ", peer, " is outside a group of ", size_);
  check(bytes <= kMaxChunk, "NCCL communicator recv: more than 1 GiB");
  use_device();
  if (bytes) nccl_check(ncclRecv(buf, bytes, ncclUint8, peer, comm_, stream_), "ncclRecv");
}

void NcclCommunicator::barrier() {
  use_device();
  nccl_check(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce");
  synchronize();
}

void NcclCommunicator::synchronize() {
  use_device();
  cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

}  // namespace deepinfer::parallel
