#include "structured/fsm.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"

namespace deepinfer::structured {

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) utf8_sequences(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_sequences(0xE000, hi, out);
    return;
  }
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && hi > max) {
      utf8_sequences(lo, max, out);
      utf8_sequences(max + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  // Split until lo and hi differ only in trailing continuation bytes that span the full 80-BF.
  for (int i = 1; i < 4; ++i) {
    uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  append_utf8(a, lo);
  append_utf8(b, hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i)
    seq.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
  out.push_back(std::move(seq));
}

namespace {

constexpr size_t kMaxNfaStates = 400000;  // bounds {m,n} expansion of huge repetition counts

struct Nfa {
  struct State {
    std::vector<uint32_t> eps;
    std::vector<ByteEdge> bytes;
    std::vector<RefEdge> refs;
  };
  std::vector<State> states;
  uint32_t add() {
    check(states.size() < kMaxNfaStates, "grammar too large (repetition bounds expand to more than ",
          kMaxNfaStates, " states)");
    states.emplace_back();
    return static_cast<uint32_t>(states.size() - 1);
  }
};

class NfaBuilder {
 public:
  NfaBuilder(const Grammar& g, Nfa& nfa) : g_(g), nfa_(nfa) {}

  // Builds expr between fresh states; returns {start, end}.
  void build(int id, uint32_t from, uint32_t to) {
    const Expr& e = g_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kEmpty: nfa_.states[from].eps.push_back(to); break;
      case Expr::Kind::kBytes: {
        uint32_t cur = from;
        for (size_t i = 0; i < e.bytes.size(); ++i) {
          uint32_t next = i + 1 == e.bytes.size() ? to : nfa_.add();
          uint8_t b = static_cast<uint8_t>(e.bytes[i]);
          nfa_.states[cur].bytes.push_back({b, b, next});
          cur = next;
        }
        break;
      }
      case Expr::Kind::kClass: {
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
        for (auto [lo, hi] : e.ranges) utf8_sequences(lo, hi, seqs);
        for (auto& s : seqs) {
          uint32_t cur = from;
          for (size_t i = 0; i < s.size(); ++i) {
            uint32_t next = i + 1 == s.size() ? to : nfa_.add();
            nfa_.states[cur].bytes.push_back({s[i].first, s[i].second, next});
            cur = next;
          }
        }
        break;
      }
      case Expr::Kind::kSeq: {
        uint32_t cur = from;
        for (size_t i = 0; i < e.kids.size(); ++i) {
          uint32_t next = i + 1 == e.kids.size() ? to : nfa_.add();
          build(e.kids[i], cur, next);
          cur = next;
        }
        break;
      }
      case Expr::Kind::kAlt:
        for (int k : e.kids) {
          uint32_t s = nfa_.add();
          nfa_.states[from].eps.push_back(s);
          build(k, s, to);
        }
        break;
      case Expr::Kind::kRepeat: {
        uint32_t cur = from;
        for (int i = 0; i < e.min; ++i) {
          uint32_t next = nfa_.add();
          build(e.kids[0], cur, next);
          cur = next;
        }
        if (e.max == kUnbounded) {
          uint32_t loop = nfa_.add();
          nfa_.states[cur].eps.push_back(loop);
          uint32_t body_end = nfa_.add();
          build(e.kids[0], loop, body_end);
          nfa_.states[body_end].eps.push_back(loop);
          nfa_.states[loop].eps.push_back(to);
        } else {
          // x{0,k} as nested optionals: each copy may stop early and jump to `to`.
          for (int i = e.min; i < e.max; ++i) {
            nfa_.states[cur].eps.push_back(to);
            uint32_t next = i + 1 == e.max ? to : nfa_.add();
            build(e.kids[0], cur, next);
            cur = next;
          }
          if (e.max == e.min) nfa_.states[cur].eps.push_back(to);
        }
        break;
      }
      case Expr::Kind::kRef: nfa_.states[from].refs.push_back({static_cast<uint32_t>(e.rule), to}); break;
      case Expr::Kind::kDfa: {
        const ByteDfa& d = g_.dfa_at(e.rule);
        std::vector<uint32_t> id(d.size());
        for (uint32_t& x : id) x = nfa_.add();
        nfa_.states[from].eps.push_back(id[0]);
        for (size_t s = 0; s < d.size(); ++s) {
          if (d.accepting[s]) nfa_.states[id[s]].eps.push_back(to);
          for (int b = 0; b < 256;) {  // runs of bytes with one target become one edge
            const uint32_t t = d.next[s][b];
            int hi = b;
            while (hi < 255 && d.next[s][hi + 1] == t) ++hi;
            if (t != ByteDfa::kNone) nfa_.states[id[s]].bytes.push_back({uint8_t(b), uint8_t(hi), id[t]});
            b = hi + 1;
          }
        }
        break;
      }
    }
  }

 private:
  const Grammar& g_;
  Nfa& nfa_;
};

// Epsilon closure of set (sorted on return). stamp/round: marks of this call (stamp[s] == round),
// so a rule of n NFA states costs its closures' sizes, not n per closure.
void closure(const Nfa& nfa, std::vector<uint32_t>& set, std::vector<uint32_t>& stamp, uint32_t round,
             std::vector<uint32_t>& stack) {
  stack.assign(set.begin(), set.end());
  for (uint32_t s : set) stamp[s] = round;
  while (!stack.empty()) {
    uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t t : nfa.states[s].eps)
      if (stamp[t] != round) { stamp[t] = round; set.push_back(t); stack.push_back(t); }
  }
  std::sort(set.begin(), set.end());
}

// A rule's DFA may be this many times its NFA (plus a floor) before it counts as exponential blow-up
// of the subset construction (`.*a.{14}`: 327k nodes, minutes of compile time for one request).
constexpr size_t kMaxDfaGrowth = 16, kMinDfaStates = 10000;

// Subset construction of one rule's NFA, appending DFA nodes to `a` (node base + k is the k-th
// set found). Returns the start node. Scratch vectors are reused: large schemas make 10^5 nodes.
uint32_t determinize(const Nfa& nfa, uint32_t start, uint32_t final_state, uint32_t rule, Automaton& a) {
  std::unordered_map<std::vector<uint32_t>, uint32_t, StateIdsHash> ids;
  std::vector<const std::vector<uint32_t>*> pending;  // the keys of ids (stable) in id order
  const uint32_t base = static_cast<uint32_t>(a.nodes.size());
  std::vector<uint32_t> stamp(nfa.states.size(), 0), stack, tgt;
  uint32_t round = 0;
  const size_t max_states = kMaxDfaGrowth * nfa.states.size() + kMinDfaStates;
  // By kernel (the sorted targets before their closure) too: many (set, byte range) pairs reach
  // the same kernel, and its closure can be hundreds of NFA states.
  std::unordered_map<std::vector<uint32_t>, uint32_t, StateIdsHash> by_kernel;
  auto intern = [&](std::vector<uint32_t>& set) {
    auto [known, fresh_kernel] = by_kernel.try_emplace(set, 0);
    if (!fresh_kernel) return known->second;
    closure(nfa, set, stamp, ++round, stack);
    auto [it, inserted] = ids.try_emplace(set, base + static_cast<uint32_t>(ids.size()));
    if (inserted) {
      check(ids.size() <= max_states, "grammar too complex: one rule's automaton grows past ", max_states,
            " states from ", nfa.states.size(), " (exponential, as in .*a.{20}: simplify the pattern)");
      pending.push_back(&it->first);
    }
    return known->second = it->second;
  };
  tgt.push_back(start);
  const uint32_t s0 = intern(tgt);
  std::vector<ByteEdge> edges;
  std::vector<RefEdge> refs;
  std::vector<int> cuts;
  std::vector<uint8_t> cut_at(257, 0);
  std::vector<uint32_t> cut_index(257, 0);
  std::vector<std::vector<uint32_t>> buckets;
  for (size_t k = 0; k < pending.size(); ++k) {
    const std::vector<uint32_t>& set = *pending[k];
    edges.clear();
    refs.clear();
    bool acc = false;
    for (uint32_t s : set) {
      if (s == final_state) acc = true;
      edges.insert(edges.end(), nfa.states[s].bytes.begin(), nfa.states[s].bytes.end());
      refs.insert(refs.end(), nfa.states[s].refs.begin(), nfa.states[s].refs.end());
    }
    FsmNode n;
    n.rule = rule;
    n.accepting = acc;
    n.byte_begin = static_cast<uint32_t>(a.byte_edges.size());
    // The byte ranges no edge boundary splits (cut points marked in a 257-entry table), and each
    // edge's target in the bucket of every range it covers: the edges' sizes, not ranges x edges.
    cuts.clear();
    for (auto& e : edges) {
      for (int b : {int(e.lo), e.hi + 1})
        if (!cut_at[b]) cut_at[b] = 1, cuts.push_back(b);
    }
    std::sort(cuts.begin(), cuts.end());
    for (size_t c = 0; c < cuts.size(); ++c) cut_index[cuts[c]] = static_cast<uint32_t>(c);
    if (buckets.size() < cuts.size()) buckets.resize(cuts.size());
    for (auto& e : edges)
      for (uint32_t c = cut_index[e.lo]; c < cut_index[e.hi + 1]; ++c) buckets[c].push_back(e.target);
    for (int b : cuts) cut_at[b] = 0;
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int lo = cuts[c], hi = cuts[c + 1] - 1;
      tgt.swap(buckets[c]);
      buckets[c].clear();
      if (tgt.empty()) continue;
      std::sort(tgt.begin(), tgt.end());
      tgt.erase(std::unique(tgt.begin(), tgt.end()), tgt.end());
      const uint32_t t = intern(tgt);
      if (a.byte_edges.size() > n.byte_begin && a.byte_edges.back().target == t && a.byte_edges.back().hi + 1 == lo)
        a.byte_edges.back().hi = static_cast<uint8_t>(hi);
      else
        a.byte_edges.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), t});
    }
    n.byte_end = static_cast<uint32_t>(a.byte_edges.size());
    // One edge per referenced rule, to the set of its targets (rules in ascending order).
    std::sort(refs.begin(), refs.end(), [](const RefEdge& x, const RefEdge& y) { return x.rule < y.rule || (x.rule == y.rule && x.target < y.target); });
    n.ref_begin = static_cast<uint32_t>(a.ref_edges.size());
    for (size_t i = 0, j; i < refs.size(); i = j) {
      tgt.clear();
      for (j = i; j < refs.size() && refs[j].rule == refs[i].rule; ++j)
        if (tgt.empty() || tgt.back() != refs[j].target) tgt.push_back(refs[j].target);
      const uint32_t t = intern(tgt);
      a.ref_edges.push_back({refs[i].rule, t});
    }
    n.ref_end = static_cast<uint32_t>(a.ref_edges.size());
    a.nodes.push_back(n);
  }
  return s0;
}

