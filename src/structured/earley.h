// Byte-level Earley parser over the rule DFAs of an Automaton. One Earley set per consumed byte,
// kept on a stack so rollback (and the per-token trial runs of mask computation) is a pop.
#pragma once
#include <cstdint>
#include <vector>

#include "structured/fsm.h"

namespace deepinfer::structured {

struct EarleyItem {
  uint32_t node;
  uint32_t origin;  // index of the set where this rule instance started, or kRootOrigin
};

constexpr uint32_t kRootOrigin = UINT32_MAX;

class EarleyParser {
 public:
  explicit EarleyParser(const Automaton* a) : a_(a) {}

  // Clears everything; set 0 = closure of {(start_node, kRootOrigin)}.
  void reset(uint32_t start_node);
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
  void add(uint32_t node, uint32_t origin);
  void close_set();
  void clear_index();

  const Automaton* a_;
  std::vector<EarleyItem> items_;
  std::vector<uint32_t> set_start_;
  std::vector<uint8_t> root_done_, done_any_;
  // Open-addressing index of the set being built, for deduplication.
  std::vector<uint64_t> index_;
  std::vector<uint32_t> used_slots_;
};

}  // namespace deepinfer::structured
