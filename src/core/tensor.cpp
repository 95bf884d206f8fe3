#include "core/tensor.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return ndim ? n : 0;
}

namespace {
template <class T>
T* typed(const Tensor& t, DType want) {
  check(t.dtype == want, "tensor: ", dtype_name(t.dtype), " tensor read as ", dtype_name(want));
  return static_cast<T*>(t.data);
}
}  // namespace

float* Tensor::f32() const { return typed<float>(*this, DType::F32); }
uint16_t* Tensor::bf16() const { return typed<uint16_t>(*this, DType::BF16); }
int32_t* Tensor::i32() const { return typed<int32_t>(*this, DType::I32); }
int64_t* Tensor::i64() const { return typed<int64_t>(*this, DType::I64); }
uint8_t* Tensor::u8() const {
  check(dtype_bits(dtype) == 8, "tensor: ", dtype_name(dtype), " tensor read as bytes");
  return static_cast<uint8_t*>(data);
}

Buffer::Buffer(DeviceMemory& mem, size_t bytes) : mem_(&mem), data_(bytes ? mem.allocate(bytes) : nullptr), bytes_(bytes) {}

Buffer::~Buffer() {
  if (data_) mem_->release(data_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (data_) mem_->release(data_);
    mem_ = o.mem_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  Tensor t;
  t.data = data_;
  t.dtype = dtype;
  t.ndim = static_cast<int>(shape.size());
  check(t.ndim <= 4, "tensor: at most 4 dimensions");
  std::copy(shape.begin(), shape.end(), t.shape.begin());
  t.device = mem_ ? mem_->device() : Device{};
  check(t.bytes() <= bytes_, "tensor: a view of ", t.bytes(), " bytes on a buffer of ", bytes_);
  return t;
}

Buffer upload_buffer(DeviceMemory& mem, const void* host, size_t bytes) {
  Buffer b(mem, bytes);
  if (bytes) mem.upload(b.data(), host, bytes);
  return b;
}

Tensor Workspace::take(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.ndim = static_cast<int>(shape.size());
  check(t.ndim >= 1 && t.ndim <= 4, "workspace: 1 to 4 dimensions");
  std::copy(shape.begin(), shape.end(), t.shape.begin());
  for (int i = 0; i < t.ndim; ++i) check(t.shape[i] >= 0, "workspace: negative dimension");
  t.device = mem_->device();
  const size_t need = std::max<size_t>(256, (t.bytes() + 255) / 256 * 256);
  // Next slab when this one is full; a new slab only when no kept one is large enough.
  while (slab_ < slabs_.size() && offset_ + need > slabs_[slab_].bytes()) ++slab_, offset_ = 0;
  if (slab_ == slabs_.size()) {
    slabs_.emplace_back(*mem_, std::max(slab_bytes_, need));
    offset_ = 0;
  }
  t.data = static_cast<std::byte*>(slabs_[slab_].data()) + offset_;
  offset_ += need;
  return t;
}

size_t Workspace::reserved_bytes() const {
  size_t n = 0;
  for (const Buffer& b : slabs_) n += b.bytes();
  return n;
}

}  // namespace deepinfer
