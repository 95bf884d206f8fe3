// Structured output: compile a regex / JSON schema / EBNF grammar / json_object / choice into a
// CompiledGrammar for one vocabulary, then drive a Matcher per request to get next-token masks.
//
//   auto g = compile({"json", schema_text}, vocab);   // throws deepinfer::Error naming the construct
//   Matcher m(g);
//   m.fill_next_token_bitmask(words);                  // bit (id % 32) of words[id / 32]
//   m.accept_token(sampled_id);
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "structured/earley.h"
#include "structured/fsm.h"
#include "structured/grammar.h"
#include "structured/vocab.h"

namespace deepinfer::structured {

enum class Whitespace {
  kCompact,   // JSON without any whitespace: {"a":1,"b":[1,2]}
  kFlexible,  // [ \t\n\r]{0,max_whitespace} allowed wherever JSON allows whitespace
};

struct SchemaArgs {
  std::string schema_type;  // "regex", "json", "json_object", "ebnf", "choice"
  std::string schema;       // for "choice": a JSON array of strings; unused for "json_object"
  Whitespace whitespace = Whitespace::kCompact;
  int max_whitespace = 16;  // per whitespace run in kFlexible mode
  // true: objects without "additionalProperties" get no extra keys (as xgrammar's strict mode);
  // false: the JSON-schema default, extra keys of any value are allowed.
  bool strict_additional_properties = false;
  // For "json": other documents a $ref may name, by absolute URI (text of a schema each): the
  // only way a remote $ref resolves, since nothing is fetched.
  std::map<std::string, std::string> documents;
};

// Precomputed token classification of one scanable FSM node (see docs/structured-output.md).
struct StateMask {
  // Bitset over ids when many tokens are accepted (one copy per distinct set: the nodes of an
  // extra-key trie all accept the same string contents), otherwise the accepted ids.
  std::shared_ptr<const std::vector<uint32_t>> accepted_bits;
  std::vector<int32_t> accepted_ids;
  std::vector<int32_t> uncertain;       // sorted-vocab indices that need the full parser state
  // Nodes of counted rules (grammar.h CountedRule): the characters each accepted token adds, so a
  // mask with r characters left keeps the tokens adding at most r. With accepted_bits: `counts`
  // (shared by the nodes whose tokens add the same; a product of patterns has thousands);
  // with accepted_ids: the characters of each, in the same order.
  struct CharCounts {
    static constexpr uint32_t kSmall = 24;  // at_most_bits for 0..23 characters left
    std::vector<uint32_t> at_most_bits;     // kSmall bitsets over ids, one after the other
    std::vector<std::pair<int32_t, int32_t>> long_ids;  // (id, characters) of the tokens adding more
    bool operator==(const CharCounts&) const = default;
  };
  std::shared_ptr<const CharCounts> counts;
  std::vector<int32_t> accepted_chars;
  // The most characters an uncertain token reads in the rule before leaving it: further than
  // this from the upper bound (and past the lower one) the count cannot change their verdicts.
  uint32_t uncertain_chars = 0;
  // ORs the accepted tokens adding at most `left` characters into words (tmp: scratch words).
  void or_counted(uint32_t left, uint32_t* words, std::vector<uint32_t>& tmp) const;
};

// The automaton of one grammar for one vocabulary, and its nodes' token classes. Compiling
// classifies the nodes nearest the root within a budget (all of a small grammar); any other class
// is computed the first time a matcher needs it (then kept): compile time stays bounded however
// many nodes a large schema has, and a request only pays for the nodes its output visits.
// Thread-safe: matchers on several threads may share one grammar.
class CompiledGrammar {
 public:
  static constexpr int64_t kWarmTokens = int64_t(1) << 20;  // token walks at compile time
  static constexpr size_t kWarmNodes = 4096;  // automaton nodes: larger grammars skip the warm-up
  // warm_tokens: the compile-time classification's budget in token walks (see warm_up).
  CompiledGrammar(const Grammar& g, const TokenVocab& vocab, int64_t warm_tokens = kWarmTokens);
  ~CompiledGrammar();

  const TokenVocab& vocab() const { return vocab_; }
  const Automaton& automaton() const { return automaton_; }
  // Mask of a scanable node (computed on first use), or nullptr when the node has no byte edges.
  const StateMask* mask(uint32_t node) const {
    const int32_t m = node_mask_[node];
    if (m < 0) return nullptr;
    const StateMask* p = ready_[m].load(std::memory_order_acquire);
    return p ? p : compute_mask(m);
  }
  // A representative of node's rule and equivalence class: nodes with the same representative
  // behave the same in every context (used to recognise repeated parser states).
  uint32_t canonical(uint32_t node) const { return canonical_[node]; }
  size_t num_masks() const { return reps_.size(); }  // distinct classes (computed or not)
  size_t num_computed_masks() const;
  size_t memory_bytes() const;  // of the masks computed so far

