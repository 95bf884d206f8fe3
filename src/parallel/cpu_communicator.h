// In-process ranks: N threads share one CpuCommGroup and each holds a CpuCommunicator. A collective
// publishes each rank's buffers, waits for all ranks, copies straight from the peers' memory, and
// waits again before anyone may reuse its buffers. Results are exact and deterministic.
//
// Misuse is an error, not a hang: ranks calling different collectives or with sizes that disagree,
// a rank that leaves (returns or throws) while others wait for it, or a wait longer than the
// group's timeout abort the whole group; every waiting rank then throws deepinfer::Error.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace deepinfer::parallel {

class CpuCommGroup {
 public:
  explicit CpuCommGroup(int size, std::chrono::milliseconds timeout = std::chrono::minutes(5));
  int size() const { return size_; }
  // Marks the group failed: every rank waiting now or later throws an Error carrying `reason`.
  void abort(const std::string& reason);
  // A rank's thread is done with the group; ranks waiting for it fail instead of hanging.
  void leave(int rank);

 private:
  friend class CpuCommunicator;
  enum class Op : uint8_t { kNone, kAllGather, kReduceScatter, kAllToAllV, kBarrier };
  struct Post {  // what a rank contributes to the current collective
    explicit Post(Op o = Op::kNone) : op(o) {}
    Op op;
    const void* send = nullptr;
    size_t bytes = 0, count = 0;
    DType dtype = DType::F32;
    std::span<const size_t> send_bytes, send_offsets;
  };
  // Waits until every rank has arrived (a generation barrier); throws once the group is aborted.
  void arrive_and_wait(int rank, const char* what);
  [[noreturn]] void fail(const std::string& reason);
  void wait(std::unique_lock<std::mutex>& lock, int rank, const char* what, const std::function<bool()>& ready);

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<bool> left_;
  std::vector<Post> posts_;
  std::vector<std::deque<std::vector<std::byte>>> mailbox_;  // [src * size + dst]: sent, not yet received
};

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(CpuCommGroup& group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }
  void all_gather(const void* send, void* recv, size_t bytes) override;
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) override;
  void all_to_all_v(const void* send, std::span<const size_t> send_bytes, std::span<const size_t> send_offsets,
                    void* recv, std::span<const size_t> recv_bytes, std::span<const size_t> recv_offsets) override;
  void send_recv(const void* send, size_t send_bytes, int dst, void* recv, size_t recv_bytes, int src) override;
  void send(const void* buf, size_t bytes, int peer) override;
  void recv(void* buf, size_t bytes, int peer) override;
  void barrier() override;

 private:
  // Publishes this rank's post, waits for all, checks that every rank runs the same op.
  const std::vector<CpuCommGroup::Post>& begin(const CpuCommGroup::Post& post, const char* what);
  void end(const char* what) { group_.arrive_and_wait(rank_, what); }
  void check_peer(int peer, const char* what) const;

  CpuCommGroup& group_;
  const int rank_;
};

// Runs fn(communicator) on `size` threads, one rank each, and returns when all are done. The first
// failure (by time) aborts the group and is rethrown here after every thread has ended.
void run_cpu_ranks(int size, const std::function<void(Communicator&)>& fn,
                   std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace deepinfer::parallel
