#include <algorithm>
#include <bitset>
#include <string_view>

#include "structured/structured.h"

namespace deepinfer::structured {

namespace {

// Classifies every text token for one scanable node, in the node's rule only (parents unknown):
// accepted = consumed entirely inside the rule; uncertain = fails after the rule could complete
// (the parent decides); otherwise rejected. Walks the sorted vocab reusing the parser's sets for
// the common prefix with the previous token and skipping whole trie subtrees on failure.
StateMask classify(const Automaton& a, const TokenVocab& vocab, uint32_t node, EarleyParser& p) {
  StateMask m;
  p.reset(node);
  std::bitset<256> first;
  for (const EarleyItem* it = p.begin(); it != p.end(); ++it) {
    const FsmNode& n = a.nodes[it->node];
    for (uint32_t e = n.byte_begin; e < n.byte_end; ++e)
      for (int b = a.byte_edges[e].lo; b <= a.byte_edges[e].hi; ++b) first.set(b);
  }
  std::bitset<256> loop;  // bytes on which the node stays in place: such tokens are accepted
  const FsmNode& self = a.nodes[node];
  for (uint32_t e = self.byte_begin; e < self.byte_end; ++e)
    if (a.byte_edges[e].target == node)
      for (int b = a.byte_edges[e].lo; b <= a.byte_edges[e].hi; ++b) loop.set(b);

  std::vector<int32_t> accepted;
  std::string cur;          // the bytes currently pushed on the parser
  std::string fail_prefix;  // bytes up to and including the last failing byte
  bool fail_uncertain = false;
  for (int b = 0; b < 256; ++b) {
    if (!first.test(b)) continue;
    const int32_t end = vocab.first_byte_begin(b + 1);
    for (int32_t i = vocab.first_byte_begin(b); i < end;) {
      const std::string& tok = vocab.sorted_bytes(i);
      bool in_loop = loop.any();
      for (size_t k = 0; in_loop && k < tok.size(); ++k) in_loop = loop.test(static_cast<uint8_t>(tok[k]));
      if (in_loop) {
        accepted.push_back(vocab.sorted_id(i++));
        continue;
      }
      bool failed, uncertain;
      if (!fail_prefix.empty() && std::string_view(tok).substr(0, fail_prefix.size()) == fail_prefix) {
        failed = true;
        uncertain = fail_uncertain;
      } else {
        size_t l = 0;
        while (l < cur.size() && l < tok.size() && cur[l] == tok[l]) ++l;
        p.pop_to(static_cast<int>(l));
        cur.resize(l);
        failed = false;
        for (size_t k = l; k < tok.size(); ++k) {
          if (!p.advance(static_cast<uint8_t>(tok[k]))) {
            failed = true;
            break;
          }
          cur += tok[k];
        }
        uncertain = failed && p.root_done_since_start();
        if (failed) {
          fail_prefix.assign(tok, 0, cur.size() + 1);
          fail_uncertain = uncertain;
        }
      }
      if (!failed) {
        accepted.push_back(vocab.sorted_id(i++));
        continue;
      }
      // Every token extending this one fails at the same byte with the same outcome.
      int32_t skip = vocab.subtree_end(i);
      if (uncertain)
        for (int32_t k = i; k < skip; ++k) m.uncertain.push_back(k);
      i = skip;
    }
  }
  const size_t words = (vocab.size() + 31) / 32;
  if (accepted.size() > words) {
    m.accepted_bits.assign(words, 0);
    for (int32_t id : accepted) m.accepted_bits[id >> 5] |= 1u << (id & 31);
  } else {
    std::sort(accepted.begin(), accepted.end());
    m.accepted_ids = std::move(accepted);
  }
  return m;
}

}  // namespace

CompiledGrammar::CompiledGrammar(const Grammar& g, const TokenVocab& vocab)
    : vocab_(vocab), automaton_(build_automaton(g)), ebnf_(g.to_ebnf()) {
  build_masks();
}

void CompiledGrammar::build_masks() {
  node_mask_.assign(automaton_.nodes.size(), -1);
  EarleyParser p(&automaton_);
  for (uint32_t n = 0; n < automaton_.nodes.size(); ++n) {
    if (!automaton_.nodes[n].has_bytes()) continue;
    node_mask_[n] = static_cast<int32_t>(masks_.size());
    masks_.push_back(classify(automaton_, vocab_, n, p));
  }
}

size_t CompiledGrammar::memory_bytes() const {
  size_t total = 0;
  for (const auto& m : masks_)
    total += 4 * (m.accepted_bits.size() + m.accepted_ids.size() + m.uncertain.size());
  return total;
}

}  // namespace deepinfer::structured
