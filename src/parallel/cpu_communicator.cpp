#include "parallel/cpu_communicator.h"

#include <cstring>
#include <exception>
#include <thread>

#include "core/error.h"

namespace deepinfer::parallel {

namespace {

const char* op_name(int op) {
  static const char* names[] = {"nothing", "all_gather", "reduce_scatter", "all_to_all_v", "barrier"};
  return names[op];
}

void copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);  // memcpy with a null pointer is undefined even for 0 bytes
}

}  // namespace

CpuCommGroup::CpuCommGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), left_(size > 0 ? size : 0), posts_(size > 0 ? size : 0),
      mailbox_(size > 0 ? size * size : 0) {
  check(size > 0, "a communicator group needs at least one rank, got ", size);
}

void CpuCommGroup::abort(const std::string& reason) {
  std::lock_guard lock(mu_);
  if (!aborted_) aborted_ = true, abort_reason_ = reason;
  cv_.notify_all();
}

void CpuCommGroup::leave(int rank) {
  std::lock_guard lock(mu_);
  left_[rank] = true;
  cv_.notify_all();
}

void CpuCommGroup::fail(const std::string& reason) {  // called with mu_ held
  if (!aborted_) aborted_ = true, abort_reason_ = reason;
  cv_.notify_all();
  throw Error(abort_reason_);
}

void CpuCommGroup::wait(std::unique_lock<std::mutex>& lock, int rank, const char* what,
                        const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    if (aborted_) throw Error(abort_reason_);
    if (ready()) return;
    for (int p = 0; p < size_; ++p)
      if (left_[p] && p != rank)  // it will never arrive or send again
        fail("communicator: rank " + std::to_string(p) + " has left while rank " + std::to_string(rank) +
             " waits for it in " + what);
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !ready() && !aborted_)
      fail("communicator: rank " + std::to_string(rank) + " waited more than " + std::to_string(timeout_.count()) +
           " ms in " + what + " (a rank never calls it: every rank must run every collective)");
  }
}

void CpuCommGroup::arrive_and_wait(int rank, const char* what) {
  std::unique_lock lock(mu_);
  if (aborted_) throw Error(abort_reason_);
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  wait(lock, rank, what, [&] { return generation_ != gen; });
}

CpuCommunicator::CpuCommunicator(CpuCommGroup& group, int rank) : group_(group), rank_(rank) {
  check(rank >= 0 && rank < group.size(), "rank ", rank, " is outside a group of ", group.size());
}

const std::vector<CpuCommGroup::Post>& CpuCommunicator::begin(const CpuCommGroup::Post& post, const char* what) {
  {
    std::lock_guard lock(group_.mu_);
    group_.posts_[rank_] = post;
  }
  group_.arrive_and_wait(rank_, what);
  // Every rank has published; nobody writes the posts again before the next arrive_and_wait.
  for (int p = 0; p < size(); ++p)
    if (group_.posts_[p].op != post.op) {
      std::lock_guard lock(group_.mu_);
      group_.fail("communicator: rank " + std::to_string(p) + " called " + op_name(int(group_.posts_[p].op)) +
                  " while rank " + std::to_string(rank_) + " called " + what);
    }
  return group_.posts_;
}

void CpuCommunicator::check_peer(int peer, const char* what) const {
  check(peer >= 0 && peer < size(), "communicator ", what, ": peer rank ", peer, " is outside a group of ", size());
}

void CpuCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  CpuCommGroup::Post post{CpuCommGroup::Op::kAllGather};
  post.send = send, post.bytes = bytes;
  const auto& posts = begin(post, "all_gather");
  for (int p = 0; p < size(); ++p) {
    if (posts[p].bytes != bytes) {
      std::lock_guard lock(group_.mu_);
      group_.fail("communicator all_gather: rank " + std::to_string(p) + " sends " + std::to_string(posts[p].bytes) +
                  " bytes, rank " + std::to_string(rank_) + " " + std::to_string(bytes));
    }
    copy(static_cast<std::byte*>(recv) + p * bytes, posts[p].send, bytes);
  }
  end("all_gather");
}

void CpuCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype) {
  check(dtype == DType::F32 || dtype == DType::BF16, "communicator reduce_scatter: dtype must be F32 or BF16, got ",
        dtype_name(dtype));
  CpuCommGroup::Post post{CpuCommGroup::Op::kReduceScatter};
  post.send = send, post.count = count, post.dtype = dtype;
  const auto& posts = begin(post, "reduce_scatter");
  for (int p = 0; p < size(); ++p)
    if (posts[p].count != count || posts[p].dtype != dtype) {
      std::lock_guard lock(group_.mu_);
      group_.fail("communicator reduce_scatter: rank " + std::to_string(p) + " reduces " +
                  std::to_string(posts[p].count) + " " + std::string(dtype_name(posts[p].dtype)) + ", rank " +
                  std::to_string(rank_) + " " + std::to_string(count) + " " + std::string(dtype_name(dtype)));
    }
  const size_t first = static_cast<size_t>(rank_) * count;
  for (size_t i = 0; i < count; ++i) {
    float sum = 0.0f;  // rank order: the same bits on every run
    for (int p = 0; p < size(); ++p)
      sum += dtype == DType::F32 ? static_cast<const float*>(posts[p].send)[first + i]
                                 : bf16_to_float(static_cast<const uint16_t*>(posts[p].send)[first + i]);
    if (dtype == DType::F32) static_cast<float*>(recv)[i] = sum;
    else static_cast<uint16_t*>(recv)[i] = float_to_bf16(sum);
  }
  end("reduce_scatter");
}

void CpuCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_bytes,
                                   std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_bytes,
                                   std::span<const size_t> recv_offsets) {
  const size_t n = size();
  check(send_bytes.size() == n && send_offsets.size() == n && recv_bytes.size() == n && recv_offsets.size() == n,
        "communicator all_to_all_v: every size and offset list needs one entry per rank (", n, ")");
  CpuCommGroup::Post post{CpuCommGroup::Op::kAllToAllV};
  post.send = send, post.send_bytes = send_bytes, post.send_offsets = send_offsets;
  const auto& posts = begin(post, "all_to_all_v");
  for (int p = 0; p < size(); ++p) {
    const size_t bytes = posts[p].send_bytes[rank_];
    if (bytes != recv_bytes[p]) {
      std::lock_guard lock(group_.mu_);
      group_.fail("communicator all_to_all_v: rank " + std::to_string(p) + " sends " + std::to_string(bytes) +
                  " bytes to rank " + std::to_string(rank_) + ", which expects " + std::to_string(recv_bytes[p]));
    }
    copy(static_cast<std::byte*>(recv) + recv_offsets[p],
         static_cast<const std::byte*>(posts[p].send) + posts[p].send_offsets[rank_], bytes);
  }
  end("all_to_all_v");
}

// Sends are buffered on the CPU, so a send followed by a recv never waits for the peer.
void CpuCommunicator::send_recv(const void* send_buf, size_t send_bytes, int dst, void* recv_buf, size_t recv_bytes,
                                int src) {
  send(send_buf, send_bytes, dst);
  recv(recv_buf, recv_bytes, src);
}

void CpuCommunicator::send(const void* buf, size_t bytes, int peer) {
  check_peer(peer, "send");
  std::vector<std::byte> message(bytes);
  copy(message.data(), buf, bytes);
  std::lock_guard lock(group_.mu_);
  group_.mailbox_[rank_ * size() + peer].push_back(std::move(message));
  group_.cv_.notify_all();
}

void CpuCommunicator::recv(void* buf, size_t bytes, int peer) {
  check_peer(peer, "recv");
  std::unique_lock lock(group_.mu_);
  auto& box = group_.mailbox_[peer * size() + rank_];
  group_.wait(lock, rank_, "recv", [&] { return !box.empty(); });
  if (box.front().size() != bytes)
    group_.fail("communicator recv: rank " + std::to_string(peer) + " sent " + std::to_string(box.front().size()) +
                " bytes to rank " + std::to_string(rank_) + ", which expects " + std::to_string(bytes));
  copy(buf, box.front().data(), bytes);
  box.pop_front();
}

void CpuCommunicator::barrier() {
  begin(CpuCommGroup::Post{CpuCommGroup::Op::kBarrier}, "barrier");
  end("barrier");  // the posts stay readable until every rank has checked them
}

void run_cpu_ranks(int size, const std::function<void(Communicator&)>& fn, std::chrono::milliseconds timeout) {
  CpuCommGroup group(size, timeout);
  std::mutex first_mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        CpuCommunicator comm(group, r);
        fn(comm);
      } catch (...) {
        std::string what = "unknown exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        {
          std::lock_guard lock(first_mu);
          if (!first) first = std::current_exception();
        }
        group.abort("rank " + std::to_string(r) + " failed: " + what);
      }
      group.leave(r);
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace deepinfer::parallel
