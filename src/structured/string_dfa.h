// Regular languages of JSON string contents (the bytes between the quotes, in the canonical
// escaping the regex front end produces) as byte DFAs, combined by product: the intersection of
// several patterns, a pattern's complement, the classes of object keys by the patterns they
// match. Grammar::dfa turns a result into an expression.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "structured/grammar.h"

namespace deepinfer::structured {

// The DFA of a rule without references (fsm.cpp's lowering of its body).
ByteDfa rule_dfa(const Grammar& g, int rule);
// Every canonical JSON string content.
ByteDfa content_dfa();
const ByteDfa& content_dfa_ref();  // the same, not copied
// The contents matching `regex` (JSON-schema search semantics); not trimmed.
ByteDfa pattern_dfa(const std::string& regex);
// Every canonical JSON string content but the given ones (canonical encodings, without quotes):
// the keys an object with these declared names may add.
ByteDfa contents_except(const std::vector<std::string>& names);
// Exactly the given contents (canonical JSON encodings, without quotes).
ByteDfa literal_dfa(const std::vector<std::string>& contents);

// Whether d accepts the bytes of `content`.
bool dfa_matches(const ByteDfa& d, const std::string& content);

// The product of parts[0] (the universe: a tuple dies with it) and the other parts (a dead part
// just stops accepting). Per state, bit i of `accepts` says parts[i] accepts there.
struct ProductDfa {
  ByteDfa dfa;  // accepting unused
  std::vector<uint64_t> accepts;
};
// Throws deepinfer::Error naming `what` beyond max_states states (at most 64 parts).
ProductDfa product_dfa(const std::vector<const ByteDfa*>& parts, size_t max_states, const std::string& what);
// The states of p where accept(bits) holds accept; trimmed to the states that can still reach
// one (size 0: the language is empty).
ByteDfa select_dfa(const ProductDfa& p, const std::function<bool(uint64_t)>& accept);

}  // namespace deepinfer::structured
