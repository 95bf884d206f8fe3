// Helpers for the raw-pointer CUDA kernel tests: device buffers poisoned with 0xff bytes (NaN for every
// float type), a per-test random seed that is printed, and the skip when no GPU is present.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "core/error.h"

namespace deepinfer::ktest {

template <typename T>
class DevBuf {
 public:
  explicit DevBuf(size_t n) : n_(n) {
    check(cudaMalloc(&p_, std::max<size_t>(1, n) * sizeof(T)) == cudaSuccess, "cudaMalloc failed");
    check(cudaMemset(p_, 0xff, std::max<size_t>(1, n) * sizeof(T)) == cudaSuccess, "cudaMemset failed");
  }
  explicit DevBuf(const std::vector<T>& h) : DevBuf(h.size()) {
    check(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess, "H2D failed");
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  T* get() const { return p_; }
  // Waits for the device (reporting any kernel failure) and copies back.
  std::vector<T> host() const {
    std::vector<T> h(n_);
    const cudaError_t e = cudaDeviceSynchronize();
    check(e == cudaSuccess, "kernel failed: ", cudaGetErrorString(e));
    check(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess, "D2H failed");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

class KernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
    seed_ = std::random_device{}();
    rng_.seed(seed_);
    RecordProperty("seed", std::to_string(seed_));
  }
  std::mt19937 rng_;
  unsigned seed_ = 0;
};

}  // namespace deepinfer::ktest
