// Where data lives, and the memory interface of a device. Every backend owns the memory its ops read;
// host code holds device pointers but never dereferences them: it moves data with upload/download.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace deepinfer {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // "cpu", "cuda" (= cuda:0) or "cuda:N"; throws deepinfer::Error on anything else.
  static Device parse(const std::string& s);
  // The device a user asked for: `requested` when given, else DEEPINFER_DEVICE (default cpu).
  static Device resolve(const std::string& requested);
  friend bool operator==(const Device&, const Device&) = default;
};

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  // At least 256-byte aligned, contents undefined; throws deepinfer::Error when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // Ordered with the backend's ops: an upload is visible to ops enqueued after it; download returns
  // once the data (written by every op enqueued before it) is on the host.
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // within the device
  virtual void synchronize() {}  // returns once every op enqueued before it is done (host memory: at once)
  // Device time without waiting (the GPU's idle time between forwards): mark(i) records time point
  // i < kMarks after every op enqueued so far; marked_ms(a, b) = device milliseconds from point a to
  // point b once the device reached both (-1 where there is no device clock: host memory).
  static constexpr int kMarks = 3;
  virtual void mark(int point) { (void)point; }
  virtual double marked_ms(int from, int to) {
    (void)from, (void)to;
    return -1;
  }
  virtual void zero(void* dst, size_t bytes) = 0;
  // dst[0, bytes) = value; and = bytes [0, bytes) of core random_bytes(stream) masked (dummy weights
  // generated where they live). These defaults build the bytes on the host and upload them.
  virtual void fill_bytes(void* dst, size_t bytes, uint8_t value);
  virtual void random_fill(void* dst, size_t bytes, uint64_t stream, uint8_t and_mask, uint8_t or_mask);
  // Free and total bytes of the device's memory; false where unknown (host memory).
  virtual bool memory_info(size_t* free_bytes, size_t* total_bytes) const {
    (void)free_bytes, (void)total_bytes;
    return false;
  }
};

// Host memory as a DeviceMemory (the device of host-side arenas).
DeviceMemory& host_memory();

}  // namespace deepinfer
