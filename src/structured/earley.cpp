#include "structured/earley.h"

#include <algorithm>

namespace deepinfer::structured {

namespace {
constexpr uint32_t kEmptySlot = UINT32_MAX;
inline uint64_t mix(uint32_t node, uint32_t origin, uint32_t seen) {
  uint64_t k = ((uint64_t(node) << 32) | origin) ^ (uint64_t(seen) * 0x9e3779b97f4a7c15ull);
  k ^= k >> 29;
  k *= 0xbf58476d1ce4e5b9ull;
  return k ^ (k >> 32);
}
}  // namespace

void EarleyParser::clear_index() {
  for (uint32_t s : used_slots_) index_[s] = kEmptySlot;
  used_slots_.clear();
}

void EarleyParser::add(uint32_t node, uint32_t origin, uint32_t seen) {
  const size_t first = set_start_.back(), set_size = items_.size() - first;
  auto slot = [&](const EarleyItem& it) {
    size_t m = index_.size() - 1, s = mix(it.node, it.origin, it.seen) & m;
    while (index_[s] != kEmptySlot) {
      const EarleyItem& o = items_[index_[s]];
      if (o.node == it.node && o.origin == it.origin && o.seen == it.seen) return SIZE_MAX;
      s = (s + 1) & m;
    }
    return s;
  };
  if (set_size * 2 >= index_.size()) {  // grow and rehash the current set
    index_.assign(index_.empty() ? 64 : index_.size() * 4, kEmptySlot);
    used_slots_.clear();
    for (size_t i = first; i < items_.size(); ++i) {
      size_t s = slot(items_[i]);
      index_[s] = static_cast<uint32_t>(i);
      used_slots_.push_back(static_cast<uint32_t>(s));
    }
  }
  const EarleyItem it{node, origin, seen};
  size_t s = slot(it);
  if (s == SIZE_MAX) return;
  index_[s] = static_cast<uint32_t>(items_.size());
  used_slots_.push_back(static_cast<uint32_t>(s));
  items_.push_back(it);
}

uint64_t EarleyParser::count(uint32_t seen) const {
  const std::vector<uint64_t>& s = seen_sets_[seen];
  uint64_t c = s.empty() ? 0 : s[0];
  for (size_t w = 1; w < s.size(); ++w) c += static_cast<uint64_t>(__builtin_popcountll(s[w]));
  return c;
}

bool EarleyParser::may_take(uint32_t seen, uint32_t rule, int32_t perm) const {
  const int32_t m = a_->rule_member[rule];
  if (m < 0 && !a_->rule_extra[rule]) return true;
  const std::vector<uint64_t>& s = seen_sets_[seen];
  if (m >= 0 && size_t(m / 64 + 1) < s.size() && ((s[m / 64 + 1] >> (m % 64)) & 1)) return false;
  if (a_->perm_max[perm] < 0) return true;
  // Under maxProperties a member is taken only where the required ones still missing fit after
  // it (else the object could never end: a dead end the masks would lead into).
  const std::vector<uint64_t>& req = a_->perm_required[perm];
  uint64_t need = count(seen) + 1;
  for (size_t w = 0; w < req.size(); ++w)
    need += static_cast<uint64_t>(__builtin_popcountll(req[w] & ~(w + 1 < s.size() ? s[w + 1] : 0)));
  if (m >= 0 && size_t(m / 64) < req.size() && ((req[m / 64] >> (m % 64)) & 1)) --need;  // m is one of them
  return need <= uint64_t(a_->perm_max[perm]);
}

uint32_t EarleyParser::take(uint32_t seen, uint32_t rule, int32_t perm) {
  int32_t m = a_->rule_member[rule];
  if (m < 0) {
    if (!a_->rule_extra[rule]) return seen;
    m = int32_t(0x80000000u | uint32_t(rule));  // an extra: only the count grows
  }
  const uint64_t key = (uint64_t(seen) << 32) | uint32_t(m);
  if (take_memo_.empty()) take_memo_.assign(64, {UINT64_MAX, 0});
  size_t mask = take_memo_.size() - 1, slot = mix(seen, uint32_t(m), 0) & mask;
  while (take_memo_[slot].first != UINT64_MAX) {
    if (take_memo_[slot].first == key) return take_memo_[slot].second;
    slot = (slot + 1) & mask;
  }
  const uint32_t id = intern_with(seen, m, perm);
  if (2 * (take_memo_used_ + 1) > take_memo_.size()) {  // grow, then find the slot again
    std::vector<std::pair<uint64_t, uint32_t>> old(take_memo_.size() * 2, {UINT64_MAX, 0});
    old.swap(take_memo_);
    mask = take_memo_.size() - 1;
    for (const auto& kv : old)
      if (kv.first != UINT64_MAX) {
        size_t t = mix(uint32_t(kv.first >> 32), uint32_t(kv.first), 0) & mask;
        while (take_memo_[t].first != UINT64_MAX) t = (t + 1) & mask;
        take_memo_[t] = kv;
      }
    slot = mix(seen, uint32_t(m), 0) & mask;
    while (take_memo_[slot].first != UINT64_MAX) slot = (slot + 1) & mask;
  }
  take_memo_[slot] = {key, id};
  ++take_memo_used_;
  return id;
}

uint32_t EarleyParser::intern_with(uint32_t seen, int32_t m, int32_t perm) {
  std::vector<uint64_t> s = seen_sets_[seen];
  if (s.empty()) s.resize(1);
  if (m >= 0) {
    if (s.size() <= size_t(m / 64 + 1)) s.resize(m / 64 + 2);
    s[m / 64 + 1] |= 1ull << (m % 64);
  } else {  // extra member: count it, saturating where the bounds stop telling counts apart
    const uint64_t cap = uint64_t(std::max(a_->perm_min[perm], a_->perm_max[perm] + 1));
    if (s[0] < cap) ++s[0];
  }
  auto [it, fresh] = seen_ids_.emplace(std::move(s), static_cast<uint32_t>(seen_sets_.size()));
  if (fresh) seen_sets_.push_back(it->first);
  return it->second;
}

bool EarleyParser::has_required(int32_t perm, uint32_t seen) const {
  const std::vector<uint64_t>& req = a_->perm_required[perm];
  const std::vector<uint64_t>& s = seen_sets_[seen];
  auto word = [&](size_t w) { return w + 1 < s.size() ? s[w + 1] : 0; };
  for (size_t w = 0; w < req.size(); ++w)
    if (req[w] & ~word(w)) return false;
  for (const auto& [m, deps] : a_->perm_depends[perm]) {
    if (!((word(m / 64) >> (m % 64)) & 1)) continue;
    for (size_t w = 0; w < deps.size(); ++w)
      if (deps[w] & ~word(w)) return false;
  }
  return a_->perm_min[perm] <= 0 || count(seen) >= uint64_t(a_->perm_min[perm]);
}

// Predict and complete until the newest set is closed. Items of perm rules carry their seen
// member set: a member already seen is not predicted, and the rule completes only when every
// required member was seen.
void EarleyParser::close_set() {
  const uint32_t cur = static_cast<uint32_t>(set_start_.size() - 1);
  bool done = false;
  for (size_t i = set_start_.back(); i < items_.size(); ++i) {
    const EarleyItem it = items_[i];
    const FsmNode& n = a_->nodes[it.node];
    const int32_t perm = a_->rule_perm[n.rule];
    for (uint32_t e = n.ref_begin; e < n.ref_end; ++e) {
      const RefEdge& r = a_->ref_edges[e];
      if (perm >= 0 && !may_take(it.seen, r.rule, perm)) continue;
      add(a_->rule_start[r.rule], cur);
      if (a_->rule_nullable[r.rule]) add(r.target, it.origin, perm >= 0 ? take(it.seen, r.rule, perm) : it.seen);  // Aycock-Horspool
    }
    if (!n.accepting || (perm >= 0 && !has_required(perm, it.seen)) || it.seen < uint32_t(a_->count_min[n.rule])) continue;
    if (it.origin == kRootOrigin) {
      done = true;
      continue;
    }
    const uint32_t rule = n.rule;
    const size_t pend = it.origin == cur ? items_.size() : set_start_[it.origin + 1];
    for (size_t j = set_start_[it.origin]; j < pend; ++j) {
      const EarleyItem parent = items_[j];
      const FsmNode& pn = a_->nodes[parent.node];
      const int32_t pperm = a_->rule_perm[pn.rule];
      // A node has at most one edge per rule, sorted by rule (fsm.cpp): a perm node's hundreds
      // of member edges are searched, not scanned.
      const RefEdge* first = a_->ref_edges.data() + pn.ref_begin;
      const RefEdge* last = a_->ref_edges.data() + pn.ref_end;
      const RefEdge* e = std::lower_bound(first, last, rule, [](const RefEdge& x, uint32_t r) { return x.rule < r; });
      if (e == last || e->rule != rule) continue;
      if (pperm < 0) add(e->target, parent.origin, parent.seen);
      else if (may_take(parent.seen, rule, pperm)) add(e->target, parent.origin, take(parent.seen, rule, pperm));
    }
  }
  root_done_.push_back(done);
  done_any_.push_back(set_start_.size() > 1 && (done || done_any_.back()));
  clear_index();
}

void EarleyParser::reset(uint32_t start_node, uint32_t seen) {
  items_.clear();
  set_start_.assign(1, 0);
  root_done_.clear();
  done_any_.clear();
  seen_sets_.resize(1);
  seen_ids_.clear();
  if (take_memo_used_) {
    take_memo_.assign(take_memo_.size(), {UINT64_MAX, 0});
    take_memo_used_ = 0;
  }
  clear_index();
  add(start_node, kRootOrigin, seen);
  close_set();
}

bool EarleyParser::advance(uint8_t b) {
  const size_t prev_begin = set_start_.back(), prev_end = items_.size();
  set_start_.push_back(static_cast<uint32_t>(prev_end));
  for (size_t i = prev_begin; i < prev_end; ++i) {
    const uint32_t t = a_->step(items_[i].node, b);
    if (t == UINT32_MAX) continue;
    uint32_t seen = items_[i].seen;
    if (a_->counted_node[t] && seen != kUncounted) {  // a counted rule: a started character counts
      seen += a_->char_boundary[items_[i].node];
      const int32_t max = a_->count_max[a_->nodes[t].rule];
      if (max >= 0 && uint64_t(seen) + a_->chars_to_end[t] > uint64_t(max)) continue;  // cannot end in time
    }
    add(t, items_[i].origin, seen);
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
