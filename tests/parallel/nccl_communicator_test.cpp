// The NCCL communicator with one rank per visible GPU, through the same cases as the CPU ranks: the
// collectives on device memory, and EP MoE == single rank over NCCL (the host dispatch code staged
// through device buffers). One rank on one GPU; a thread per GPU, and a process per GPU over the TCP
// rendezvous, where there are two or more (skipped, saying so, where there are fewer).
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "comm_cases.h"
#include "core/error.h"
#include "moe_cases.h"
#include "parallel/nccl_communicator.h"

using namespace deepinfer;
using namespace deepinfer::parallel;

namespace {

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

class DeviceMemory final : public comm_cases::Memory {
 public:
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes ? bytes : 1), cudaSuccess);
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override {
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  void download(void* dst, const void* src, size_t bytes) override {
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }
};

// Runs fn on `ranks` GPUs, a thread and an NcclCommunicator each.
void run_nccl_ranks(int ranks, const std::function<void(NcclCommunicator&)>& fn) {
  const NcclCommunicator::UniqueId id = NcclCommunicator::unique_id();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::string error;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        NcclCommunicator comm(id, r, ranks, r);
        fn(comm);
        comm.synchronize();
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        error += "rank " + std::to_string(r) + ": " + e.what() + "\n";
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(error, "");
}

// Host buffers in and out, NCCL on device copies in between: lets the host-side EP dispatch code
// (moe_dispatch.cpp) run over NCCL until its pack/unpack are kernels.
class StagedNccl final : public Communicator {
 public:
  explicit StagedNccl(NcclCommunicator& c) : c_(c) {}
  int rank() const override { return c_.rank(); }
  int size() const override { return c_.size(); }
  void all_gather(const void* send, void* recv, size_t bytes) override {
    Dev s(send, bytes), r(nullptr, bytes * size());
    c_.all_gather(s.p, r.p, bytes);
    r.back(recv);
  }
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t el = dtype_bits(dtype) / 8;
    Dev s(send, count * size() * el), r(nullptr, count * el);
    c_.reduce_scatter(s.p, r.p, count, dtype);
    r.back(recv);
  }
  void all_to_all_v(const void* send, std::span<const size_t> sb, std::span<const size_t> so, void* recv,
                    std::span<const size_t> rb, std::span<const size_t> ro) override {
    Dev s(send, extent(sb, so)), r(nullptr, extent(rb, ro));
    c_.all_to_all_v(s.p, sb, so, r.p, rb, ro);
    r.back(recv);
  }
  void send_recv(const void* send, size_t sn, int dst, void* recv, size_t rn, int src) override {
    Dev s(send, sn), r(nullptr, rn);
    c_.send_recv(s.p, sn, dst, r.p, rn, src);
    r.back(recv);
  }
  void send(const void* buf, size_t bytes, int peer) override {
    Dev s(buf, bytes);
    c_.send(s.p, bytes, peer);
    c_.synchronize();
  }
  void recv(void* buf, size_t bytes, int peer) override {
    Dev r(nullptr, bytes);
    c_.recv(r.p, bytes, peer);
    r.back(buf);
  }
  void barrier() override { c_.barrier(); }

 private:
  static size_t extent(std::span<const size_t> bytes, std::span<const size_t> offsets) {
    size_t end = 0;
    for (size_t i = 0; i < bytes.size(); ++i) end = std::max(end, offsets[i] + bytes[i]);
    return end;
  }
  struct Dev {  // a device copy of a host buffer (or an empty one of n bytes)
    Dev(const void* host, size_t bytes) : n(bytes) {
      EXPECT_EQ(cudaMalloc(&p, n ? n : 1), cudaSuccess);
      if (host && n) {
        EXPECT_EQ(cudaMemcpy(p, host, n, cudaMemcpyHostToDevice), cudaSuccess);
      }
    }
    ~Dev() { cudaFree(p); }
    void back(void* host) {
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (n) {
        EXPECT_EQ(cudaMemcpy(host, p, n, cudaMemcpyDeviceToHost), cudaSuccess);
      }
    }
    void* p = nullptr;
    size_t n;
  };
  NcclCommunicator& c_;
};

}  // namespace

// NCCL runs one rank per GPU and refuses two ranks on one GPU: the cases across ranks need >= 2.
constexpr char kNeedsTwo[] = "needs 2 or more GPUs (NCCL runs one rank per GPU and refuses two ranks on one GPU), found ";

TEST(NcclCommunicator, OneRankAllCollectivesExact) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible";
  run_nccl_ranks(1, [](NcclCommunicator& c) {
    DeviceMemory mem;
    comm_cases::all_cases(c, mem);
  });
}

