// Generated tables for DeepSeek-V4.1's Engram (see tools/gen/gen_v41_tables.py).
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepinfer::model::v41 {

// A code point whose NFKC -> NFD -> strip-accents -> lowercase image differs from itself.
struct FoldEntry {
  uint32_t code_point;
  const char* folded;  // UTF-8, possibly empty
};
extern const FoldEntry kFoldTable[];  // sorted by code point
extern const size_t kFoldTableSize;

// numpy default_rng(10007*layer).integers(0, (int64max // vocab) // 2, 4, int64) * 2 + 1.
struct MultiplierEntry {
  int64_t compressed_vocab;
  int64_t layer;
  int64_t mult[4];
};
extern const MultiplierEntry kMultipliers[];
extern const size_t kMultipliersSize;

}  // namespace deepinfer::model::v41
