#include "engine/grammar.h"

#include <list>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"

#ifdef DEEPINFER_HAVE_STRUCTURED
#include "structured/structured.h"
#endif

namespace deepinfer::engine {

#ifdef DEEPINFER_HAVE_STRUCTURED
namespace {

class MatcherState : public GrammarState {
 public:
  explicit MatcherState(std::shared_ptr<const structured::CompiledGrammar> g) : m_(std::move(g)) {}
  void fill_bitmask(std::vector<uint32_t>& words, int64_t vocab) override {
    words.assign((vocab + 31) / 32, 0u);
    m_.fill_next_token_bitmask(words.data());
  }
  bool accept(int32_t token) override { return m_.accept_token(token); }
  void rollback(int n) override { m_.rollback(n); }
  bool terminated() const override { return m_.is_terminated(); }

 private:
  structured::Matcher m_;
};

class Compiler : public GrammarCompiler {
 public:
  Compiler(std::vector<std::string> tokens, std::vector<int32_t> stops) : vocab_(std::move(tokens), std::move(stops)) {}
  std::shared_ptr<GrammarState> make(const std::string& so_args) override {
    std::lock_guard<std::mutex> lock(mu_);  // requests may be added from several threads
    auto it = cache_.find(so_args);
    if (it != cache_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second);
      return std::make_shared<MatcherState>(it->second->second);
    }
    auto g = compile_args(so_args);
    recent_.emplace_front(so_args, g);
    cache_[so_args] = recent_.begin();
    if (recent_.size() > kCacheSize) {  // live requests keep their grammar through their own pointer
      cache_.erase(recent_.back().first);
      recent_.pop_back();
    }
    return std::make_shared<MatcherState>(std::move(g));
  }

 private:
  std::shared_ptr<const structured::CompiledGrammar> compile_args(const std::string& so_args) {
    auto j = nlohmann::json::parse(so_args);
    structured::SchemaArgs a;
    a.schema_type = j.at("schema_type").get<std::string>();
    if (a.schema_type == "json_schema") a.schema_type = "json";
    if (a.schema_type == "grammar") a.schema_type = "ebnf";
    if (j.contains("schema")) a.schema = j["schema"].is_string() ? j["schema"].get<std::string>() : j["schema"].dump();
    a.strict_additional_properties = true;  // xgrammar's strict mode, as DeepInfer uses it
    try {
      return structured::compile(a, vocab_);
    } catch (const Error& e) {
      fail("so_args: ", e.what());
    }
  }
  structured::TokenVocab vocab_;
  std::mutex mu_;
  // The grammars of the most recently used so_args, newest first. Bounded: each holds token masks
  // (about 1 MiB at a 129k vocabulary), so a stream of distinct schemas must not grow memory forever.
  static constexpr size_t kCacheSize = 32;
  using Entry = std::pair<std::string, std::shared_ptr<const structured::CompiledGrammar>>;
  std::list<Entry> recent_;
  std::unordered_map<std::string, std::list<Entry>::iterator> cache_;
};

}  // namespace

std::unique_ptr<GrammarCompiler> make_grammar_compiler(std::vector<std::string> token_bytes, std::vector<int32_t> stops) {
  return std::make_unique<Compiler>(std::move(token_bytes), std::move(stops));
}
#else
std::unique_ptr<GrammarCompiler> make_grammar_compiler(std::vector<std::string>, std::vector<int32_t>) { return nullptr; }
#endif

}  // namespace deepinfer::engine
