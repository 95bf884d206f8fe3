// The DeepSeek-V3 vocabulary as the grammar engine sees it: raw token bytes from the project's
// tokenizer, added tokens as non-text, padded to the 129,280-wide logits.
#pragma once
#include <string>

#include "structured/vocab.h"

namespace deepinfer::structured {

constexpr int32_t kV3LogitWidth = 129280;
inline const char* kV3TokenizerPath = "tests/data/tokenizer/deepseek-v3/tokenizer.json";

TokenVocab load_vocab(const std::string& tokenizer_path = kV3TokenizerPath, int32_t logit_width = kV3LogitWidth);

}  // namespace deepinfer::structured
