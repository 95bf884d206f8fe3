#include "core/device.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/env.h"
#include "core/random_bytes.h"
#include "core/error.h"

namespace deepinfer {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return {};
  if (s == "cuda") return {DeviceKind::kCuda, 0};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() < 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos)
    return {DeviceKind::kCuda, std::stoi(s.substr(5))};
  throw Error("unknown device '" + s + "' (expected cpu, cuda or cuda:N)");
}

Device Device::resolve(const std::string& requested) {
  return parse(requested.empty() ? env_string("DEEPINFER_DEVICE") : requested);
}

namespace {

class HostMemory final : public DeviceMemory {
 public:
  Device device() const override { return {}; }
  void* allocate(size_t bytes) override {
    // Rounded up to the alignment; a size within 255 of SIZE_MAX would wrap to a tiny block.
    check(bytes <= SIZE_MAX - 255, "out of host memory allocating ", bytes, " bytes");
    void* p = std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
    check(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memmove(dst, src, bytes);
  }
  void zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }
};

}  // namespace

void DeviceMemory::fill_bytes(void* dst, size_t bytes, uint8_t value) {
  const std::vector<uint8_t> v(std::min(bytes, kRandomChunk * 64), value);
  for (size_t o = 0; o < bytes; o += v.size()) upload(static_cast<uint8_t*>(dst) + o, v.data(), std::min(v.size(), bytes - o));
}

void DeviceMemory::random_fill(void* dst, size_t bytes, uint64_t stream, uint8_t and_mask, uint8_t or_mask) {
  std::vector<uint8_t> v(bytes);
  random_bytes(stream, v.data(), bytes, and_mask, or_mask);
  upload(dst, v.data(), bytes);
}

DeviceMemory& host_memory() {
  static auto* m = new HostMemory;  // never destroyed: arenas in statics release into it at exit
  return *m;
}

}  // namespace deepinfer
