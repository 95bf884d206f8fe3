// Deterministic random bytes (load_format="dummy"): a stream of bytes fixed by a 64-bit stream id, the
// same whoever generates it (any thread count, the host or the CUDA backend's kernel). Byte i is byte
// i % 8 of splitmix64's output w + 1 of the sub-stream that starts at stream + c * kRandomStride, with
// c = i / kRandomChunk and w = (i % kRandomChunk) / 8; then masked: (r & and_mask) | or_mask.
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepinfer {

constexpr size_t kRandomChunk = size_t{1} << 20;
constexpr uint64_t kRandomStride = 0x632be59bd9b4e019ull, kSplitmixGamma = 0x9e3779b97f4a7c15ull;

// splitmix64's finalizer of state z (the generator's output for the state after the increment).
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr uint64_t splitmix_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The 8 bytes of word `word` (bytes 8 * word .. 8 * word + 7) of `stream`, unmasked.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr uint64_t random_word(uint64_t stream, uint64_t word) {
  constexpr uint64_t kWords = kRandomChunk / 8;
  return splitmix_mix(stream + (word / kWords) * kRandomStride + (word % kWords + 1) * kSplitmixGamma);
}

// Bytes [0, n) of `stream`, masked, into out (host; in parallel over chunks).
void random_bytes(uint64_t stream, uint8_t* out, size_t n, uint8_t and_mask, uint8_t or_mask);

// The stream id of a named tensor of a seed (FNV-1a of the name, keyed by the seed).
uint64_t random_stream(uint64_t seed, const char* name, size_t name_len);

}  // namespace deepinfer
