#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "structured/structured.h"

namespace deepinfer::structured {

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
  std::memset(words, 0, nwords * 4);
  auto set_stops = [&] {
    for (int32_t s : v.stop_ids()) words[s >> 5] |= 1u << (s & 31);
  };
  if (terminated_) return set_stops();  // only stop tokens stay sampleable
  // OR the accepted sets of the frontier nodes; gather their uncertain tokens.
  scratch_.clear();
  std::vector<uint32_t> seen_nodes;
  size_t uncertain_lists = 0;
  for (const EarleyItem* it = parser_.begin(); it != parser_.end(); ++it) {
    const StateMask* m = grammar_->mask(it->node);
    if (!m || std::find(seen_nodes.begin(), seen_nodes.end(), it->node) != seen_nodes.end()) continue;
    seen_nodes.push_back(it->node);
    if (!m->accepted_bits.empty()) {
      for (size_t w = 0; w < nwords; ++w) words[w] |= m->accepted_bits[w];
    } else {
      for (int32_t id : m->accepted_ids) words[id >> 5] |= 1u << (id & 31);
    }
    if (!m->uncertain.empty()) {
      scratch_.insert(scratch_.end(), m->uncertain.begin(), m->uncertain.end());
      ++uncertain_lists;
    }
  }
  if (uncertain_lists > 1) {
    std::sort(scratch_.begin(), scratch_.end());
    scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  }
  // Run the uncertain tokens through the real parser state, in sorted order so consecutive
  // tokens share pushed prefix sets.
  const int base = parser_.depth();
  std::string cur, fail_prefix;
  for (int32_t idx : scratch_) {
    const int32_t id = v.sorted_id(idx);
    if (words[id >> 5] & (1u << (id & 31))) continue;
    const std::string& tok = v.sorted_bytes(idx);
    if (!fail_prefix.empty() && std::string_view(tok).substr(0, fail_prefix.size()) == fail_prefix) continue;
    size_t l = 0;
    while (l < cur.size() && l < tok.size() && cur[l] == tok[l]) ++l;
    parser_.pop_to(base + static_cast<int>(l));
    cur.resize(l);
    bool ok = true;
    for (size_t k = l; k < tok.size(); ++k) {
      if (!parser_.advance(static_cast<uint8_t>(tok[k]))) {
        ok = false;
        fail_prefix.assign(tok, 0, k + 1);
        break;
      }
      cur += tok[k];
    }
    if (ok) words[id >> 5] |= 1u << (id & 31);
  }
  parser_.pop_to(base);
  if (can_end()) set_stops();
}

}  // namespace deepinfer::structured