TEST(NcclCommunicator, AThreadPerGpuAllCollectivesExact) {
  const int gpus = visible_gpus();
  if (gpus < 2) GTEST_SKIP() << kNeedsTwo << gpus;
  for (int ranks = 2; ranks <= gpus; ranks *= 2) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    run_nccl_ranks(ranks, [](NcclCommunicator& c) {
      DeviceMemory mem;
      comm_cases::all_cases(c, mem);
    });
  }
}

// The child side of AProcessPerGpuOverTheTcpRendezvous: a fresh process (CUDA cannot be used in a
// forked child of a process that initialized it), told its rank by the environment.
TEST(NcclCommunicator, RendezvousChild) {
  const char* rank = std::getenv("DEEPINFER_NCCL_TEST_RANK");
  if (!rank) GTEST_SKIP() << "runs as a child of AProcessPerGpuOverTheTcpRendezvous";
  RendezvousConfig rc;
  rc.rank = std::atoi(rank);
  rc.world_size = std::atoi(std::getenv("DEEPINFER_NCCL_TEST_WORLD"));
  rc.master_port = std::atoi(std::getenv("DEEPINFER_NCCL_TEST_PORT"));
  NcclCommunicator c(NcclCommunicator::unique_id(rc), rc.rank, rc.world_size, rc.rank);
  DeviceMemory mem;
  comm_cases::all_cases(c, mem);
  c.synchronize();
}

TEST(NcclCommunicator, AProcessPerGpuOverTheTcpRendezvous) {
  // As across hosts: each rank its own process, the ncclUniqueId handed out by the TCP rendezvous.
  const int gpus = visible_gpus();
  if (gpus < 2) GTEST_SKIP() << kNeedsTwo << gpus;
  const int world = std::min(gpus, 4);
  const std::string port = std::to_string(29500 + ::getpid() % 1000);
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("DEEPINFER_NCCL_TEST_RANK", std::to_string(r).c_str(), 1);
      ::setenv("DEEPINFER_NCCL_TEST_WORLD", std::to_string(world).c_str(), 1);
      ::setenv("DEEPINFER_NCCL_TEST_PORT", port.c_str(), 1);
      ::execl("/proc/self/exe", "nccl_child", "--gtest_filter=NcclCommunicator.RendezvousChild", nullptr);
      ::_exit(127);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank's process ended with " << status;
  }
}

const moe_cases::RankRunner kNccl = [](int n, const std::function<void(Communicator&)>& fn) {
  run_nccl_ranks(n, [&](NcclCommunicator& c) {
    StagedNccl staged(c);
    fn(staged);
  });
};

void expect_ep_moe_equals_single_rank(int ranks) {
  SCOPED_TRACE("ranks " + std::to_string(ranks));
  const moe_cases::Batch b = moe_cases::make_batch(200, 6, 32, false, 11);
  const moe_cases::Batch skewed = moe_cases::make_batch(120, 2, 16, true, 3);
  EXPECT_EQ(moe_cases::ep_moe(b, ranks, ExpertMap::partition(32, ranks), true, kNccl),
            moe_cases::single_rank_moe(b, true));
  EXPECT_EQ(moe_cases::ep_moe(b, ranks, moe_cases::eplb_map(b, ranks), false, kNccl),
            moe_cases::single_rank_moe(b, false));
  EXPECT_EQ(moe_cases::ep_moe(skewed, ranks, moe_cases::eplb_map(skewed, ranks), true, kNccl),
            moe_cases::single_rank_moe(skewed, true));
}

TEST(NcclCommunicator, OneRankEpMoeEqualsSingleRankBitwise) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible";
  expect_ep_moe_equals_single_rank(1);
}

TEST(NcclCommunicator, EpMoeAcrossGpusEqualsSingleRankBitwise) {
  const int gpus = visible_gpus();
  if (gpus < 2) GTEST_SKIP() << kNeedsTwo << gpus;
  for (int ranks = 2; ranks <= gpus; ranks *= 2) expect_ep_moe_equals_single_rank(ranks);
}

TEST(NcclCommunicator, BadArgumentsAreErrors) {
  const int gpus = visible_gpus();
  if (gpus == 0) GTEST_SKIP() << "no GPU visible";
  const NcclCommunicator::UniqueId id = NcclCommunicator::unique_id();
  EXPECT_THROW(NcclCommunicator(id, 1, 1, 0), Error);      // rank outside the group
  EXPECT_THROW(NcclCommunicator(id, 0, 1, gpus), Error);   // no such device
  run_nccl_ranks(1, [](NcclCommunicator& c) {
    float x = 0;
    EXPECT_THROW(c.reduce_scatter(&x, &x, 1, DType::I32), Error);
    EXPECT_THROW(c.send(&x, 4, 1), Error);
  });
}
