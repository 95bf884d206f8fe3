#include "structured/string_dfa.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "structured/fsm.h"
#include "structured/structured.h"

namespace deepinfer::structured {

namespace {

// The DFA of a regex rule.
ByteDfa regex_dfa(const std::string& regex) {
  Grammar g;
  const int r = add_regex_rule(g, "pattern", regex, true);
  g.set_root(r);
  return rule_dfa(g, r);
}

}  // namespace

ByteDfa rule_dfa(const Grammar& g, int r) {
  const Automaton a = build_automaton(g);
  ByteDfa d;
  std::map<uint32_t, uint32_t> id{{a.rule_start[r], 0}};
  std::vector<uint32_t> order{a.rule_start[r]};
  for (size_t k = 0; k < order.size(); ++k) {
    const FsmNode& n = a.nodes[order[k]];
    check(n.ref_begin == n.ref_end, "grammar: rule '", g.rule_name(r), "' refers to other rules");
    d.next.emplace_back();
    d.next.back().fill(ByteDfa::kNone);
    d.accepting.push_back(n.accepting);
    for (int b = 0; b < 256; ++b) {
      const uint32_t t = a.step(order[k], static_cast<uint8_t>(b));
      if (t == UINT32_MAX) continue;
      auto [it, fresh] = id.emplace(t, static_cast<uint32_t>(order.size()));
      if (fresh) order.push_back(t);
      d.next[k][b] = it->second;
    }
  }
  return d;
}

const ByteDfa& content_dfa_ref() {
  static const ByteDfa d = regex_dfa("^(.|\\n)*$");
  return d;
}

ByteDfa content_dfa() { return content_dfa_ref(); }

ByteDfa pattern_dfa(const std::string& regex) { return regex_dfa(regex); }

ByteDfa literal_dfa(const std::vector<std::string>& contents) {
  ByteDfa d;
  auto add_state = [&] {
    d.next.emplace_back();
    d.next.back().fill(ByteDfa::kNone);
    d.accepting.push_back(0);
    return static_cast<uint32_t>(d.size() - 1);
  };
  add_state();
  for (const std::string& c : contents) {
    uint32_t s = 0;
    for (unsigned char b : c) {
      if (d.next[s][b] == ByteDfa::kNone) {
        const uint32_t t = add_state();
        d.next[s][b] = t;
      }
      s = d.next[s][b];
    }
    d.accepting[s] = 1;
  }
  return d;
}

ByteDfa contents_except(const std::vector<std::string>& names) {
  const ByteDfa& all = content_dfa_ref();
  struct Trie {
    std::vector<std::pair<uint8_t, uint32_t>> kids;  // sorted by byte
    bool terminal = false;
  };
  std::vector<Trie> trie(1);
  for (const std::string& n : names) {
    uint32_t t = 0;
    for (unsigned char b : n) {
      auto& kids = trie[t].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::pair<uint8_t, uint32_t>{b, 0});
      if (it == kids.end() || it->first != b) {
        it = kids.insert(it, {b, static_cast<uint32_t>(trie.size())});
        trie.emplace_back();
      }
      t = it->second;
    }
    trie[t].terminal = true;
  }
  // States are (content state, trie state or kNone once off every name); all can still accept
  // (the contents go on past the longest name), so nothing needs trimming.
  ByteDfa d;
  std::unordered_map<uint64_t, uint32_t> ids;
  std::vector<std::pair<uint32_t, uint32_t>> states;
  auto intern = [&](uint32_t c, uint32_t t) {
    auto [it, fresh] = ids.emplace(uint64_t(c) << 32 | t, static_cast<uint32_t>(states.size()));
    if (fresh) states.push_back({c, t});
    return it->second;
  };
  intern(0, 0);
  for (size_t k = 0; k < states.size(); ++k) {
    const auto [c, t] = states[k];
    std::array<uint32_t, 256> row;
    row.fill(ByteDfa::kNone);
    const std::vector<std::pair<uint8_t, uint32_t>>* kids = t == ByteDfa::kNone ? nullptr : &trie[t].kids;
    size_t kid = 0;
    uint32_t last_c = ByteDfa::kNone, last = ByteDfa::kNone;  // the previous byte's target off the names
    for (int b = 0; b < 256; ++b) {
      const uint32_t nc = all.next[c][b];
      const bool on_name = kids && kid < kids->size() && (*kids)[kid].first == b;
      const uint32_t nt = on_name ? (*kids)[kid++].second : ByteDfa::kNone;
      if (nc == ByteDfa::kNone) continue;
      if (nt != ByteDfa::kNone) {
        row[b] = intern(nc, nt);
      } else {
        if (nc != last_c) last_c = nc, last = intern(nc, ByteDfa::kNone);
        row[b] = last;
      }
    }
    d.next.push_back(row);
    d.accepting.push_back(all.accepting[c] && !(t != ByteDfa::kNone && trie[t].terminal));
  }
  return d;
}

