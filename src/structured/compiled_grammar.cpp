#include <algorithm>
#include <atomic>
#include <bitset>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>

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

// The CharCounts of counted nodes, one copy of each (the nodes of a product of patterns mostly
// count alike); shared by the classification's workers.
class CountsCache {
 public:
  std::shared_ptr<const StateMask::CharCounts> intern(StateMask::CharCounts c) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t x : c.at_most_bits) h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
    for (auto [id, n] : c.long_ids) h = (h ^ (uint64_t(id) << 32 | uint32_t(n))) * 0xbf58476d1ce4e5b9ull;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto [it, end] = by_hash_.equal_range(h); it != end; ++it)
      if (*it->second == c) return it->second;
    return by_hash_.emplace(h, std::make_shared<const StateMask::CharCounts>(std::move(c)))->second;
  }

 private:
  std::mutex mu_;
  std::unordered_multimap<uint64_t, std::shared_ptr<const StateMask::CharCounts>> by_hash_;
};

// The characters an accepted token adds from `node` of a counted rule: the bytes of its
// (deterministic, in-rule) path that leave a char_boundary node (a started character counts).
void add_char_counts(const Automaton& a, const TokenVocab& vocab_, uint32_t node, StateMask& m, CountsCache& cache) {
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
  if (!m.accepted_bits) {
    for (int32_t id : m.accepted_ids) m.accepted_chars.push_back(chars(id));
    return;
  }
  constexpr uint32_t kSmall = StateMask::CharCounts::kSmall;
  const std::vector<uint32_t>& accepted = *m.accepted_bits;
  const size_t words = accepted.size();
  StateMask::CharCounts counts;
  counts.at_most_bits.assign(kSmall * words, 0);
  // The accepted tokens in sorted order, each walk resumed after the prefix it shares with the
  // last one walked (chars_of's steps, one per trie edge instead of one per byte).
  struct Step {
    uint32_t n;
    int32_t c, need;
  };
  std::vector<Step> at{{node, 0, static_cast<int32_t>(std::min<uint32_t>(a.chars_to_end[node], INT32_MAX / 2))}};
  size_t valid = 0;              // depth up to which `at` holds the last walked token's path
  uint32_t shared = UINT32_MAX;  // common prefix with the last walked token
  for (int32_t idx = 0; idx < vocab_.num_sorted(); ++idx) {
    shared = std::min<uint32_t>(shared, vocab_.lcp_prev(idx));
    const int32_t id = vocab_.sorted_id(idx);
    if (!(accepted[id >> 5] >> (id & 31) & 1)) continue;
    const std::string_view bytes = vocab_.sorted_view(idx);
    size_t d = std::min<size_t>(shared, valid);
    if (at.size() < bytes.size() + 1) at.resize(bytes.size() + 1);
    for (; d < bytes.size(); ++d) {
      const Step& s = at[d];
      const uint32_t t = a.step(s.n, static_cast<uint8_t>(bytes[d]));
      if (t == UINT32_MAX) break;
      const int32_t c = s.c + a.char_boundary[s.n];
      at[d + 1] = {t, c, std::max<int32_t>(s.need, c + static_cast<int32_t>(std::min<uint32_t>(a.chars_to_end[t], INT32_MAX / 2)))};
    }
    valid = d;
    shared = UINT32_MAX;
    const int32_t c = std::max(at[d].c, at[d].need);
    if (uint32_t(c) >= kSmall) counts.long_ids.push_back({id, c});
    else counts.at_most_bits[c * words + (id >> 5)] |= 1u << (id & 31);
  }
  std::sort(counts.long_ids.begin(), counts.long_ids.end());
  for (size_t r = 1; r < kSmall; ++r)  // at most r: exactly r, or at most r - 1
    for (size_t w = 0; w < words; ++w) counts.at_most_bits[r * words + w] |= counts.at_most_bits[(r - 1) * words + w];
  m.counts = cache.intern(std::move(counts));
}

}  // namespace


