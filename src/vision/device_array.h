// An array in a backend's memory, released with it; host code moves data only by upload/download.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "ops/ops.h"

namespace deepinfer::vision {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(ops::Backend& be, size_t n) : be_(&be), n_(n) {
    if (n_) p_ = static_cast<T*>(be.allocate(n_ * sizeof(T)));
  }
  DeviceArray(ops::Backend& be, const std::vector<T>& host) : DeviceArray(be, host.size()) {
    if (n_) be.upload(p_, host.data(), n_ * sizeof(T));
  }
  DeviceArray(DeviceArray&& o) noexcept : be_(o.be_), p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  ~DeviceArray() {
    if (p_) be_->release(p_);
  }

  T* get() const { return p_; }
  size_t size() const { return n_; }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_) be_->download(host.data(), p_, n_ * sizeof(T));
    return host;
  }

 private:
  ops::Backend* be_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace deepinfer::vision
