// Fuzz target: OpenAI chat messages (JSON) through the parser, both DeepSeek chat encodings and the
// tokenizer (special-token strings kept as text). Bad messages must be a deepinfer::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "engine/chat_messages.h"
#include "tokenizer/chat_encoding.h"

namespace {
const deepinfer::tokenizer::Tokenizer& fuzz_tokenizer() {
  static const auto tok = deepinfer::tokenizer::Tokenizer::load(DEEPINFER_FUZZ_TOKENIZER);
  return tok;
}
}  // namespace

// libFuzzer calls this before the first input: loading the 129k-token tokenizer.json took over 60 s of wall
// time under ASan on the shared cores, which counted against the first input's -timeout and stopped the run.
// The replay main does not call it; there the first input loads the tokenizer.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)fuzz_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace deepinfer;
  try {
    const std::vector<ChatMessage> parsed = chat_messages_from_json(text, {.local_files = false});  // no disk reads
    for (auto format : {tokenizer::ChatFormat::kV4, tokenizer::ChatFormat::kV41}) {
      try {
        tokenizer::ChatOptions o;
        o.thinking = size % 2;
        if (size % 3) o.image_token_id = 5;
        (void)tokenizer::encode_chat(fuzz_tokenizer(), format, engine::encoding_messages(parsed, "", format), o);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
