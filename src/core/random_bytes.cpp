#include "core/random_bytes.h"

#include <algorithm>

#include "core/thread_pool.h"

namespace deepinfer {

void random_bytes(uint64_t stream, uint8_t* out, size_t n, uint8_t and_mask, uint8_t or_mask) {
  const int64_t chunks = static_cast<int64_t>((n + kRandomChunk - 1) / kRandomChunk);
  parallel_for(chunks, [&](int64_t c0, int64_t c1) {
    for (size_t i = static_cast<size_t>(c0) * kRandomChunk, end = std::min(n, static_cast<size_t>(c1) * kRandomChunk);
         i < end; i += 8) {
      const uint64_t r = random_word(stream, i / 8);
      for (size_t j = 0; j < 8 && i + j < end; ++j) out[i + j] = static_cast<uint8_t>((r >> (8 * j)) & and_mask) | or_mask;
    }
  });
}

uint64_t random_stream(uint64_t seed, const char* name, size_t name_len) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (size_t i = 0; i < name_len; ++i) h = (h ^ static_cast<unsigned char>(name[i])) * 1099511628211ull;
  return h;
}

}  // namespace deepinfer
