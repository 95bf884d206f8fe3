#include "structured/earley.h"

namespace deepinfer::structured {

namespace {
constexpr uint64_t kEmptySlot = ~0ull;
inline uint64_t key(uint32_t node, uint32_t origin) { return (uint64_t(node) << 32) | origin; }
inline uint64_t mix(uint64_t k) {
  k ^= k >> 29;
  k *= 0xbf58476d1ce4e5b9ull;
  return k ^ (k >> 32);
}
}  // namespace

void EarleyParser::clear_index() {
  for (uint32_t s : used_slots_) index_[s] = kEmptySlot;
  used_slots_.clear();
}

void EarleyParser::add(uint32_t node, uint32_t origin) {
  size_t set_size = items_.size() - set_start_.back();
  if (set_size * 2 >= index_.size()) {  // grow and rehash the current set
    index_.assign(index_.empty() ? 64 : index_.size() * 4, kEmptySlot);
    used_slots_.clear();
    for (size_t i = set_start_.back(); i < items_.size(); ++i) {
      uint64_t k = key(items_[i].node, items_[i].origin);
      size_t m = index_.size() - 1, s = mix(k) & m;
      while (index_[s] != kEmptySlot) s = (s + 1) & m;
      index_[s] = k;
      used_slots_.push_back(static_cast<uint32_t>(s));
    }
  }
  uint64_t k = key(node, origin);
  size_t m = index_.size() - 1, s = mix(k) & m;
  while (index_[s] != kEmptySlot) {
    if (index_[s] == k) return;
    s = (s + 1) & m;
  }
  index_[s] = k;
  used_slots_.push_back(static_cast<uint32_t>(s));
  items_.push_back({node, origin});
}

// Predict and complete until the newest set is closed.
void EarleyParser::close_set() {
  const uint32_t cur = static_cast<uint32_t>(set_start_.size() - 1);
  bool done = false;
  for (size_t i = set_start_.back(); i < items_.size(); ++i) {
    const EarleyItem it = items_[i];
    const FsmNode& n = a_->nodes[it.node];
    for (uint32_t e = n.ref_begin; e < n.ref_end; ++e) {
      const RefEdge& r = a_->ref_edges[e];
      add(a_->rule_start[r.rule], cur);
      if (a_->rule_nullable[r.rule]) add(r.target, it.origin);  // Aycock-Horspool
    }
    if (!n.accepting) continue;
    if (it.origin == kRootOrigin) {
      done = true;
      continue;
    }
    const uint32_t rule = n.rule;
    const size_t pend = it.origin == cur ? items_.size() : set_start_[it.origin + 1];
    for (size_t j = set_start_[it.origin]; j < pend; ++j) {
      const EarleyItem parent = items_[j];
      const FsmNode& pn = a_->nodes[parent.node];
      for (uint32_t e = pn.ref_begin; e < pn.ref_end; ++e)
        if (a_->ref_edges[e].rule == rule) add(a_->ref_edges[e].target, parent.origin);
    }
  }
  root_done_.push_back(done);
  done_any_.push_back(set_start_.size() > 1 && (done || done_any_.back()));
  clear_index();
}

void EarleyParser::reset(uint32_t start_node) {
  items_.clear();
  set_start_.assign(1, 0);
  root_done_.clear();
  done_any_.clear();
  clear_index();
  add(start_node, kRootOrigin);
  close_set();
}

bool EarleyParser::advance(uint8_t b) {
  const size_t prev_begin = set_start_.back(), prev_end = items_.size();
  set_start_.push_back(static_cast<uint32_t>(prev_end));
  for (size_t i = prev_begin; i < prev_end; ++i) {
    uint32_t t = a_->step(items_[i].node, b);
    if (t != UINT32_MAX) add(t, items_[i].origin);
  }
  if (items_.size() == prev_end) {
    set_start_.pop_back();
    clear_index();
    return false;
  }
  close_set();
  return true;
}

void EarleyParser::pop(int n) {
  if (n <= 0) return;
  items_.resize(set_start_[set_start_.size() - n]);  // the first popped set's start
  set_start_.resize(set_start_.size() - n);
  root_done_.resize(root_done_.size() - n);
  done_any_.resize(done_any_.size() - n);
}

}  // namespace deepinfer::structured
