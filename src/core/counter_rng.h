// Counter-based randomness: every draw is a pure function of (seed, stream, position, index),
// so a seeded request gets the same noise whatever else is in the batch, in any order, on any backend
// (the CUDA backend's token draw computes the same bits), and a preempted request recomputed later
// redraws exactly what it drew before.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define DEEPINFER_HOST_DEVICE __host__ __device__
#else
#define DEEPINFER_HOST_DEVICE
#endif

namespace deepinfer {

DEEPINFER_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The key of one sampling decision; each vocab entry then gets its own counter.
DEEPINFER_HOST_DEVICE inline uint64_t draw_key(uint64_t seed, uint64_t stream, uint64_t position) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ position);
}

// Uniform in the open interval (0, 1), 53 bits.
DEEPINFER_HOST_DEVICE inline double uniform(uint64_t key, uint64_t index) {
  return (static_cast<double>(splitmix64(key ^ (index * 0xd1b54a32d192ed03ULL)) >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace deepinfer
