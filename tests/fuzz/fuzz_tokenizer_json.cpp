// Fuzz target: tokenizer.json. A file the loader accepts must encode and decode without crashing.
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto tok = deepinfer::tokenizer::Tokenizer::from_json(text);
    auto ids = tok.encode("Hello <｜User｜> world 123 !?", true);
    (void)tok.decode(ids, false);
    (void)tok.encode_plain("<｜Assistant｜>x");
  } catch (const deepinfer::Error&) {
  }
  return 0;
}