// Nodes with the same future (same accepting flag, same edges to equivalent nodes, any rule)
// classify every token the same way: partition refinement finds them so each distinct node is
// classified once (e.g. the UTF-8 continuation states of every string in a schema). Only nodes
// an edge of which leads to a node that moved are re-signed in a round (a plain Moore round
// re-signs all of them, and long chains such as a schema's many property names need hundreds of
// rounds: seconds on large schemas); a class's other members keep one shared signature.
std::vector<uint32_t> equivalent_nodes(const Automaton& a) {
  const uint32_t n = static_cast<uint32_t>(a.nodes.size());
  std::vector<uint32_t> pred_begin(n + 1, 0), preds;  // predecessors by byte or rule edge
  auto for_targets = [&](uint32_t i, auto&& f) {
    const FsmNode& nd = a.nodes[i];
    for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) f(a.byte_edges[e].target);
    for (uint32_t e = nd.ref_begin; e < nd.ref_end; ++e) f(a.ref_edges[e].target);
  };
  for (uint32_t i = 0; i < n; ++i) for_targets(i, [&](uint32_t t) { ++pred_begin[t + 1]; });
  for (uint32_t i = 0; i < n; ++i) pred_begin[i + 1] += pred_begin[i];
  preds.resize(pred_begin[n]);
  {
    std::vector<uint32_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    for (uint32_t i = 0; i < n; ++i) for_targets(i, [&](uint32_t t) { preds[fill[t]++] = i; });
  }
  std::vector<uint32_t> cls(n), pos(n);
  std::vector<std::vector<uint32_t>> members;
  {
    // Initial classes by everything but the targets: the flags, the byte ranges and the rules
    // referenced (signatures compare those too, so the final classes are the same; starting
    // finer saves rounds). A hash collision only starts two nodes in one class.
    std::unordered_map<uint64_t, uint32_t> id;
    for (uint32_t i = 0; i < n; ++i) {
      const FsmNode& nd = a.nodes[i];
      uint64_t key = (nd.accepting | a.char_boundary[i] << 1 | a.counted(nd.rule) << 2) * 0x9e3779b97f4a7c15ull;
      for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) key = (key ^ (a.byte_edges[e].lo << 8 | a.byte_edges[e].hi)) * 0xbf58476d1ce4e5b9ull;
      key = (key ^ 0x10000) * 0xbf58476d1ce4e5b9ull;
      for (uint32_t e = nd.ref_begin; e < nd.ref_end; ++e) key = (key ^ a.ref_edges[e].rule) * 0xbf58476d1ce4e5b9ull;
      cls[i] = id.emplace(key, static_cast<uint32_t>(id.size())).first->second;
      if (cls[i] == members.size()) members.emplace_back();
      pos[i] = static_cast<uint32_t>(members[cls[i]].size());
      members[cls[i]].push_back(i);
    }
  }
  std::vector<uint32_t> sig, offset, dirty(n), stamp(n, 0);
  for (uint32_t i = 0; i < n; ++i) dirty[i] = i;
  std::vector<std::pair<uint32_t, uint32_t>> moves;  // (node, new class), applied after the round
  std::vector<uint64_t> hash;
  std::vector<uint32_t> order, sig_of;  // dirty index -> its signature's slot in offset
  auto sign = [&](uint32_t i) {  // appends node i's signature; returns its slot
    const FsmNode& nd = a.nodes[i];
    offset.push_back(static_cast<uint32_t>(sig.size()));
    for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) {
      const ByteEdge& b = a.byte_edges[e];
      sig.insert(sig.end(), {b.lo, b.hi, cls[b.target]});
    }
    sig.push_back(UINT32_MAX);
    for (uint32_t e = nd.ref_begin; e < nd.ref_end; ++e) sig.insert(sig.end(), {a.ref_edges[e].rule, cls[a.ref_edges[e].target]});
    offset.push_back(static_cast<uint32_t>(sig.size()));
    return static_cast<uint32_t>(offset.size() / 2 - 1);
  };
  auto span_of = [&](uint32_t slot) { return std::span<const uint32_t>(sig.data() + offset[2 * slot], offset[2 * slot + 1] - offset[2 * slot]); };
  auto same = [&](uint32_t x, uint32_t y) { const auto p = span_of(x), q = span_of(y); return std::equal(p.begin(), p.end(), q.begin(), q.end()); };
  for (uint32_t round = 1; !dirty.empty(); ++round) {
    sig.clear();
    offset.clear();
    sig_of.clear();
    hash.clear();
    for (uint32_t i : dirty) {
      stamp[i] = round;
      sig_of.push_back(sign(i));
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (uint32_t x : span_of(sig_of.back())) h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
      hash.push_back(h);
    }
    order.resize(dirty.size());
    for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
      return std::tie(cls[dirty[x]], hash[x], x) < std::tie(cls[dirty[y]], hash[y], y);
    });
    moves.clear();
    for (size_t b = 0; b < order.size();) {  // one class's dirty members: order[b, e)
      const uint32_t c = cls[dirty[order[b]]];
      size_t e = b;
      while (e < order.size() && cls[dirty[order[e]]] == c) ++e;
      // Groups of equal signatures: (first dirty index, count); the kept one stays in c.
      std::vector<std::pair<uint32_t, uint32_t>> groups;
      std::vector<uint32_t> group_of(e - b);
      for (size_t k = b; k < e; ++k) {
        size_t g = groups.size();
        for (size_t h = groups.size(); h-- > 0;) {
          if (hash[groups[h].first] != hash[order[k]]) break;  // sorted by hash: only the last run
          if (same(sig_of[groups[h].first], sig_of[order[k]])) { g = h; break; }
        }
        if (g == groups.size()) groups.push_back({order[k], 0});
        ++groups[g].second;
        group_of[k - b] = static_cast<uint32_t>(g);
      }
      size_t keep = 0;
      if (e - b < members[c].size()) {  // members not re-signed share one signature: theirs stays
        keep = groups.size();
        uint32_t other = 0;
        while (stamp[members[c][other]] == round) ++other;
        const uint32_t ref = sign(members[c][other]);
        for (size_t g = 0; g < groups.size() && keep == groups.size(); ++g)
          if (same(sig_of[groups[g].first], ref)) keep = g;
      } else {
        for (size_t g = 1; g < groups.size(); ++g)
          if (groups[g].second > groups[keep].second) keep = g;
      }
      std::vector<uint32_t> new_id(groups.size(), c);
      for (size_t g = 0; g < groups.size(); ++g)
        if (g != keep) {
          new_id[g] = static_cast<uint32_t>(members.size());
          members.emplace_back();
        }
      for (size_t k = b; k < e; ++k)
        if (new_id[group_of[k - b]] != c) moves.push_back({dirty[order[k]], new_id[group_of[k - b]]});
      b = e;
    }
    dirty.clear();
    for (auto [i, c] : moves) {  // out of its class (swap with the last member), into c
      std::vector<uint32_t>& from = members[cls[i]];
      pos[from.back()] = pos[i];
      from[pos[i]] = from.back();
      from.pop_back();
      cls[i] = c;
      pos[i] = static_cast<uint32_t>(members[c].size());
      members[c].push_back(i);
    }
    for (auto [i, c] : moves)
      for (uint32_t p = pred_begin[i]; p < pred_begin[i + 1]; ++p)
        if (stamp[preds[p]] != round + 1) {
          stamp[preds[p]] = round + 1;
          dirty.push_back(preds[p]);
        }
  }
  return cls;
}

