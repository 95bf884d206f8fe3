// Fuzz target: a .safetensors file (header JSON, offsets, dtypes, shapes). Malformed input must be a
// deepinfer::Error; every tensor of an accepted file must lie inside the mapped data.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/deepinfer_fuzz_" + std::to_string(getpid()) + ".safetensors";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    auto f = deepinfer::io::SafetensorsFile::open(path);
    for (const auto& [name, t] : f->tensors()) {
      volatile uint8_t sum = 0;  // touch the first and last byte: out of the map would fault
      if (t.nbytes) sum = static_cast<uint8_t>(t.data[0] + t.data[t.nbytes - 1]);
      (void)sum;
      if (t.numel() < 0) std::abort();
    }
  } catch (const deepinfer::Error&) {
  }
  return 0;
}
