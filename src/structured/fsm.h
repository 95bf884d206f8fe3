// Lowers a Grammar to byte-level DFAs, one per rule, whose edges read a byte range or a whole rule.
// All rules' nodes live in one array so an Earley item is just (node, origin).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "structured/grammar.h"

namespace deepinfer::structured {

// Hash of a vector of state ids: the key of the subset construction (NFA state sets) and of the product
// construction (DFA state tuples).
struct StateIdsHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t x : v) h = (h ^ x) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
  }
};

struct ByteEdge {
  uint8_t lo, hi;
  uint32_t target;
};

struct RefEdge {
  uint32_t rule;
  uint32_t target;
};

struct FsmNode {
  uint32_t rule;
  bool accepting;
  uint32_t byte_begin, byte_end;  // into Automaton::byte_edges, sorted by lo, disjoint
  uint32_t ref_begin, ref_end;    // into Automaton::ref_edges
  bool has_bytes() const { return byte_end > byte_begin; }
};

struct Automaton {
  std::vector<FsmNode> nodes;
  std::vector<ByteEdge> byte_edges;
  std::vector<RefEdge> ref_edges;
  std::vector<uint32_t> rule_start;
  std::vector<uint8_t> rule_nullable;
  std::vector<std::string> rule_names;
  uint32_t root_rule = 0;
  // Permutation rules (grammar.h PermRule): per rule, its perm index or -1; per rule, the member
  // index it counts as inside the perm rule that references it, or -1; per perm, required bits.
  std::vector<int32_t> rule_perm, rule_member;
  std::vector<std::vector<uint64_t>> perm_required;
  // Per perm: (member, bits of the members it needs) pairs; member-count bounds (max -1: none).
  // Per rule: 1 for an extra member counted toward its perm's bounds.
  std::vector<std::vector<std::pair<int32_t, std::vector<uint64_t>>>> perm_depends;
  std::vector<int32_t> perm_min, perm_max;
  std::vector<uint8_t> rule_extra;
  // Counted rules (grammar.h CountedRule): per rule the bounds (count_max -2: not counted, -1:
  // no upper bound); per node, whether it lies between characters (a byte read there starts
  // one: count + 1, so a partly read character counts already).
  std::vector<int32_t> count_min, count_max;
  std::vector<uint8_t> char_boundary;
  // Per node of a counted rule: 1, and the fewest characters still to start before the rule can
  // end (the parser refuses a step after which they no longer fit under the upper bound, so a
  // bounded `pattern` never walks into a dead end).
  std::vector<uint8_t> counted_node;
  std::vector<uint32_t> chars_to_end;
  bool counted(uint32_t rule) const { return count_max[rule] != kNotCounted; }
  static constexpr int32_t kNotCounted = -2;

  // Dense transitions: bytes that no edge boundary separates share a class; trans[node *
  // num_byte_classes + byte_class[b]] is the target (UINT32_MAX: none). Empty when too large.
  uint8_t byte_class[256] = {};
  uint32_t num_byte_classes = 0;
  std::vector<uint32_t> trans;

  // Target of node on byte b, or UINT32_MAX.
  uint32_t step(uint32_t node, uint8_t b) const {
    if (!trans.empty()) return trans[size_t(node) * num_byte_classes + byte_class[b]];
    const FsmNode& n = nodes[node];
    for (uint32_t i = n.byte_begin; i < n.byte_end; ++i) {
      const ByteEdge& e = byte_edges[i];
      if (b < e.lo) break;
      if (b <= e.hi) return e.target;
    }
    return UINT32_MAX;
  }
};

// Throws deepinfer::Error when the grammar is too large (repetition bounds) or incomplete.
Automaton build_automaton(const Grammar& g);

// Appends the UTF-8 byte-range sequences whose union encodes exactly the codepoints [lo, hi]
// (surrogates excluded).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out);

}  // namespace deepinfer::structured
