// Byte-level Earley parser over the rule DFAs of an Automaton. One Earley set per consumed byte,
// kept on a stack so rollback (and the per-token trial runs of mask computation) is a pop.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "structured/fsm.h"

namespace deepinfer::structured {

struct EarleyItem {
  uint32_t node;
  uint32_t origin;  // index of the set where this rule instance started, or kRootOrigin
  uint32_t seen;    // items of perm rules: id of the set of members seen so far (0 = empty)
};

constexpr uint32_t kRootOrigin = UINT32_MAX;
// `seen` of a counted rule's item whose characters are not counted (the start item when a token
// class is computed inside that rule: the count is applied when the mask is filled).
constexpr uint32_t kUncounted = UINT32_MAX;

class EarleyParser {
 public:
  explicit EarleyParser(const Automaton* a) : a_(a) {}

  // Clears everything; set 0 = closure of {(start_node, kRootOrigin, seen)}.
  void reset(uint32_t start_node, uint32_t seen = 0);
  // Consumes one byte. On failure nothing is pushed and false is returned.
  bool advance(uint8_t b);
  void pop(int n);
  void pop_to(int depth) { pop(this->depth() - depth); }
  int depth() const { return static_cast<int>(set_start_.size()) - 1; }

  // The item started by reset() can complete after the last byte (grammar may end here).
  bool root_done() const { return root_done_.back(); }
  // Some set 1..depth() had root_done().
  bool root_done_since_start() const { return done_any_.back(); }
  bool root_done_since(int d) const { return done_any_[d]; }

  const EarleyItem* begin() const { return items_.data() + set_start_.back(); }
  const EarleyItem* end() const { return items_.data() + items_.size(); }

 private:
  void add(uint32_t node, uint32_t origin, uint32_t seen = 0);
  void close_set();
  void clear_index();
  // Perm rules: whether member rule `rule` may still follow `seen`, and the id of seen + it.
  // A seen set is [extra count, member bits...] (the count only for perms with bounds).
  bool may_take(uint32_t seen, uint32_t rule, int32_t perm) const;
  uint32_t take(uint32_t seen, uint32_t rule, int32_t perm);
  uint32_t intern_with(uint32_t seen, int32_t member, int32_t perm);
  uint64_t count(uint32_t seen) const;
  bool has_required(int32_t perm, uint32_t seen) const;

  const Automaton* a_;
  std::vector<EarleyItem> items_;
  std::vector<uint32_t> set_start_;
  std::vector<uint8_t> root_done_, done_any_;
  // Open-addressing index (item positions) of the set being built, for deduplication.
  std::vector<uint32_t> index_;
  std::vector<uint32_t> used_slots_;
  // Interned member sets of perm rules (append-only until reset: ids stay valid across pops).
  std::vector<std::vector<uint64_t>> seen_sets_{{}};
  std::map<std::vector<uint64_t>, uint32_t> seen_ids_;
  // take() memo: (seen << 32 | member) -> id, open addressing (key UINT64_MAX = empty).
  std::vector<std::pair<uint64_t, uint32_t>> take_memo_;
  size_t take_memo_used_ = 0;
};

}  // namespace deepinfer::structured
