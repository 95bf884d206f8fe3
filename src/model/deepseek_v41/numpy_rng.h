// numpy's default random generator, reproduced bit for bit for the one draw Engram needs (its hash
// multipliers): SeedSequence entropy mixing, PCG64 (128-bit LCG, XSL-RR output) and Generator.integers'
// bounded int64 draws (Lemire's multiply-and-reject, numpy's bounded_lemire_uint64 / _uint32).
#pragma once
#include <cstdint>
#include <vector>

namespace deepinfer::model {

// np.random.default_rng(seed).integers(low, high, n, dtype=np.int64): n draws from [low, high).
std::vector<int64_t> numpy_integers(uint64_t seed, int64_t low, int64_t high, int64_t n);

}  // namespace deepinfer::model
