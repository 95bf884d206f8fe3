// ops::backend_for: one backend per device, created on first use and kept for the process.
#include <map>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "ops/ops.h"
#ifdef DEEPINFER_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace deepinfer::ops {

Backend& backend_for(const Device& device) {
  if (device.is_cpu()) return cpu_backend();
#ifdef DEEPINFER_HAVE_CUDA
  static std::mutex mu;
  // Never destroyed: buffers of objects destroyed at exit (models in statics) still release into them.
  static auto* backends = new std::map<int, std::unique_ptr<cuda::CudaBackend>>;
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<cuda::CudaBackend>& b = (*backends)[device.index];
  if (!b) {
    check(cuda::device_available(), "device ", device.str(), ": the CUDA runtime sees no GPU");
    b = std::make_unique<cuda::CudaBackend>(device.index);
  }
  return *b;
#else
  throw Error("device " + device.str() + ": this build has no CUDA backend (build with DEEPINFER_ACCELERATOR=nvidia)");
#endif
}

}  // namespace deepinfer::ops
