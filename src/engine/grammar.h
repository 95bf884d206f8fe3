// Structured output for the engine: so_args compiled (once per distinct so_args) against the
// tokenizer's vocabulary, and one matcher per sequence that masks the next token and consumes
// the sampled one. Backed by src/structured/ when the build has it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace deepinfer::engine {

class GrammarState {
 public:
  virtual ~GrammarState() = default;
  // words: ceil(vocab / 32) entries; bit set = allowed next.
  virtual void fill_bitmask(std::vector<uint32_t>& words, int64_t vocab) = 0;
  virtual bool accept(int32_t token) = 0;
  virtual void rollback(int n) = 0;       // undoes the last n accepted tokens (draft verification)
  virtual bool terminated() const = 0;
};

class GrammarCompiler {
 public:
  virtual ~GrammarCompiler() = default;
  // A fresh matcher for so_args (JSON {"schema_type", "schema"}); throws deepinfer::Error.
  virtual std::shared_ptr<GrammarState> make(const std::string& so_args) = 0;
};

// token_bytes[id]: the raw bytes of each token ("" for special ids), sized to the logit width.
// Returns nullptr when the build has no structured-output library.
std::unique_ptr<GrammarCompiler> make_grammar_compiler(std::vector<std::string> token_bytes,
                                                       std::vector<int32_t> stop_ids);

}  // namespace deepinfer::engine
