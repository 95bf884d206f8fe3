// Collective test cases shared by every Communicator: the CPU ranks (host memory) and NCCL (device
// memory). Each case runs on every rank of a group; sizes vary per rank and pair, zero included,
// and the data are integers so that every result is exact under any reduction order.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "parallel/communicator.h"

namespace deepinfer::parallel::comm_cases {

// Where the buffers live: host memory for the CPU ranks, device memory for NCCL.
class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
};

class HostMemory final : public Memory {
 public:
  void* alloc(size_t bytes) override { return ::operator new(bytes ? bytes : 1); }
  void release(void* p) override { ::operator delete(p); }
  void upload(void* dst, const void* src, size_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { if (bytes) std::memcpy(dst, src, bytes); }
};

// A buffer of T in `mem`, filled from / read back into host vectors.
template <typename T>
class Buf {
 public:
  Buf(Memory& mem, const std::vector<T>& init) : mem_(mem), n_(init.size()), p_(mem.alloc(n_ * sizeof(T))) {
    mem_.upload(p_, init.data(), n_ * sizeof(T));
  }
  Buf(Memory& mem, size_t n, T fill) : Buf(mem, std::vector<T>(n, fill)) {}
  ~Buf() { mem_.release(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* get() { return p_; }
  std::vector<T> host() {
    std::vector<T> out(n_);
    mem_.download(out.data(), p_, n_ * sizeof(T));
    return out;
  }

 private:
  Memory& mem_;
  size_t n_;
  void* p_;
};

// A value no two (rank, index) pairs share, exact in fp32 and int32.
inline int32_t tag(int rank, size_t i) { return rank * 100000 + static_cast<int32_t>(i); }

inline void all_gather_case(Communicator& c, Memory& mem) {
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
    std::vector<int32_t> mine(n);
    for (size_t i = 0; i < n; ++i) mine[i] = tag(c.rank(), i);
    Buf<int32_t> send(mem, mine), recv(mem, n * c.size(), -1);
    c.all_gather(send.get(), recv.get(), n * sizeof(int32_t));
    c.synchronize();
    const auto got = recv.host();
    for (int r = 0; r < c.size(); ++r)
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], tag(r, i)) << "n " << n << " from rank " << r;
  }
}

inline void reduce_scatter_case(Communicator& c, Memory& mem) {
  for (size_t n : {size_t(0), size_t(1), size_t(33)}) {
    std::vector<float> mine(n * c.size());
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>((c.rank() + 1) * (i % 97));
    Buf<float> send(mem, mine), recv(mem, n, -1.0f);
    c.reduce_scatter(send.get(), recv.get(), n, DType::F32);
    c.synchronize();
    const auto got = recv.host();
    const float rank_sum = c.size() * (c.size() + 1) / 2.0f;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], rank_sum * ((c.rank() * n + i) % 97)) << "n " << n;
    // BF16: small integers stay exact.
    std::vector<uint16_t> mine16(n * c.size());
    for (size_t i = 0; i < mine16.size(); ++i) mine16[i] = float_to_bf16(static_cast<float>(i % 5));
    Buf<uint16_t> send16(mem, mine16), recv16(mem, n, 0);
    c.reduce_scatter(send16.get(), recv16.get(), n, DType::BF16);
    c.synchronize();
    const auto got16 = recv16.host();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bf16_to_float(got16[i]), c.size() * float((c.rank() * n + i) % 5));
  }
}

// Elements rank `src` sends to rank `dst`: uneven, zero for some pairs; `idle` sends and gets none.
inline size_t pair_count(int src, int dst, int idle) {
  if (src == idle || dst == idle) return 0;
  return static_cast<size_t>((src * 7 + dst * 3) % 5) * 3;
}

inline void all_to_all_v_case(Communicator& c, Memory& mem, int idle) {
  const int n = c.size(), me = c.rank();
  // Send blocks in peer order with a gap of one element between them (offsets need not be dense).
  std::vector<size_t> sbytes(n), soff(n), rbytes(n), roff(n);
  size_t s_total = 0, r_total = 0;
  for (int p = 0; p < n; ++p) {
    sbytes[p] = pair_count(me, p, idle) * sizeof(int32_t), soff[p] = s_total * sizeof(int32_t);
    s_total += pair_count(me, p, idle) + 1;
    rbytes[p] = pair_count(p, me, idle) * sizeof(int32_t), roff[p] = r_total * sizeof(int32_t);
    r_total += pair_count(p, me, idle) + 1;
  }
  std::vector<int32_t> mine(s_total, -7);
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < pair_count(me, p, idle); ++i) mine[soff[p] / sizeof(int32_t) + i] = tag(me, p * 1000 + i);
  Buf<int32_t> send(mem, mine), recv(mem, r_total, -9);
  c.all_to_all_v(send.get(), sbytes, soff, recv.get(), rbytes, roff);
  c.synchronize();
  const auto got = recv.host();
  for (int p = 0; p < n; ++p) {
    const size_t base = roff[p] / sizeof(int32_t), k = pair_count(p, me, idle);
    for (size_t i = 0; i < k; ++i) ASSERT_EQ(got[base + i], tag(p, me * 1000 + i)) << "from rank " << p;
    ASSERT_EQ(got[base + k], -9) << "wrote past the block from rank " << p;
  }
}

inline void send_recv_ring_case(Communicator& c, Memory& mem) {
  const int n = c.size(), me = c.rank(), next = (me + 1) % n, prev = (me + n - 1) % n;
  const auto count = [](int src) { return static_cast<size_t>(src % 3) * 5; };  // rank 0 sends nothing
  std::vector<int32_t> mine(count(me));
  std::iota(mine.begin(), mine.end(), tag(me, 0));
  Buf<int32_t> send(mem, mine), recv(mem, count(prev), -1);
  c.send_recv(send.get(), count(me) * sizeof(int32_t), next, recv.get(), count(prev) * sizeof(int32_t), prev);
  c.synchronize();
  const auto got = recv.host();
  for (size_t i = 0; i < count(prev); ++i) ASSERT_EQ(got[i], tag(prev, i));
}

// Pairs (0,1), (2,3)...: the even rank sends first, the odd one receives first (no cycle waits).
inline void point_to_point_case(Communicator& c, Memory& mem) {
  const int me = c.rank(), peer = me ^ 1;
  if (peer >= c.size()) return;
  std::vector<int32_t> mine(3 + me);
  std::iota(mine.begin(), mine.end(), tag(me, 0));
  Buf<int32_t> send(mem, mine), recv(mem, 3 + peer, -1);
  if (me % 2 == 0) {
    c.send(send.get(), mine.size() * sizeof(int32_t), peer);
    c.recv(recv.get(), (3 + peer) * sizeof(int32_t), peer);
  } else {
    c.recv(recv.get(), (3 + peer) * sizeof(int32_t), peer);
    c.send(send.get(), mine.size() * sizeof(int32_t), peer);
  }
  c.synchronize();
  const auto got = recv.host();
  for (int i = 0; i < 3 + peer; ++i) ASSERT_EQ(got[i], tag(peer, i));
}

inline void all_cases(Communicator& c, Memory& mem) {
  all_gather_case(c, mem);
  reduce_scatter_case(c, mem);
  all_to_all_v_case(c, mem, /*idle=*/-1);
  all_to_all_v_case(c, mem, /*idle=*/c.size() - 1);
  send_recv_ring_case(c, mem);
  point_to_point_case(c, mem);
  c.barrier();
}

}  // namespace deepinfer::parallel::comm_cases