bool dfa_matches(const ByteDfa& d, const std::string& content) {
  uint32_t s = 0;
  for (unsigned char b : content) {
    s = d.next[s][b];
    if (s == ByteDfa::kNone) return false;
  }
  return d.accepting[s];
}

namespace {

// Classes of the bytes that every state of every part sends to the same place (reps: the first
// byte of each class, ascending).
std::vector<uint8_t> shared_byte_classes(const std::vector<const ByteDfa*>& parts, std::vector<uint8_t>& reps) {
  // A hash of each byte's column (its target in every state of every part), then bytes grouped
  // by equal columns (the hash only picks the candidates).
  std::array<uint64_t, 256> h;
  h.fill(0x9e3779b97f4a7c15ull);
  for (const ByteDfa* d : parts)
    for (const auto& row : d->next)
      for (int b = 0; b < 256; ++b) h[b] = (h[b] ^ row[b]) * 0xbf58476d1ce4e5b9ull;
  auto same_column = [&](int x, int y) {
    for (const ByteDfa* d : parts)
      for (const auto& row : d->next)
        if (row[x] != row[y]) return false;
    return true;
  };
  std::vector<uint8_t> cls(256);
  reps.clear();
  for (int b = 0; b < 256; ++b) {
    size_t c = 0;
    while (c < reps.size() && !(h[reps[c]] == h[b] && same_column(reps[c], b))) ++c;
    if (c == reps.size()) reps.push_back(static_cast<uint8_t>(b));
    cls[b] = static_cast<uint8_t>(c);
  }
  return cls;
}

}  // namespace

// Interns tuples of `width` state ids, stored flat (no allocation per tuple): open addressing
// over their indices.
class TupleTable {
 public:
  explicit TupleTable(size_t width) : width_(width), slots_(64, kEmpty) {}
  size_t size() const { return flat_.size() / width_; }
  const uint32_t* at(size_t k) const { return flat_.data() + k * width_; }
  // The index of t, and whether it is new.
  std::pair<uint32_t, bool> intern(const uint32_t* t) {
    if (2 * (size() + 1) > slots_.size()) grow();
    for (size_t i = hash(t) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i] == kEmpty) {
        slots_[i] = static_cast<uint32_t>(size());
        flat_.insert(flat_.end(), t, t + width_);
        return {slots_[i], true};
      }
      if (std::equal(t, t + width_, at(slots_[i]))) return {slots_[i], false};
    }
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  uint64_t hash(const uint32_t* t) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < width_; ++i) h = (h ^ t[i]) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
  }
  void grow() {
    std::vector<uint32_t> old(2 * slots_.size(), kEmpty);
    old.swap(slots_);
    for (uint32_t k = 0; k < size(); ++k) {
      size_t i = hash(at(k)) & (slots_.size() - 1);
      while (slots_[i] != kEmpty) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = k;
    }
  }
  size_t width_;
  std::vector<uint32_t> flat_, slots_;
};

