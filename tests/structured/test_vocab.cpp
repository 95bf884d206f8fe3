#include "test_vocab.h"

#include "tokenizer/tokenizer.h"

namespace deepinfer::structured {

TokenVocab load_vocab(const std::string& path, int32_t logit_width) {
  auto tok = tokenizer::Tokenizer::load(path);
  int32_t n = static_cast<int32_t>(tok.vocab_size());
  std::vector<std::string> bytes(std::max(n, logit_width));
  for (int32_t id = 0; id < n; ++id)
    if (!tok.is_added(id)) bytes[id] = tok.token_bytes(id);
  std::vector<int32_t> stops;
  if (auto eos = tok.eos_id()) stops.push_back(*eos);
  return TokenVocab(std::move(bytes), std::move(stops));
}

}  // namespace deepinfer::structured
