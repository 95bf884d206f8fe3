// A pool of fixed-size memory blocks with a capacity: all per-sequence model state is carved from
// one pool sized by the state-memory budget, so state memory is bounded and blocks freed by a
// finished or preempted sequence are reused by the next. Thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace deepinfer {

class BlockPool {
 public:
  // capacity_blocks <= 0: unlimited.
  BlockPool(int64_t block_bytes, int64_t capacity_blocks);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int64_t block_bytes() const { return block_bytes_; }
  int64_t capacity() const { return capacity_; }
  int64_t used() const;
  // A zero-filled block; throws deepinfer::Error when the capacity is spent (callers reserve first).
  void* allocate();
  void release(void* block);

 private:
  const int64_t block_bytes_, capacity_;
  mutable std::mutex mu_;
  int64_t used_ = 0;
  std::vector<std::unique_ptr<std::byte[]>> storage_;  // every block ever allocated
  std::vector<void*> free_;
};

}  // namespace deepinfer