namespace {

struct SigHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t x : v) h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
  }
};

constexpr size_t kMaxSharedPart = 64;  // automaton states of a part shared across grammars

// The automaton part a node reaches (accepting flags, byte edges, and in counted rules the
// character positions and distances to the end, in BFS order): a node's token class depends on
// nothing else when the part refers to no rule (the count of a counted rule is applied when a
// mask is filled). Empty when it does refer to one, or has more than kMaxSharedPart states.
std::vector<uint32_t> part_signature(const Automaton& a, uint32_t node) {
  std::vector<uint32_t> order{node}, sig;
  std::unordered_map<uint32_t, uint32_t> index{{node, 0}};
  for (size_t k = 0; k < order.size(); ++k) {
    const FsmNode& n = a.nodes[order[k]];
    if (n.ref_begin != n.ref_end) return {};
    const uint32_t counted = a.counted(n.rule) ? 2u | a.char_boundary[order[k]] << 2 : 0u;
    sig.insert(sig.end(), {n.accepting | counted, n.byte_end - n.byte_begin});
    if (counted) sig.push_back(std::min<uint32_t>(a.chars_to_end[order[k]], UINT32_MAX / 2));
    for (uint32_t e = n.byte_begin; e < n.byte_end; ++e) {
      const ByteEdge& b = a.byte_edges[e];
      auto [it, fresh] = index.emplace(b.target, static_cast<uint32_t>(order.size()));
      if (fresh) {
        if (order.size() == kMaxSharedPart) return {};
        order.push_back(b.target);
      }
      sig.insert(sig.end(), {b.lo, b.hi, it->second});
    }
  }
  return sig;
}

}  // namespace

// By part signature: whole masks, and (first byte, then the target's signature) ranges of one
// first byte. Bounded: past kMaxBytes nothing more is kept (grammars then keep their own).
struct SharedClasses {
  static constexpr size_t kMaxBytes = size_t(64) << 20;
  std::mutex mu;
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const StateMask>, SigHash> masks;
  std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const Classified>, SigHash> ranges;
  size_t bytes = 0;
};

