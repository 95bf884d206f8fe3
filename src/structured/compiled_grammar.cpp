#include <algorithm>
#include <bitset>
#include <map>
#include <string_view>

#include "structured/structured.h"

namespace deepinfer::structured {

namespace {

// Classifies every text token for one scanable node, in the node's rule only (parents unknown):
// accepted = consumed entirely inside the rule; uncertain = fails after the rule could complete
// (the parent decides); otherwise rejected. Walks the sorted vocab reusing the parser's sets for
// the common prefix with the previous token and skipping whole trie subtrees on failure.
// Fast path: greedily look for one derivation of the whole token that stays inside the rule of
// `node` (entering and leaving sub-rules, never completing the rule itself). Finding one proves
// the token is accepted in any context; failing proves nothing (the Earley walk decides).
bool greedy_accepts(const Automaton& a, uint32_t node, const std::string& tok) {
  uint32_t stack[16];
  int depth = 0;
  for (size_t i = 0; i < tok.size();) {
    const uint8_t b = static_cast<uint8_t>(tok[i]);
    uint32_t t = a.step(node, b);
    if (t != UINT32_MAX) {
      node = t;
      ++i;
      continue;
    }
    const FsmNode& n = a.nodes[node];
    if (a.rule_perm[n.rule] >= 0) return false;  // member sets need the Earley walk
    bool entered = false;
    for (uint32_t e = n.ref_begin; e < n.ref_end && depth < 16; ++e) {
      const RefEdge& r = a.ref_edges[e];
      if (a.step(a.rule_start[r.rule], b) != UINT32_MAX) {
        stack[depth++] = r.target;
        node = a.rule_start[r.rule];
        entered = true;
        break;
      }
    }
    if (entered) continue;
    if (n.accepting && depth > 0) {
      node = stack[--depth];
      continue;
    }
    return false;
  }
  return true;
}

StateMask classify(const Automaton& a, const TokenVocab& vocab, uint32_t node, EarleyParser& p) {
  StateMask m;
  p.reset(node);
  std::bitset<256> first;
  for (const EarleyItem* it = p.begin(); it != p.end(); ++it) {
    const FsmNode& n = a.nodes[it->node];
    for (uint32_t e = n.byte_begin; e < n.byte_end; ++e)
      for (int b = a.byte_edges[e].lo; b <= a.byte_edges[e].hi; ++b) first.set(b);
  }
  std::vector<int32_t> accepted;
  std::string cur;          // the bytes currently pushed on the parser
  std::string fail_prefix;  // bytes up to and including the last failing byte
  bool fail_uncertain = false;
  for (int b = 0; b < 256; ++b) {
    if (!first.test(b)) continue;
    const int32_t end = vocab.first_byte_begin(b + 1);
    for (int32_t i = vocab.first_byte_begin(b); i < end;) {
      const std::string& tok = vocab.sorted_bytes(i);
      if (greedy_accepts(a, node, tok)) {
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

// Nodes with the same future (same accepting flag, same edges to equivalent nodes, any rule)
// classify every token the same way: Moore partition refinement finds them so each distinct
// node is classified once (e.g. the UTF-8 continuation states of every string in a schema).
std::vector<uint32_t> equivalent_nodes(const Automaton& a) {
  const size_t n = a.nodes.size();
  std::vector<uint32_t> cls(n);
  for (size_t i = 0; i < n; ++i) cls[i] = a.nodes[i].accepting;
  size_t num = 0;
  while (true) {
    std::map<std::vector<uint32_t>, uint32_t> ids;
    std::vector<uint32_t> next(n);
    for (size_t i = 0; i < n; ++i) {
      const FsmNode& nd = a.nodes[i];
      std::vector<uint32_t> sig{cls[i]};
      for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) {
        const ByteEdge& b = a.byte_edges[e];
        sig.insert(sig.end(), {b.lo, b.hi, cls[b.target]});
      }
      sig.push_back(UINT32_MAX);
      for (uint32_t e = nd.ref_begin; e < nd.ref_end; ++e)
        sig.insert(sig.end(), {a.ref_edges[e].rule, cls[a.ref_edges[e].target]});
      next[i] = ids.emplace(std::move(sig), static_cast<uint32_t>(ids.size())).first->second;
    }
    cls.swap(next);
    if (ids.size() == num) return cls;
    num = ids.size();
  }
}

void CompiledGrammar::build_masks() {
  node_mask_.assign(automaton_.nodes.size(), -1);
  std::vector<uint32_t> cls = equivalent_nodes(automaton_);
  std::map<uint32_t, int32_t> mask_of_class;
  EarleyParser p(&automaton_);
  for (uint32_t n = 0; n < automaton_.nodes.size(); ++n) {
    if (!automaton_.nodes[n].has_bytes()) continue;
    auto [it, fresh] = mask_of_class.emplace(cls[n], static_cast<int32_t>(masks_.size()));
    if (fresh) masks_.push_back(classify(automaton_, vocab_, n, p));
    node_mask_[n] = it->second;
  }
}

size_t CompiledGrammar::memory_bytes() const {
  size_t total = 0;
  for (const auto& m : masks_)
    total += 4 * (m.accepted_bits.size() + m.accepted_ids.size() + m.uncertain.size());
  return total;
}

}  // namespace deepinfer::structured
