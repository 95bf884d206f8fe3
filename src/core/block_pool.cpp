#include "core/block_pool.h"

#include <sys/mman.h>

#include <cstring>

#include "core/error.h"

namespace deepinfer {
namespace {

// Virtual address space reserved for an unlimited pool: untouched pages cost no memory.
constexpr size_t kUnlimitedBytes = size_t{1} << 38;  // 256 GiB

std::byte* reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

}  // namespace

BlockPool::BlockPool(int64_t block_bytes, int64_t capacity_blocks, DeviceMemory* memory)
    : block_bytes_(block_bytes), capacity_(capacity_blocks > 0 ? capacity_blocks : 0),
      memory_(memory ? memory : &host_memory()) {
  check(block_bytes > 0 && block_bytes % 64 == 0, "state block size must be a positive multiple of 64 bytes, got ",
        block_bytes);
  if (!memory_->device().is_cpu()) {
    if (!capacity_) capacity_ = static_cast<int64_t>(kDefaultDeviceBytes / block_bytes);
    reserved_bytes_ = static_cast<size_t>(capacity_) * block_bytes;
    base_ = static_cast<std::byte*>(memory_->allocate(reserved_bytes_));
    reserved_blocks_ = capacity_;
    return;
  }
  mapped_ = true;
  reserved_bytes_ = capacity_ ? static_cast<size_t>(capacity_) * block_bytes : kUnlimitedBytes;
  base_ = reserve(reserved_bytes_);
  for (size_t smaller = reserved_bytes_ / 2; !base_ && !capacity_ && smaller >= (size_t{1} << 30); smaller /= 2)
    base_ = reserve(reserved_bytes_ = smaller);  // a host that limits address space: take what it gives
  check(base_ != nullptr, "state memory: cannot reserve ", reserved_bytes_, " bytes for ", capacity_, " blocks of ",
        block_bytes, " bytes");
  reserved_blocks_ = static_cast<int64_t>(reserved_bytes_ / block_bytes);
}

BlockPool::~BlockPool() {
  if (mapped_) munmap(base_, reserved_bytes_);
  else memory_->release(base_);
}

int64_t BlockPool::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

void* BlockPool::allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  check(capacity_ == 0 || used_ < capacity_, "state memory exhausted: all ", capacity_, " blocks of ", block_bytes_,
        " bytes are in use");
  void* block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else {
    check(next_ < reserved_blocks_, "state memory exhausted: the arena's ", reserved_blocks_, " blocks are in use");
    block = base_ + next_++ * block_bytes_;
    refs_.push_back(0);
  }
  refs_[index(block)] = 1;
  ++used_;
  memory_->zero(block, block_bytes_);
  return block;
}

void BlockPool::retain(void* block) {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t& r = refs_[index(block)];
  check(r > 0, "internal: retain of a free state block");
  ++r;
}

void BlockPool::release(void* block) {
  std::lock_guard<std::mutex> lock(mu_);
  int32_t& r = refs_[index(block)];
  check(r > 0, "internal: release of a free state block");
  if (--r > 0) return;
  free_.push_back(block);
  --used_;
}

int32_t BlockPool::refs(const void* block) const {
  std::lock_guard<std::mutex> lock(mu_);
  return refs_[index(block)];
}

}  // namespace deepinfer