std::shared_ptr<SharedClasses> make_shared_classes() { return std::make_shared<SharedClasses>(); }

// What the lazy classification keeps: the masks computed so far, the ranges shared between
// nodes, one copy of each accepted bitset and count table.
struct CompiledGrammar::Lazy {
  explicit Lazy(const Automaton* a, size_t masks) : parser(a), masks(masks) {}
  std::mutex mu;  // held while a mask is computed
  EarleyParser parser;
  std::vector<std::shared_ptr<const StateMask>> masks;
  std::unordered_map<uint32_t, std::vector<uint32_t>> signatures;  // by node, memo of part_signature
  // The parts (by first byte) and bitset of the last shareable mask built from scratch: the
  // nodes of an extra-key DFA share nearly all their parts, so their bitsets are that one's
  // with the few differing parts' tokens cleared and set.
  std::vector<const Classified*> template_parts;
  std::shared_ptr<const std::vector<uint32_t>> template_bits;
  // A node without sub-rules (outside counted rules) classifies the tokens of first byte b
  // exactly like any other such node whose b edge leads to the same class: the walk after b only
  // sees that target. Key: b << 32 | the target's class. (The nodes of an extra-key DFA differ
  // only on the bytes of the declared names.)
  std::unordered_map<uint64_t, std::shared_ptr<const Classified>> shared;
  // Masks accepting the same tokens share one bitset (the nodes of an extra-key DFA mostly do).
  std::unordered_multimap<uint64_t, std::shared_ptr<const std::vector<uint32_t>>> bitsets;
  CountsCache counts;
  size_t computed = 0;
  int64_t work = 0;  // tokens walked so far (the warm-up's budget)
};

CompiledGrammar::CompiledGrammar(const Grammar& g, const TokenVocab& vocab, int64_t warm_tokens)
    : vocab_(vocab), automaton_(build_automaton(g)) {
  const Automaton& a = automaton_;
  node_mask_.assign(a.nodes.size(), -1);
  cls_ = equivalent_nodes(a);
  // Nodes of one rule in one class are interchangeable in any context (matcher's cache key).
  canonical_.resize(a.nodes.size());
  // Arrays by class (a large schema has 10^5 nodes, its classes span many rules): the first node
  // of each class in the current rule (a rule's nodes are contiguous, build_automaton appends
  // them rule by rule), and each class's mask.
  const uint32_t num_classes = cls_.empty() ? 0 : *std::max_element(cls_.begin(), cls_.end()) + 1;
  std::vector<uint32_t> first(num_classes), first_rule(num_classes, UINT32_MAX);
  std::vector<int32_t> mask_of_class(num_classes, -1);
  for (uint32_t n = 0; n < a.nodes.size(); ++n) {
    const uint32_t c = cls_[n];
    if (first_rule[c] != a.nodes[n].rule) first_rule[c] = a.nodes[n].rule, first[c] = n;
    canonical_[n] = first[c];
    if (!a.nodes[n].has_bytes()) continue;
    if (mask_of_class[c] < 0) mask_of_class[c] = static_cast<int32_t>(reps_.size()), reps_.push_back(n);
    node_mask_[n] = mask_of_class[c];
  }
  ready_ = std::make_unique<std::atomic<const StateMask*>[]>(reps_.size());
  for (size_t m = 0; m < reps_.size(); ++m) ready_[m].store(nullptr, std::memory_order_relaxed);
  lazy_ = std::make_unique<Lazy>(&automaton_, reps_.size());
  if (a.nodes.size() <= kWarmNodes) warm_up(warm_tokens);
}

// The classes of the nodes nearest the root (breadth first through byte and rule edges), while
// they cost under `budget` token walks: a small grammar is then classified at compile time (no
// first use while decoding); a large one (over kWarmNodes nodes) is left to its first uses, so
// the slowest compiles do not grow.
void CompiledGrammar::warm_up(int64_t budget) {
  const Automaton& a = automaton_;
  std::vector<uint8_t> seen(a.nodes.size(), 0);
  std::vector<uint32_t> queue{a.rule_start[a.root_rule]};
  seen[queue[0]] = 1;
  auto visit = [&](uint32_t n) {
    if (!seen[n]) seen[n] = 1, queue.push_back(n);
  };
  for (size_t k = 0; k < queue.size() && lazy_->work < budget; ++k) {
    const uint32_t n = queue[k];
    mask(n);
    const FsmNode& nd = a.nodes[n];
    for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) visit(a.byte_edges[e].target);
    for (uint32_t e = nd.ref_begin; e < nd.ref_end; ++e) visit(a.rule_start[a.ref_edges[e].rule]), visit(a.ref_edges[e].target);
  }
}