// Position inside a JSON-string character after byte b, from position `pos` (0: between
// characters, 1-3: UTF-8 continuation bytes due, 4: after a backslash, 5-8: \u hex digits due);
// -1 when b cannot come there.
int char_position(int pos, uint8_t b) {
  auto hex = [](uint8_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
  switch (pos) {
    case 0:
      if (b == '\\') return 4;
      if (b < 0x80) return 0;
      if (b >= 0xC2 && b <= 0xDF) return 1;
      if (b >= 0xE0 && b <= 0xEF) return 2;
      if (b >= 0xF0 && b <= 0xF4) return 3;
      return -1;
    case 1: case 2: case 3: return b >= 0x80 && b <= 0xBF ? pos - 1 : -1;
    case 4: return b == 'u' ? 8 : 0;
    default: return hex(b) ? (pos == 5 ? 0 : pos - 1) : -1;
  }
}

// A counted rule's nodes: each must sit at one position inside a character (true for any
// language of whole JSON-string characters); char_boundary marks those between characters.
void label_char_boundaries(Automaton& a, uint32_t rule) {
  std::map<uint32_t, int> pos{{a.rule_start[rule], 0}};
  std::vector<uint32_t> stack{a.rule_start[rule]};
  while (!stack.empty()) {
    const uint32_t n = stack.back();
    stack.pop_back();
    const FsmNode& nd = a.nodes[n];
    check(nd.ref_begin == nd.ref_end, "grammar: counted rule '", a.rule_names[rule], "' refers to other rules");
    for (uint32_t e = nd.byte_begin; e < nd.byte_end; ++e) {
      const ByteEdge& be = a.byte_edges[e];
      for (int b = be.lo; b <= be.hi; ++b) {
        const int p = char_position(pos[n], static_cast<uint8_t>(b));
        check(p >= 0, "grammar: counted rule '", a.rule_names[rule], "' reads something other than JSON string characters");
        auto [it, fresh] = pos.emplace(be.target, p);
        check(it->second == p, "grammar: counted rule '", a.rule_names[rule], "' has a node inside and between characters");
        if (fresh) stack.push_back(be.target);
      }
    }
  }
  for (auto [n, p] : pos) {
    a.char_boundary[n] = p == 0;
    a.counted_node[n] = 1;
    a.chars_to_end[n] = a.nodes[n].accepting ? 0 : UINT32_MAX / 2;
  }
  for (bool changed = true; changed;) {  // shortest distances, in characters started
    changed = false;
    for (auto [n, p] : pos)
      for (uint32_t e = a.nodes[n].byte_begin; e < a.nodes[n].byte_end; ++e) {
        const uint32_t d = a.chars_to_end[a.byte_edges[e].target] + a.char_boundary[n];
        if (d < a.chars_to_end[n]) {
          a.chars_to_end[n] = d;
          changed = true;
        }
      }
  }
}

constexpr size_t kMaxTransEntries = size_t(1) << 22;  // 16 MiB of dense transitions at most

void build_transition_table(Automaton& a) {
  std::vector<uint8_t> cut(257, 0);  // cut[b]: a class starts at byte b
  cut[0] = 1;
  for (const ByteEdge& e : a.byte_edges) {
    cut[e.lo] = 1;
    cut[e.hi + 1] = 1;
  }
  uint32_t k = 0;
  for (int b = 0; b < 256; ++b) {
    if (b > 0 && cut[b]) ++k;
    a.byte_class[b] = static_cast<uint8_t>(k);
  }
  a.num_byte_classes = k + 1;
  a.trans.clear();
  if (a.nodes.size() * a.num_byte_classes > kMaxTransEntries) return;  // step() scans the edges
  std::vector<uint32_t> trans(a.nodes.size() * a.num_byte_classes, UINT32_MAX);
  for (size_t n = 0; n < a.nodes.size(); ++n)
    for (uint32_t i = a.nodes[n].byte_begin; i < a.nodes[n].byte_end; ++i) {
      const ByteEdge& e = a.byte_edges[i];
      for (uint32_t c = a.byte_class[e.lo]; c <= a.byte_class[e.hi]; ++c) trans[n * a.num_byte_classes + c] = e.target;
    }
  a.trans = std::move(trans);
}

}  // namespace

