// Typed views of device memory and the memory behind them.
//  - Tensor: data pointer, dtype, shape (row-major, contiguous), device. Host code may hold a
//    device tensor but reads it only through DeviceMemory::download.
//  - Buffer: owns one allocation of a DeviceMemory (weights, state arenas).
//  - Workspace: the per-forward scratch arena. take() bumps a pointer through slabs that are kept
//    across forwards; reset() starts the next forward at the same addresses, so a forward of the same
//    shape after the first allocates nothing and sees the same pointers (CUDA-graph safe). Mark /
//    rewind give stack-like scopes inside a forward (per layer).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace deepinfer {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::array<int64_t, 4> shape{};
  int ndim = 0;
  Device device;

  int64_t numel() const;
  size_t bytes() const { return (static_cast<size_t>(numel()) * dtype_bits(dtype) + 7) / 8; }
  int64_t size(int i) const { return shape[i]; }
  bool empty() const { return numel() == 0; }
  // Typed pointers; each checks the dtype.
  float* f32() const;
  uint16_t* bf16() const;  // bf16 bits
  int32_t* i32() const;
  int64_t* i64() const;
  uint8_t* u8() const;
};

class Buffer {
 public:
  Buffer() = default;
  Buffer(DeviceMemory& mem, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  DeviceMemory* memory() const { return mem_; }
  Tensor view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  DeviceMemory* mem_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A host array uploaded into a new buffer (weights at load time).
Buffer upload_buffer(DeviceMemory& mem, const void* host, size_t bytes);

class Workspace {
 public:
  explicit Workspace(DeviceMemory& mem, size_t slab_bytes = size_t{64} << 20) : mem_(&mem), slab_bytes_(slab_bytes) {}

  Tensor take(DType dtype, std::initializer_list<int64_t> shape);
  Tensor f32(std::initializer_list<int64_t> shape) { return take(DType::F32, shape); }
  Tensor i32(std::initializer_list<int64_t> shape) { return take(DType::I32, shape); }
  // A tensor holding a host array (uploaded now; ordered before the ops enqueued after).
  template <class T>
  Tensor upload(const std::vector<T>& v, DType dtype) {
    Tensor t = take(dtype, {static_cast<int64_t>(v.size())});
    if (!v.empty()) mem_->upload(t.data, v.data(), t.bytes());
    return t;
  }

  struct Mark {
    size_t slab = 0, offset = 0;
  };
  Mark mark() const { return {slab_, offset_}; }
  void rewind(Mark m) { slab_ = m.slab, offset_ = m.offset; }
  void reset() { rewind({}); }
  size_t reserved_bytes() const;  // all slabs
  DeviceMemory& memory() const { return *mem_; }

  // Rewinds to the mark taken at construction when it leaves scope.
  class Scope {
   public:
    explicit Scope(Workspace& ws) : ws_(ws), mark_(ws.mark()) {}
    ~Scope() { ws_.rewind(mark_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Workspace& ws_;
    Mark mark_;
  };

 private:
  DeviceMemory* mem_;
  size_t slab_bytes_;
  std::vector<Buffer> slabs_;
  size_t slab_ = 0, offset_ = 0;
};

}  // namespace deepinfer
