// Fuzz target: OpenAI chat messages (JSON) through the parser, both DeepSeek chat encodings and the
// tokenizer (special-token strings kept as text). Bad messages must be a deepinfer::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "deepinfer/llm.h"
#include "tokenizer/chat_encoding.h"

namespace {
const deepinfer::tokenizer::Tokenizer& fuzz_tokenizer() {
  static const auto tok = deepinfer::tokenizer::Tokenizer::load(DEEPINFER_FUZZ_TOKENIZER);
  return tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace deepinfer;
  try {
    std::vector<tokenizer::Message> msgs;
    for (const ChatMessage& m : chat_messages_from_json(text)) {
      tokenizer::Message x;
      x.role = m.role;
      x.content = m.content;
      x.reasoning_content = m.reasoning_content;
      x.tool_call_id = m.tool_call_id;
      for (auto& c : m.tool_calls) x.tool_calls.push_back({c.id, c.name, c.arguments});
      msgs.push_back(std::move(x));
    }
    for (auto format : {tokenizer::ChatFormat::kV4, tokenizer::ChatFormat::kV41}) {
      try {
        tokenizer::ChatOptions o;
        o.thinking = size % 2;
        (void)tokenizer::encode_chat(fuzz_tokenizer(), format, msgs, o);
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