ProductDfa product_dfa(const std::vector<const ByteDfa*>& parts, size_t max_states, const std::string& what) {
  check(!parts.empty() && parts.size() <= 64, "string_dfa: 1 to 64 parts");
  ProductDfa p;
  TupleTable tuples(parts.size());
  auto intern = [&](const std::vector<uint32_t>& t) {
    auto [id, fresh] = tuples.intern(t.data());
    if (fresh) {
      check(id < max_states, "json schema: unsupported ", what, " (more than ", max_states, " automaton states)");
      uint64_t acc = 0;
      for (size_t i = 0; i < t.size(); ++i)
        if (t[i] != ByteDfa::kNone && parts[i]->accepting[t[i]]) acc |= 1ull << i;
      p.accepts.push_back(acc);
    }
    return id;
  };
  // Bytes that every part treats alike lead to the same tuple: one step per class, not per byte
  // (digit and key automata have a dozen classes).
  std::vector<uint8_t> reps;
  const std::vector<uint8_t> cls = shared_byte_classes(parts, reps);
  intern(std::vector<uint32_t>(parts.size(), 0));
  std::vector<uint32_t> cur(parts.size()), t(parts.size()), by_class(reps.size());
  for (size_t k = 0; k < tuples.size(); ++k) {
    std::copy(tuples.at(k), tuples.at(k) + parts.size(), cur.begin());  // intern may move them
    for (size_t c = 0; c < reps.size(); ++c) {
      for (size_t i = 0; i < parts.size(); ++i) t[i] = cur[i] == ByteDfa::kNone ? ByteDfa::kNone : parts[i]->next[cur[i]][reps[c]];
      by_class[c] = t[0] == ByteDfa::kNone ? ByteDfa::kNone : intern(t);
    }
    std::array<uint32_t, 256>& row = p.dfa.next.emplace_back();
    for (int b = 0; b < 256; ++b) row[b] = by_class[cls[b]];
  }
  p.dfa.accepting.assign(tuples.size(), 0);
  return p;
}

ByteDfa select_dfa(const ProductDfa& p, const std::function<bool(uint64_t)>& accept) {
  const size_t n = p.dfa.size();
  // Live states: those that reach an accepting one (backwards fixpoint over the edges).
  std::vector<std::vector<uint32_t>> preds(n);
  for (size_t s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b)
      if (p.dfa.next[s][b] != ByteDfa::kNone && (b == 0 || p.dfa.next[s][b] != p.dfa.next[s][b - 1])) preds[p.dfa.next[s][b]].push_back(static_cast<uint32_t>(s));
  std::vector<uint8_t> live(n, 0);
  std::vector<uint32_t> stack;
  for (size_t s = 0; s < n; ++s)
    if (accept(p.accepts[s])) { live[s] = 1; stack.push_back(static_cast<uint32_t>(s)); }
  while (!stack.empty()) {
    const uint32_t s = stack.back();
    stack.pop_back();
    for (uint32_t q : preds[s])
      if (!live[q]) { live[q] = 1; stack.push_back(q); }
  }
  ByteDfa d;
  if (n == 0 || !live[0]) return d;
  std::vector<uint32_t> id(n, ByteDfa::kNone);
  std::vector<uint32_t> order{0};
  id[0] = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const uint32_t s = order[k];
    d.next.emplace_back();
    d.accepting.push_back(accept(p.accepts[s]));
    for (int b = 0; b < 256; ++b) {
      const uint32_t t = p.dfa.next[s][b];
      if (t == ByteDfa::kNone || !live[t]) { d.next[k][b] = ByteDfa::kNone; continue; }
      if (id[t] == ByteDfa::kNone) { id[t] = static_cast<uint32_t>(order.size()); order.push_back(t); }
      d.next[k][b] = id[t];
    }
  }
  return d;
}

}  // namespace deepinfer::structured
