#include <algorithm>
#include <cstring>
#include <string_view>
#include <tuple>

#include "core/error.h"
#include "structured/structured.h"

namespace deepinfer::structured {

namespace {

bool item_less(const EarleyItem& x, const EarleyItem& y) {
  return std::tie(x.node, x.origin, x.seen) < std::tie(y.node, y.origin, y.seen);
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), parser_(&grammar_->automaton()) {
  check(grammar_ != nullptr, "Matcher: null grammar");
  reset();
}

void Matcher::reset() {
  const Automaton& a = grammar_->automaton();
  parser_.reset(a.rule_start[a.root_rule]);
  history_.clear();
  terminated_ = false;
  cache_.clear();
}

bool Matcher::accept_bytes(const std::string& bytes) {
  if (terminated_) return false;
  int pushed = 0;
  for (char c : bytes) {
    if (!parser_.advance(static_cast<uint8_t>(c))) {
      parser_.pop(pushed);
      return false;
    }
    ++pushed;
  }
  history_.push_back(pushed);
  return true;
}

bool Matcher::accept_token(int32_t id) {
  const TokenVocab& v = grammar_->vocab();
  if (terminated_ || id < 0 || id >= v.size()) return false;
  if (v.is_stop(id)) {
    if (!can_end()) return false;
    terminated_ = true;
    history_.push_back(-1);
    return true;
  }
  const std::string& bytes = v.bytes(id);
  if (bytes.empty()) return false;  // special tokens are never text
  return accept_bytes(bytes);
}

void Matcher::rollback(int n) {
  check(n >= 0 && n <= static_cast<int>(history_.size()), "Matcher::rollback(", n, "): only ",
        history_.size(), " tokens to roll back");
  for (int i = 0; i < n; ++i) {
    int32_t k = history_.back();
    history_.pop_back();
    if (k < 0) terminated_ = false; else parser_.pop(k);
  }
  // Sets above the new depth may be rebuilt differently: forget results that refer to them.
  const uint32_t depth = static_cast<uint32_t>(parser_.depth());
  std::erase_if(cache_, [&](const UncertainCache& c) { return c.max_origin > depth; });
}

bool Matcher::can_end() const { return !terminated_ && parser_.root_done(); }

bool Matcher::has_scanable() const {
  const Automaton& a = grammar_->automaton();
  for (const EarleyItem* it = parser_.begin(); it != parser_.end(); ++it)
    if (a.nodes[it->node].has_bytes()) return true;
  return false;
}

bool Matcher::must_end() const { return terminated_ || (can_end() && !has_scanable()); }

void Matcher::fill_next_token_bitmask(uint32_t* words) const {
  const TokenVocab& v = grammar_->vocab();
  const size_t nwords = (v.size() + 31) / 32;
  auto set_stops = [&] {
    for (int32_t s : v.stop_ids()) words[s >> 5] |= 1u << (s & 31);
  };
  if (terminated_) {  // only stop tokens stay sampleable
    std::memset(words, 0, nwords * 4);
    return set_stops();
  }
  // The distinct masks of the frontier's scanable nodes (equivalent nodes share one); nodes of
  // counted rules near their upper bound keep only the tokens that fit in the characters left.
  const Automaton& a = grammar_->automaton();
  frontier_masks_.clear();
  counted_masks_.clear();
  const StateMask* bits = nullptr;
  for (const EarleyItem* it = parser_.begin(); it != parser_.end(); ++it) {
    const StateMask* m = grammar_->mask(it->node);
    if (!m) continue;
    const uint32_t rule = a.nodes[it->node].rule;
    if (a.counted(rule) && a.count_max[rule] >= 0) {
      const std::pair<const StateMask*, uint32_t> c{m, uint32_t(a.count_max[rule]) - it->seen};
      if (std::find(counted_masks_.begin(), counted_masks_.end(), c) == counted_masks_.end()) counted_masks_.push_back(c);
      continue;
    }
    if (std::find(frontier_masks_.begin(), frontier_masks_.end(), m) != frontier_masks_.end()) continue;
    frontier_masks_.push_back(m);
    if (!bits && m->accepted_bits) bits = m;
  }
  // OR their accepted sets: a copy of one bitset, then the others; gather their uncertain tokens.
  if (bits) std::memcpy(words, bits->accepted_bits->data(), nwords * 4);
  else std::memset(words, 0, nwords * 4);
  scratch_.clear();
  size_t uncertain_lists = 0;
  for (const StateMask* m : frontier_masks_) {
    if (m != bits) {
      if (m->accepted_bits) {
        const uint32_t* src = m->accepted_bits->data();
        for (size_t w = 0; w < nwords; ++w) words[w] |= src[w];
      } else {
        for (int32_t id : m->accepted_ids) words[id >> 5] |= 1u << (id & 31);
      }
    }
    if (!m->uncertain.empty()) {
      scratch_.insert(scratch_.end(), m->uncertain.begin(), m->uncertain.end());
      ++uncertain_lists;
    }
  }
  for (auto [m, left] : counted_masks_) {
    m->or_counted(left, words, tmp_words_);
    if (!m->uncertain.empty()) {
      scratch_.insert(scratch_.end(), m->uncertain.begin(), m->uncertain.end());
      ++uncertain_lists;
    }
  }
  if (scratch_.empty()) {
    if (can_end()) set_stops();
    return;
  }
  // Seen this frontier before (and its older sets are still the same)? Reuse the verdicts.
  const uint32_t cur = static_cast<uint32_t>(parser_.depth());
  key_.clear();
  uint32_t max_origin = 0;
  for (const EarleyItem* it = parser_.begin(); it != parser_.end(); ++it) {
    EarleyItem k{grammar_->canonical(it->node), it->origin, it->seen};
    const uint32_t rule = a.nodes[it->node].rule;
    const StateMask* m = grammar_->mask(it->node);
    if (a.counted(rule) && it->seen >= uint32_t(a.count_min[rule]) &&
        (a.count_max[rule] < 0 || uint32_t(a.count_max[rule]) - it->seen > (m ? m->uncertain_chars : 0)))
      k.seen = kUncounted;  // both bounds further than any uncertain token reaches: the count is moot
    if (k.origin == cur) k.origin = kRootOrigin - 1;  // this set itself, wherever it is
    else if (k.origin != kRootOrigin) max_origin = std::max(max_origin, k.origin);
    key_.push_back(k);
  }
  auto same = [&](const UncertainCache& c) {
    return c.key.size() == key_.size() &&
           std::equal(key_.begin(), key_.end(), c.key.begin(), [](const EarleyItem& x, const EarleyItem& y) {
             return x.node == y.node && x.origin == y.origin && x.seen == y.seen;
           });
  };
  for (UncertainCache& c : cache_) {
    if (!same(c)) continue;
    c.last_use = ++cache_clock_;
    for (int32_t id : c.passed) words[id >> 5] |= 1u << (id & 31);
    if (can_end()) set_stops();
    return;
  }
  if (uncertain_lists > 1) {
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  }
  UncertainCache* entry;
  if (cache_.size() < kCacheEntries) {
    entry = &cache_.emplace_back();
  } else {
    entry = &*std::min_element(cache_.begin(), cache_.end(),
                               [](const UncertainCache& x, const UncertainCache& y) { return x.last_use < y.last_use; });
  }
  entry->key = key_;
  entry->max_origin = max_origin;
  entry->passed.clear();
  entry->last_use = ++cache_clock_;
  // Run the uncertain tokens through the real parser state, in sorted order so consecutive
  // tokens share pushed prefix sets.
  const int base = parser_.depth();
  std::string cur_bytes, fail_prefix;
  // A byte is neutral when the newest set after it is the current one again (the same items up to
  // equivalent nodes, its own predictions renumbered): a JSON string's plain characters in a small frontier. A token's
  // leading neutral bytes then leave its verdict to the rest, so tokens that differ only there
  // (`abc",` and `x",` in a string) are walked once, by the rest (`",`). Only for small frontiers:
  // each byte's check is one parser step.
  // (Not with counted items: their count moves with every character.)
  const bool small = parser_.end() - parser_.begin() <= kNeutralItems && counted_masks_.empty();
  if (small) {
    base_items_.clear();
    for (const EarleyItem* it = parser_.begin(); it != parser_.end(); ++it)
      base_items_.push_back({grammar_->canonical(it->node), it->origin == uint32_t(base) ? kRootOrigin - 1 : it->origin, it->seen});
    std::sort(base_items_.begin(), base_items_.end(), item_less);
    neutral_.fill(0);
    rest_verdicts_.clear();
  }
  auto neutral = [&](uint8_t b) {
    if (neutral_[b] == 0) {
      neutral_[b] = 2;
      parser_.pop_to(base);
      cur_bytes.clear();
      if (parser_.advance(b)) {
        next_items_.clear();
        for (const EarleyItem* it = parser_.begin(); it != parser_.end(); ++it)
          next_items_.push_back({grammar_->canonical(it->node), it->origin == uint32_t(base + 1) ? kRootOrigin - 1 : it->origin == uint32_t(base) ? kRootOrigin - 2 : it->origin, it->seen});
        std::sort(next_items_.begin(), next_items_.end(), item_less);
        const bool same = next_items_.size() == base_items_.size() &&
                          std::equal(next_items_.begin(), next_items_.end(), base_items_.begin(), [](const EarleyItem& x, const EarleyItem& y) {
                            return x.node == y.node && x.origin == y.origin && x.seen == y.seen;
                          });
        if (same) neutral_[b] = 1;
        parser_.pop(1);
      }
    }
    return neutral_[b] == 1;
  };
  if (small)  // the first bytes up front (checking one later would undo the shared prefix)
    for (int32_t idx : scratch_) neutral(static_cast<uint8_t>(v.sorted_view(idx)[0]));
  for (int32_t idx : scratch_) {
    const int32_t id = v.sorted_id(idx);
    if (words[id >> 5] & (1u << (id & 31))) continue;
    std::string_view tok = v.sorted_view(idx);
    if (small) {
      size_t lead = 0;
      while (lead < tok.size() && neutral(static_cast<uint8_t>(tok[lead]))) ++lead;
      tok.remove_prefix(lead);
      if (lead > 0) {
        auto known = rest_verdicts_.find(std::string(tok));
        if (known != rest_verdicts_.end()) {
          if (known->second) words[id >> 5] |= 1u << (id & 31), entry->passed.push_back(id);
          continue;
        }
      }
    }
    bool ok = true;
    if (!fail_prefix.empty() && tok.substr(0, fail_prefix.size()) == fail_prefix) {
      ok = false;
    } else {
      size_t l = 0;
      while (l < cur_bytes.size() && l < tok.size() && cur_bytes[l] == tok[l]) ++l;
      parser_.pop_to(base + static_cast<int>(l));
      cur_bytes.resize(l);
      for (size_t k = l; k < tok.size(); ++k) {
        if (!parser_.advance(static_cast<uint8_t>(tok[k]))) {
          ok = false;
          fail_prefix.assign(tok.substr(0, k + 1));
          break;
        }
        cur_bytes += tok[k];
      }
    }
    if (tok.size() < v.sorted_view(idx).size()) rest_verdicts_.emplace(std::string(tok), ok);
    if (ok) {
      words[id >> 5] |= 1u << (id & 31);
      entry->passed.push_back(id);
    }
  }
  parser_.pop_to(base);
  if (can_end()) set_stops();
}

}  // namespace deepinfer::structured
