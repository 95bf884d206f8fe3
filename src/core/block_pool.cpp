#include "core/block_pool.h"

#include <cstring>

#include "core/error.h"

namespace deepinfer {

BlockPool::BlockPool(int64_t block_bytes, int64_t capacity_blocks)
    : block_bytes_(block_bytes), capacity_(capacity_blocks > 0 ? capacity_blocks : 0) {
  check(block_bytes > 0 && block_bytes % 64 == 0, "state block size must be a positive multiple of 64 bytes, got ",
        block_bytes);
}

int64_t BlockPool::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

void* BlockPool::allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  check(capacity_ == 0 || used_ < capacity_, "state memory exhausted: all ", capacity_, " blocks of ", block_bytes_,
        " bytes are in use");
  ++used_;
  void* block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    storage_.push_back(std::make_unique<std::byte[]>(block_bytes_));
    block = storage_.back().get();
  }
  std::memset(block, 0, block_bytes_);
  return block;
}

void BlockPool::release(void* block) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(block);
  --used_;
}

}  // namespace deepinfer
