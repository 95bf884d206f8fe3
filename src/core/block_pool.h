// The state arena: a pool of fixed-size memory blocks carved from one contiguous reservation, so that
// all per-sequence model state lives at addresses base() + i * block_bytes(). Because of that, an op
// can read any sequence's state rows through plain row indices relative to base() (no per-step copy
// into a fresh pool), and the same layout maps onto one device allocation. The pool is sized by the
// state-memory budget; blocks freed by a finished or preempted sequence are reused. Blocks are
// reference-counted so that a cached prefix and the sequences restored from it share its append-only
// rows (docs/prefix_caching.md). Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/device.h"

namespace deepinfer {

class BlockPool {
 public:
  // capacity_blocks <= 0: unlimited (a large virtual reservation; pages are committed on first use).
  // memory: where the arena lives (null: host memory). A device arena is one allocation of
  // capacity_blocks blocks (kDefaultDeviceBytes when unlimited).
  BlockPool(int64_t block_bytes, int64_t capacity_blocks, DeviceMemory* memory = nullptr);
  static constexpr size_t kDefaultDeviceBytes = size_t{2} << 30;
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int64_t block_bytes() const { return block_bytes_; }
  int64_t capacity() const { return capacity_; }
  int64_t used() const;
  DeviceMemory& memory() const { return *memory_; }
  // A zero-filled block with one reference; throws deepinfer::Error when the capacity is spent
  // (callers reserve first).
  void* allocate();
  void retain(void* block);        // one more reference
  void release(void* block);       // one reference less; the block is free at none
  int32_t refs(const void* block) const;

  // The arena's first byte: every block lies in [base(), base() + reserved_blocks() * block_bytes()).
  std::byte* base() const { return base_; }
  // Index of a `row_bytes`-wide row at `p` when every block holds block_bytes() / row_bytes rows of
  // that width from its start (PagedRows): block * rows-per-block + slot, the inverse of
  // paged_row_offset (core/row_format.h); r * row_bytes from base() when row_bytes divides block_bytes().
  int64_t row_index(const void* p, int64_t row_bytes) const {
    const int64_t off = static_cast<const std::byte*>(p) - base_;
    return off / block_bytes_ * (block_bytes_ / row_bytes) + off % block_bytes_ / row_bytes;
  }

 private:
  const int64_t block_bytes_;
  int64_t capacity_;
  DeviceMemory* memory_;
  bool mapped_ = false;  // host reservation (munmap) rather than a device allocation
  int64_t reserved_blocks_ = 0;  // blocks the reservation can hold
  std::byte* base_ = nullptr;
  size_t reserved_bytes_ = 0;
  mutable std::mutex mu_;
  int64_t used_ = 0, next_ = 0;  // blocks in use; blocks ever handed out (the high-water mark)
  std::vector<void*> free_;
  std::vector<int32_t> refs_;  // per block index below next_
  int64_t index(const void* block) const { return (static_cast<const std::byte*>(block) - base_) / block_bytes_; }
};

}  // namespace deepinfer