Automaton build_automaton(const Grammar& g) {
  g.check_complete();
  Automaton a;
  for (int r = 0; r < g.num_rules(); ++r) {
    Nfa nfa;
    uint32_t s = nfa.add(), f = nfa.add();
    NfaBuilder(g, nfa).build(g.rule_body(r), s, f);
    a.rule_start.push_back(determinize(nfa, s, f, r, a));
    a.rule_names.push_back(g.rule_name(r));
  }
  a.root_rule = g.root();
  a.rule_perm.assign(g.num_rules(), -1);
  a.rule_member.assign(g.num_rules(), -1);
  for (const PermRule& p : g.perms()) {
    a.rule_perm[p.rule] = static_cast<int32_t>(a.perm_required.size());
    std::vector<uint64_t> req((p.member_rules.size() + 63) / 64);
    for (size_t i = 0; i < p.member_rules.size(); ++i) {
      for (int m : p.member_rules[i]) a.rule_member[m] = static_cast<int32_t>(i);
      if (p.required[i]) req[i / 64] |= 1ull << (i % 64);
    }
    a.perm_required.push_back(std::move(req));
    std::vector<std::pair<int32_t, std::vector<uint64_t>>> deps;
    for (size_t i = 0; i < p.depends.size(); ++i) {
      if (p.depends[i].empty()) continue;
      std::vector<uint64_t> bits((p.member_rules.size() + 63) / 64);
      for (int d : p.depends[i]) bits[d / 64] |= 1ull << (d % 64);
      deps.push_back({static_cast<int32_t>(i), std::move(bits)});
    }
    a.perm_depends.push_back(std::move(deps));
    a.perm_min.push_back(p.min_count);
    a.perm_max.push_back(p.max_count);
    if (a.rule_extra.empty()) a.rule_extra.assign(g.num_rules(), 0);
    if (p.min_count > 0 || p.max_count >= 0)
      for (int r : p.extra_rules) a.rule_extra[r] = 1;
  }
  if (a.rule_extra.empty()) a.rule_extra.assign(g.num_rules(), 0);
  a.count_min.assign(g.num_rules(), 0);
  a.count_max.assign(g.num_rules(), Automaton::kNotCounted);
  a.char_boundary.assign(a.nodes.size(), 0);
  a.counted_node.assign(a.nodes.size(), 0);
  a.chars_to_end.assign(a.nodes.size(), 0);
  for (const CountedRule& c : g.counted()) {
    check(a.rule_perm[c.rule] < 0, "grammar: rule '", a.rule_names[c.rule], "' is both counted and a perm rule");
    a.count_min[c.rule] = c.min;
    a.count_max[c.rule] = c.max == kUnbounded ? -1 : c.max;
    label_char_boundaries(a, static_cast<uint32_t>(c.rule));
  }
  build_transition_table(a);
  for (const FsmNode& n : a.nodes)  // their token classes would depend on the seen set
    check(a.rule_perm[n.rule] < 0 || !n.has_bytes(), "grammar: perm rule '", a.rule_names[n.rule], "' reads bytes");
  // A rule is nullable when its start reaches an accepting node through nullable refs only.
  a.rule_nullable.assign(g.num_rules(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < g.num_rules(); ++r) {
      if (a.rule_nullable[r]) continue;
      const int32_t perm = a.rule_perm[r];  // a perm rule with required members is never empty
      if (perm >= 0 && (a.perm_min[perm] > 0 || std::any_of(a.perm_required[perm].begin(), a.perm_required[perm].end(), [](uint64_t w) { return w; }))) continue;
      if (a.count_min[r] > 0) continue;  // a counted rule needs its characters
      std::vector<uint32_t> stack{a.rule_start[r]}, seen{a.rule_start[r]};
      while (!stack.empty() && !a.rule_nullable[r]) {
        uint32_t n = stack.back();
        stack.pop_back();
        if (a.nodes[n].accepting) { a.rule_nullable[r] = 1; changed = true; break; }
        for (uint32_t i = a.nodes[n].ref_begin; i < a.nodes[n].ref_end; ++i) {
          const RefEdge& e = a.ref_edges[i];
          if (a.rule_nullable[e.rule] && std::find(seen.begin(), seen.end(), e.target) == seen.end()) {
            seen.push_back(e.target);
            stack.push_back(e.target);
          }
        }
      }
    }
  }
  return a;
}

}  // namespace deepinfer::structured
