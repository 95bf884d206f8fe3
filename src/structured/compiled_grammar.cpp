#include <algorithm>
#include <atomic>
#include <bitset>
#include <map>
#include <span>
#include <string_view>

#include "core/thread_pool.h"
#include "structured/structured.h"

namespace deepinfer::structured {

namespace {

// Fast path: greedily look for one derivation of the whole token that stays inside the rule of
// `node` (entering and leaving sub-rules, never completing the rule itself). Finding one proves
// the token is accepted in any context; failing proves nothing (the Earley walk decides).
// The walk is deterministic byte by byte, so consecutive sorted tokens resume from the state after
// their common prefix: one state per byte of the current token, the sub-rule stack kept as a
// persistent list (entries made after a resumed position are dropped with it).
class GreedyWalk {
 public:
  GreedyWalk(const Automaton& a, uint32_t node) : a_(a) {
    states_.push_back({node, kNone, 0, 0});
  }

  // lcp: bytes tok shares with the previous token passed (the sorted vocab's lcp_prev).
  bool accepts(std::string_view tok, size_t lcp) {
    size_t l = std::min(lcp, ok_len_);
    State s = states_[l];
    links_.resize(s.links);
    ok_len_ = l;
    if (states_.size() < tok.size() + 1) states_.resize(tok.size() + 1);
    for (size_t i = l; i < tok.size(); ++i) {
      if (!step(s, static_cast<uint8_t>(tok[i]))) return false;
      s.links = static_cast<uint32_t>(links_.size());
      states_[i + 1] = s;
      ok_len_ = i + 1;
    }
    return true;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct State {
    uint32_t node, top;  // top: index into links_ of the innermost return target, or kNone
    uint32_t depth;      // entries on the stack
    uint32_t links;      // links_.size() when this state was made
  };
  struct Link {
    uint32_t target, next;
  };

  bool step(State& s, uint8_t b) {
    for (;;) {
      uint32_t t = a_.step(s.node, b);
      if (t != UINT32_MAX) {
        s.node = t;
        return true;
      }
      const FsmNode& n = a_.nodes[s.node];
      if (a_.rule_perm[n.rule] >= 0) return false;  // member sets need the Earley walk
      bool entered = false;
      if (s.depth < 16) {
        for (uint32_t e = n.ref_begin; e < n.ref_end; ++e) {
          const RefEdge& r = a_.ref_edges[e];
          if (a_.counted(r.rule)) continue;  // its count needs the Earley walk
          const uint32_t start = a_.rule_start[r.rule];
          if (a_.step(start, b) != UINT32_MAX) {
            links_.push_back({r.target, s.top});
            s.top = static_cast<uint32_t>(links_.size() - 1);
            ++s.depth;
            s.node = start;
            entered = true;
            break;
          }
        }
      }
      if (entered) continue;
      if (n.accepting && s.top != kNone) {
        s.node = links_[s.top].target;
        s.top = links_[s.top].next;
        --s.depth;
        continue;
      }
      return false;
    }
  }

  const Automaton& a_;
  std::vector<State> states_;  // states_[k]: after the first k bytes of the last token
  std::vector<Link> links_;
  size_t ok_len_ = 0;  // states_[0..ok_len_] are valid
};

// Classifies the sorted tokens whose first byte is in [b_lo, b_hi) for one scanable node, in the
// node's rule only (parents unknown): accepted = consumed entirely inside the rule; uncertain =
// fails after the rule could complete (the parent decides); otherwise rejected. Walks the sorted
// vocab reusing the parser's sets for the common prefix with the previous token and skipping
// whole trie subtrees on failure.
struct Classified {
  std::vector<int32_t> accepted;   // ids
  std::vector<int32_t> uncertain;  // sorted indices, ascending
};

void classify_range(const Automaton& a, const TokenVocab& vocab, uint32_t node, const std::bitset<256>& first,
                    int32_t i_lo, int32_t i_hi, EarleyParser& p, Classified& out) {
  p.reset(node, a.counted(a.nodes[node].rule) ? kUncounted : 0);
  GreedyWalk greedy(a, node);
  std::string cur;          // the bytes currently pushed on the parser
  std::string fail_prefix;  // bytes up to and including the last failing byte
  bool fail_uncertain = false;
  for (int32_t i = i_lo; i < i_hi;) {
    const std::string_view tok = vocab.sorted_view(i);
    const uint8_t b0 = static_cast<uint8_t>(tok[0]);
    if (!first.test(b0)) {  // the node cannot read this first byte: rejected
      i = vocab.first_byte_begin(b0 + 1);
      continue;
    }
    // The previous token walked is i - 1, or a token whose subtree ended at i, or one with
    // another first byte: either way lcp_prev(i) bytes are shared.
    if (greedy.accepts(tok, i == i_lo ? 0 : vocab.lcp_prev(i))) {
      out.accepted.push_back(vocab.sorted_id(i++));
      continue;
    }
    bool failed, uncertain;
    if (!fail_prefix.empty() && tok.substr(0, fail_prefix.size()) == fail_prefix) {
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
        fail_prefix.assign(tok.substr(0, cur.size() + 1));
        fail_uncertain = uncertain;
      }
    }
    if (!failed) {
      out.accepted.push_back(vocab.sorted_id(i++));
      continue;
    }
    // Every token extending this one fails at the same byte with the same outcome.
    const int32_t skip = std::min(vocab.subtree_end(i), i_hi);
    if (uncertain)
      for (int32_t k = i; k < skip; ++k) out.uncertain.push_back(k);
    i = skip;
  }
}

std::bitset<256> first_bytes(const Automaton& a, uint32_t node, EarleyParser& p) {
  p.reset(node);
  std::bitset<256> first;
  for (const EarleyItem* it = p.begin(); it != p.end(); ++it) {
    const FsmNode& n = a.nodes[it->node];
    for (uint32_t e = n.byte_begin; e < n.byte_end; ++e)
      for (int b = a.byte_edges[e].lo; b <= a.byte_edges[e].hi; ++b) first.set(b);
  }
  return first;
}

// parts: the mask's classified ranges, in sorted-vocab order.
StateMask make_mask(const std::vector<const Classified*>& parts, size_t vocab_size) {
  StateMask m;
  size_t n_acc = 0, n_unc = 0;
  for (const Classified* c : parts) {
    n_acc += c->accepted.size();
    n_unc += c->uncertain.size();
  }
  m.uncertain.reserve(n_unc);
  for (const Classified* c : parts) m.uncertain.insert(m.uncertain.end(), c->uncertain.begin(), c->uncertain.end());
  const size_t words = (vocab_size + 31) / 32;
  if (n_acc > words) {
    m.accepted_bits.assign(words, 0);
    for (const Classified* c : parts)
      for (int32_t id : c->accepted) m.accepted_bits[id >> 5] |= 1u << (id & 31);
  } else {
    m.accepted_ids.reserve(n_acc);
    for (const Classified* c : parts) m.accepted_ids.insert(m.accepted_ids.end(), c->accepted.begin(), c->accepted.end());
    std::sort(m.accepted_ids.begin(), m.accepted_ids.end());
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
  std::vector<uint32_t> cls(n), next(n), sig, offset(n + 1);
  for (size_t i = 0; i < n; ++i) cls[i] = a.nodes[i].accepting | a.char_boundary[i] << 1 | a.counted(a.nodes[i].rule) << 2;
  size_t slots = 16;
  while (slots < 2 * n) slots *= 2;
  std::vector<uint32_t> table(slots);  // node + 1 of each distinct signature, 0 = empty
  size_t num = 0;
  while (true) {
    // Signatures of all nodes in one buffer: class, byte edges (lo, hi, target class), refs.
    sig.clear();
    for (size_t i = 0; i < n; ++i) {
      offset[i] = static_cast<uint32_t>(sig.size());
      const FsmNode& nd = a.nodes[i];
      sig.push_back(cls[i]);
      for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) {
        const ByteEdge& b = a.byte_edges[e];
        sig.insert(sig.end(), {b.lo, b.hi, cls[b.target]});
      }
      sig.push_back(UINT32_MAX);
      for (uint32_t e = nd.ref_begin; e < nd.ref_end; ++e)
        sig.insert(sig.end(), {a.ref_edges[e].rule, cls[a.ref_edges[e].target]});
    }
    offset[n] = static_cast<uint32_t>(sig.size());
    auto span_of = [&](size_t i) { return std::span<const uint32_t>(sig.data() + offset[i], offset[i + 1] - offset[i]); };
    std::fill(table.begin(), table.end(), 0);
    size_t ids = 0;
    for (size_t i = 0; i < n; ++i) {
      const auto si = span_of(i);
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (uint32_t x : si) h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
      size_t slot = (h ^ (h >> 31)) & (slots - 1);
      for (;; slot = (slot + 1) & (slots - 1)) {
        if (table[slot] == 0) {
          table[slot] = static_cast<uint32_t>(i + 1);
          next[i] = static_cast<uint32_t>(ids++);
          break;
        }
        const auto sj = span_of(table[slot] - 1);
        if (std::equal(si.begin(), si.end(), sj.begin(), sj.end())) {
          next[i] = next[table[slot] - 1];
          break;
        }
      }
    }
    cls.swap(next);
    if (ids == num) return cls;
    num = ids;
  }
}

// Work for the parallel classification: one scanable node's tokens in sorted-vocab range [lo, hi).
struct ClassifyWork {
  uint32_t mask;
  int32_t lo, hi;
};
constexpr int32_t kClassifyChunk = 4096;  // tokens (with a readable first byte) per work item

void CompiledGrammar::build_masks() {
  const Automaton& a = automaton_;
  node_mask_.assign(a.nodes.size(), -1);
  std::vector<uint32_t> cls = equivalent_nodes(a);
  // Nodes of one rule in one class are interchangeable in any context (matcher's cache key).
  canonical_.resize(a.nodes.size());
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> canon_of;
  for (uint32_t n = 0; n < a.nodes.size(); ++n) canonical_[n] = canon_of.emplace(std::make_pair(a.nodes[n].rule, cls[n]), n).first->second;
  std::map<uint32_t, int32_t> mask_of_class;
  std::vector<uint32_t> reps;  // the node classified for each mask
  for (uint32_t n = 0; n < a.nodes.size(); ++n) {
    if (!a.nodes[n].has_bytes()) continue;
    auto [it, fresh] = mask_of_class.emplace(cls[n], static_cast<int32_t>(reps.size()));
    if (fresh) reps.push_back(n);
    node_mask_[n] = it->second;
  }
  // Split every node's readable tokens into chunks of one first byte; workers take chunks as
  // they finish others. A node without sub-rules (outside counted rules) classifies the tokens
  // of first byte b exactly like any other such node whose b edge leads to the same class: the
  // walk after b only sees that target. Such ranges are classified once and shared (e.g. the
  // nodes of the extra-key trie differ only on the bytes of the declared names).
  EarleyParser p(&a);
  std::vector<std::bitset<256>> first(reps.size());
  std::vector<ClassifyWork> work;
  std::vector<std::vector<size_t>> mask_parts(reps.size());  // work indices, in vocab order
  using Key = std::pair<uint32_t, uint32_t>;  // (first byte, class of its target)
  std::map<Key, std::pair<size_t, size_t>> shared;  // -> its works [first, last)
  std::map<Key, int> uses;
  auto key_of = [&](uint32_t m, int b) {
    const FsmNode& rep = a.nodes[reps[m]];
    if (rep.ref_begin != rep.ref_end || a.counted(rep.rule)) return Key{0, UINT32_MAX};
    return Key{uint32_t(b), cls[a.step(reps[m], uint8_t(b))]};
  };
  for (uint32_t m = 0; m < reps.size(); ++m) {
    first[m] = first_bytes(a, reps[m], p);
    for (int b = 0; b < 256; ++b)
      if (first[m].test(b) && key_of(m, b).second != UINT32_MAX) ++uses[key_of(m, b)];
  }
  for (uint32_t m = 0; m < reps.size(); ++m) {
    int32_t start = -1;  // a chunk of unshared ranges being gathered
    auto flush = [&](int32_t end) {
      if (start < 0 || start == end) return;
      mask_parts[m].push_back(work.size());
      work.push_back({m, start, end});
      start = -1;
    };
    for (int b = 0; b < 256; ++b) {
      if (!first[m].test(b)) continue;
      int32_t s = vocab_.first_byte_begin(b);
      const int32_t e = vocab_.first_byte_begin(b + 1);
      if (s == e) continue;
      const Key key = key_of(m, b);
      if (key.second == UINT32_MAX || uses[key] < 2) {
        for (; s < e;) {
          if (start >= 0 && s - start >= kClassifyChunk) flush(s);
          if (start < 0) start = s;
          const int32_t stop = std::min(e, start + kClassifyChunk);
          s = stop;
          if (stop - start == kClassifyChunk) flush(stop);
        }
        continue;
      }
      flush(s);
      auto it = shared.find(key);
      if (it != shared.end()) {
        for (size_t w = it->second.first; w < it->second.second; ++w) mask_parts[m].push_back(w);
        continue;
      }
      const size_t w0 = work.size();
      for (; s < e; s += kClassifyChunk) {
        mask_parts[m].push_back(work.size());
        work.push_back({m, s, std::min(e, s + kClassifyChunk)});
      }
      shared[key] = {w0, work.size()};
    }
    flush(vocab_.first_byte_begin(256));
  }
  // Waking the pool costs more than a few chunks of work: small grammars stay on this thread.
  int64_t tokens = 0;
  for (const ClassifyWork& w : work) tokens += w.hi - w.lo;
  const int64_t workers = std::min<int64_t>(cpu_thread_count(), tokens / kClassifyChunk + 1);
  std::vector<Classified> parts(work.size());
  std::atomic<size_t> next{0};
  parallel_for(workers, [&](int64_t, int64_t) {
    EarleyParser wp(&a);
    for (size_t w; (w = next.fetch_add(1)) < work.size();)
      classify_range(a, vocab_, reps[work[w].mask], first[work[w].mask], work[w].lo, work[w].hi, wp, parts[w]);
  });
  masks_.resize(reps.size());
  next = 0;
  parallel_for(workers, [&](int64_t, int64_t) {
    std::vector<const Classified*> mine;
    for (size_t m; (m = next.fetch_add(1)) < reps.size();) {
      mine.clear();
      for (size_t w : mask_parts[m]) mine.push_back(&parts[w]);
      masks_[m] = make_mask(mine, vocab_.size());
      if (a.counted(a.nodes[reps[m]].rule)) add_char_counts(reps[m], masks_[m]);
    }
  });
}

// The characters an accepted token adds from `node` of a counted rule: the bytes of its
// (deterministic, in-rule) path that leave a char_boundary node (a started character counts).
void CompiledGrammar::add_char_counts(uint32_t node, StateMask& m) const {
  const Automaton& a = automaton_;
  // Characters a token needs from the bound: those it starts plus the fewest still needed
  // after each step, at most (up to where the rule's path stops).
  auto chars_of = [&](std::string_view bytes) {
    int32_t c = 0, need = static_cast<int32_t>(std::min<uint32_t>(a.chars_to_end[node], INT32_MAX / 2));
    uint32_t n = node;
    for (char b : bytes) {
      const uint32_t t = a.step(n, static_cast<uint8_t>(b));
      if (t == UINT32_MAX) break;
      c += a.char_boundary[n];
      need = std::max<int32_t>(need, c + static_cast<int32_t>(std::min<uint32_t>(a.chars_to_end[t], INT32_MAX / 2)));
      n = t;
    }
    return std::max(c, need);
  };
  auto chars = [&](int32_t id) { return chars_of(vocab_.bytes(id)); };
  for (int32_t idx : m.uncertain) m.uncertain_chars = std::max<uint32_t>(m.uncertain_chars, chars_of(vocab_.sorted_view(idx)));
  if (m.accepted_bits.empty()) {
    for (int32_t id : m.accepted_ids) m.accepted_chars.push_back(chars(id));
    return;
  }
  constexpr int32_t kBitsets = 24;  // at_most_bits for 0..23 characters left; longer tokens listed
  m.at_most_bits.assign(kBitsets, std::vector<uint32_t>(m.accepted_bits.size(), 0));
  for (size_t w = 0; w < m.accepted_bits.size(); ++w)
    for (uint32_t bits = m.accepted_bits[w]; bits; bits &= bits - 1) {
      const int32_t id = static_cast<int32_t>(w * 32 + __builtin_ctz(bits));
      const int32_t c = chars(id);
      if (c >= kBitsets) m.long_ids.push_back({id, c});
      for (int32_t r = c; r < kBitsets; ++r) m.at_most_bits[r][w] |= 1u << (id & 31);
    }
}

void StateMask::or_counted(uint32_t left, uint32_t* words, std::vector<uint32_t>& tmp) const {
  if (accepted_bits.empty()) {
    for (size_t i = 0; i < accepted_ids.size(); ++i)
      if (uint32_t(accepted_chars[i]) <= left) words[accepted_ids[i] >> 5] |= 1u << (accepted_ids[i] & 31);
    return;
  }
  const size_t n = accepted_bits.size();
  if (left < at_most_bits.size()) {
    for (size_t w = 0; w < n; ++w) words[w] |= at_most_bits[left][w];
    return;
  }
  tmp.assign(accepted_bits.begin(), accepted_bits.end());
  for (auto [id, c] : long_ids)
    if (uint32_t(c) > left) tmp[id >> 5] &= ~(1u << (id & 31));
  for (size_t w = 0; w < n; ++w) words[w] |= tmp[w];
}

size_t CompiledGrammar::memory_bytes() const {
  size_t total = 0;
  for (const auto& m : masks_)
    total += 4 * (m.accepted_bits.size() + m.accepted_ids.size() + m.uncertain.size() + m.accepted_chars.size() +
                  2 * m.long_ids.size() + m.at_most_bits.size() * m.accepted_bits.size());
  return total;
}

}  // namespace deepinfer::structured