 private:
  struct Lazy;  // the classification's caches (compiled_grammar.cpp)
  void warm_up(int64_t budget);
  const StateMask* compute_mask(int32_t m) const;
  TokenVocab vocab_;
  Automaton automaton_;
  std::vector<int32_t> node_mask_;
  std::vector<uint32_t> canonical_;
  std::vector<uint32_t> cls_;   // equivalence class of each node
  std::vector<uint32_t> reps_;  // the node classified for each mask
  std::unique_ptr<std::atomic<const StateMask*>[]> ready_;
  std::unique_ptr<Lazy> lazy_;
};

struct SchemaMatchesNothing : Error {
  using Error::Error;
};

// Front ends into the IR (used by compile, exposed for tests and tools).
Grammar parse_ebnf(const std::string& text, const std::string& root = "root");
// Adds the regex as rule `rule_name` of g (json_string: escape the characters JSON strings escape).
int add_regex_rule(Grammar& g, const std::string& rule_name, const std::string& regex, bool json_string = false);
Grammar regex_grammar(const std::string& regex);
// Throws SchemaMatchesNothing (a deepinfer::Error) when no instance matches the schema ('false',
// an allOf of disjoint types, ...): refused, since no output could end, but a definite verdict.
Grammar json_schema_grammar(const std::string& schema, const SchemaArgs& opts);
Grammar json_object_grammar(const SchemaArgs& opts);
Grammar choice_grammar(const std::string& json_array);
Grammar grammar_from_args(const SchemaArgs& args);

std::shared_ptr<const CompiledGrammar> compile(const SchemaArgs& args, const TokenVocab& vocab);

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Consumes one token; returns false (state unchanged) when the grammar does not allow it.
  // A stop token is accepted only where can_end(), and terminates the matcher.
  bool accept_token(int32_t id);
  // Consumes raw text (for tests and jump-forward); false and unchanged if not allowed.
  bool accept_bytes(const std::string& bytes);
  // Undoes the last n accepted tokens (a stop token included).
  void rollback(int n);
  bool can_end() const;
  bool must_end() const;
  bool is_terminated() const { return terminated_; }
  // words has ceil(vocab_size / 32) entries; bit set = token allowed next.
  void fill_next_token_bitmask(uint32_t* words) const;
  int32_t vocab_size() const { return grammar_->vocab().size(); }
  void reset();

 private:
  bool has_scanable() const;
  std::shared_ptr<const CompiledGrammar> grammar_;
  mutable EarleyParser parser_;  // trial runs of uncertain tokens push and pop sets
  std::vector<int32_t> history_;  // bytes consumed per accepted token; -1 for the stop token
  bool terminated_ = false;
  mutable std::vector<int32_t> scratch_;
  mutable std::vector<const StateMask*> frontier_masks_;
  mutable std::vector<std::pair<const StateMask*, uint32_t>> counted_masks_;  // (mask, chars left)
  mutable std::vector<uint32_t> tmp_words_;
  // Uncertain-token results of recent frontiers. The parser's verdict on a token depends only on
  // the newest Earley set (the key: its items, nodes made canonical, origins at that set made
  // relative) and the sets its origins refer to, which stay put until a rollback pops them; so a
  // frontier seen again (every step inside one JSON string) reuses the verdicts.
  struct UncertainCache {
    std::vector<EarleyItem> key;
    uint32_t max_origin = 0;      // deepest older set the key refers to (0 when none)
    std::vector<int32_t> passed;  // uncertain token ids the parser accepted
    uint64_t last_use = 0;
  };
  static constexpr size_t kCacheEntries = 4;
  mutable std::vector<UncertainCache> cache_;
  mutable std::vector<EarleyItem> key_;
  // The uncertain walk's neutral bytes (0 unknown, 1 neutral, 2 not) and the verdicts of token
  // rests after them (matcher.cpp), for frontiers of at most kNeutralItems items.
  static constexpr long kNeutralItems = 4;
  mutable std::array<uint8_t, 256> neutral_{};
  mutable std::vector<EarleyItem> base_items_, next_items_;
  mutable std::unordered_map<std::string, bool> rest_verdicts_;
  mutable uint64_t cache_clock_ = 0;
};

}  // namespace deepinfer::structured