CompiledGrammar::~CompiledGrammar() = default;

// Classifies every token at mask m's node (see classify_range): the tokens of each first byte the
// node reads, from the shared ranges where they can be, then the mask's accepted set as a bitset
// (when large: one copy per distinct set) or an id list.
const StateMask* CompiledGrammar::compute_mask(int32_t m) const {
  Lazy& z = *lazy_;
  std::lock_guard<std::mutex> lock(z.mu);
  if (const StateMask* done = ready_[m].load(std::memory_order_relaxed)) return done;  // another thread's
  const Automaton& a = automaton_;
  SharedClasses& global = vocab_.shared_classes();
  auto signature = [&](uint32_t n) -> const std::vector<uint32_t>& {
    auto it = z.signatures.find(n);
    return it != z.signatures.end() ? it->second : z.signatures.emplace(n, part_signature(a, n)).first->second;
  };
  auto publish = [&](std::shared_ptr<const StateMask> mask) {
    const StateMask* out = (z.masks[m] = std::move(mask)).get();
    ++z.computed;
    ready_[m].store(out, std::memory_order_release);
    return out;
  };
  const uint32_t rep = reps_[m];
  const std::vector<uint32_t>& sig = signature(rep);
  if (!sig.empty()) {
    std::lock_guard<std::mutex> g(global.mu);
    auto it = global.masks.find(sig);
    if (it != global.masks.end()) return publish(it->second);
  }
  const FsmNode& node = a.nodes[rep];
  const std::bitset<256> first = first_bytes(a, rep, z.parser);
  const bool shareable = node.ref_begin == node.ref_end && !a.counted(node.rule);
  std::vector<std::shared_ptr<const Classified>> parts;  // in sorted-vocab order
  std::vector<const Classified*> by_byte(shareable ? 256 : 0, nullptr);
  auto classify = [&](int lo, int hi) {
    z.work += vocab_.first_byte_begin(hi) - vocab_.first_byte_begin(lo);
    auto c = std::make_shared<Classified>();
    classify_range(a, vocab_, rep, first, vocab_.first_byte_begin(lo), vocab_.first_byte_begin(hi), z.parser, *c);
    return c;
  };
  // The tokens of first byte b at a node whose b edge leads to target: the same in every grammar
  // where the target's part reaches no other rule.
  auto global_range = [&](int b, uint32_t target) -> std::shared_ptr<const Classified> {
    std::vector<uint32_t> key = signature(target);
    if (key.empty()) return classify(b, b + 1);
    key.push_back(uint32_t(b));
    {
      std::lock_guard<std::mutex> g(global.mu);
      auto it = global.ranges.find(key);
      if (it != global.ranges.end()) return it->second;
    }
    std::shared_ptr<const Classified> c = classify(b, b + 1);
    std::lock_guard<std::mutex> g(global.mu);
    if (global.bytes < SharedClasses::kMaxBytes && global.ranges.emplace(std::move(key), c).second)
      global.bytes += 4 * (c->accepted.size() + c->uncertain.size()) + 64;
    return c;
  };
  int run = -1;  // first byte of the unshared bytes being gathered into one walk
  auto flush = [&](int end) {
    if (run >= 0) parts.push_back(classify(run, end));
    run = -1;
  };
  for (int b = 0; b < 256; ++b) {
    if (!first.test(b) || vocab_.first_byte_begin(b) == vocab_.first_byte_begin(b + 1)) continue;
    if (!shareable) {
      if (run < 0) run = b;
      continue;
    }
    const uint32_t target = a.step(rep, uint8_t(b));
    std::shared_ptr<const Classified>& local = z.shared[uint64_t(b) << 32 | cls_[target]];
    if (!local) local = global_range(b, target);
    by_byte[b] = local.get();
    parts.push_back(local);
  }
  flush(256);
  auto mask = std::make_shared<StateMask>();
  size_t accepted = 0, uncertain = 0;
  for (const auto& c : parts) accepted += c->accepted.size(), uncertain += c->uncertain.size();
  mask->uncertain.reserve(uncertain);
  for (const auto& c : parts) mask->uncertain.insert(mask->uncertain.end(), c->uncertain.begin(), c->uncertain.end());
  const size_t words = (vocab_.size() + 31) / 32;
  if (accepted > words) {
    auto set = [&](const Classified* c, std::vector<uint32_t>& bits) {
      for (int32_t id : c->accepted) bits[id >> 5] |= 1u << (id & 31);
    };
    size_t differ = 0;  // tokens of the parts where this mask and the template differ
    if (shareable && z.template_bits)
      for (int b = 0; b < 256; ++b)
        if (by_byte[b] != z.template_parts[b])
          differ += (by_byte[b] ? by_byte[b]->accepted.size() : 0) + (z.template_parts[b] ? z.template_parts[b]->accepted.size() : 0);
    std::vector<uint32_t> bits;
    if (shareable && z.template_bits && differ < accepted / 4) {
      bits = *z.template_bits;
      for (int b = 0; b < 256; ++b) {
        if (by_byte[b] == z.template_parts[b]) continue;
        if (const Classified* old = z.template_parts[b])
          for (int32_t id : old->accepted) bits[id >> 5] &= ~(1u << (id & 31));
        if (by_byte[b]) set(by_byte[b], bits);
      }
    } else {
      bits.assign(words, 0);
      for (const auto& c : parts) set(c.get(), bits);
    }
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t w : bits) h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    for (auto [it, end] = z.bitsets.equal_range(h); it != end && !mask->accepted_bits; ++it)
      if (*it->second == bits) mask->accepted_bits = it->second;
    if (!mask->accepted_bits) mask->accepted_bits = z.bitsets.emplace(h, std::make_shared<const std::vector<uint32_t>>(std::move(bits)))->second;
    if (shareable && !(z.template_bits && differ < accepted / 4)) {
      z.template_parts = by_byte;
      z.template_bits = mask->accepted_bits;
    }
  } else {
    mask->accepted_ids.reserve(accepted);
    for (const auto& c : parts) mask->accepted_ids.insert(mask->accepted_ids.end(), c->accepted.begin(), c->accepted.end());
    std::sort(mask->accepted_ids.begin(), mask->accepted_ids.end());
  }
  if (a.counted(node.rule)) add_char_counts(a, vocab_, rep, *mask, z.counts);
  if (!sig.empty()) {
    std::lock_guard<std::mutex> g(global.mu);
    if (global.bytes < SharedClasses::kMaxBytes && global.masks.emplace(sig, mask).second)
      global.bytes += 4 * (mask->accepted_ids.size() + mask->uncertain.size() + (mask->accepted_bits ? words : 0)) + 64;
  }
  return publish(std::move(mask));
}

size_t CompiledGrammar::num_computed_masks() const {
  std::lock_guard<std::mutex> lock(lazy_->mu);
  return lazy_->computed;
}

void StateMask::or_counted(uint32_t left, uint32_t* words, std::vector<uint32_t>& tmp) const {
  if (!accepted_bits) {
    for (size_t i = 0; i < accepted_ids.size(); ++i)
      if (uint32_t(accepted_chars[i]) <= left) words[accepted_ids[i] >> 5] |= 1u << (accepted_ids[i] & 31);
    return;
  }
  const size_t n = accepted_bits->size();
  if (left < CharCounts::kSmall) {
    const uint32_t* src = counts->at_most_bits.data() + left * n;
    for (size_t w = 0; w < n; ++w) words[w] |= src[w];
    return;
  }
  tmp.assign(accepted_bits->begin(), accepted_bits->end());
  for (auto [id, c] : counts->long_ids)
    if (uint32_t(c) > left) tmp[id >> 5] &= ~(1u << (id & 31));
  for (size_t w = 0; w < n; ++w) words[w] |= tmp[w];
}

size_t CompiledGrammar::memory_bytes() const {
  std::lock_guard<std::mutex> lock(lazy_->mu);
  size_t total = 0;
  std::set<const void*> shared;  // counted once
  for (const auto& m : lazy_->masks) {
    if (!m) continue;
    total += 4 * (m->accepted_ids.size() + m->uncertain.size() + m->accepted_chars.size());
    if (m->accepted_bits && shared.insert(m->accepted_bits.get()).second) total += 4 * m->accepted_bits->size();
    if (m->counts && shared.insert(m->counts.get()).second) total += 4 * (m->counts->at_most_bits.size() + 2 * m->counts->long_ids.size());
  }
  for (const auto& [key, c] : lazy_->shared) total += 4 * (c->accepted.size() + c->uncertain.size());
  return total;
}

}  // namespace deepinfer::structured
