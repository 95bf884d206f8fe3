// Prefix caching (docs/prefix_caching.md): copies of sequence states taken where a prompt crosses a
// block boundary, found again by content. A prompt's tokens are cut into blocks of block_tokens; block
// k is named by a hash chained over blocks 0..k (so a name stands for the whole prefix), and the
// node of that name remembers the block's tokens (a hash collision is a miss, never a wrong state).
// A node may hold a snapshot: a model state at exactly that prefix (SequenceState::copy_from, which
// shares the append-only rows by reference). Nodes without one record that some prompt had that prefix,
// so that the next prompt diverging there is snapshotted at the divergence point. Snapshots are
// pinned while a sequence waits to be restored from them and otherwise evicted least recently used.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/causal_lm.h"

namespace deepinfer::cache {

class PrefixCache {
 public:
  // block_tokens: tokens per block (> 0); max_nodes: most remembered blocks (snapshots come on top).
  explicit PrefixCache(int64_t block_tokens, int64_t max_nodes = int64_t{1} << 16);

  int64_t block_tokens() const { return block_tokens_; }
  struct Match {
    int64_t tokens = 0;                              // cached prefix (whole blocks; 0: none)
    std::shared_ptr<const model::SequenceState> state;  // its snapshot: holding it pins it
    int64_t known = 0;                               // longest prefix (whole blocks) any prompt had
  };
  // The longest prefix of tokens[0, limit) that has a snapshot, and the longest one seen at all.
  Match match(std::span<const int32_t> tokens, int64_t limit);
  // Remembers the blocks of tokens[0, limit) (their content only).
  void remember(std::span<const int32_t> tokens, int64_t limit);
  bool has_snapshot(std::span<const int32_t> prefix);  // prefix: whole blocks
  // Keeps `state` (at length prefix.size(), whole blocks) holding `blocks` pool blocks.
  void insert(std::span<const int32_t> prefix, std::shared_ptr<model::SequenceState> state, int64_t blocks);
  // Drops the least recently used snapshot no one pins; returns the blocks it held (0: none to drop).
  int64_t evict_one();
  int64_t blocks() const { return blocks_; }         // pool blocks the snapshots hold (shared ones in each)
  int64_t snapshots() const { return snapshots_; }

 private:
  struct Node {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;                     // this block's
    std::shared_ptr<model::SequenceState> state;     // snapshot at the end of this block, or null
    int64_t blocks = 0;
    uint64_t used = 0;                               // LRU clock
  };
  static uint64_t chain(uint64_t parent, std::span<const int32_t> block);
  // The node of block k of tokens given its parent's name, or null (absent or a collision).
  Node* find(uint64_t name, uint64_t parent, std::span<const int32_t> block);
  Node* last_node(std::span<const int32_t> prefix);  // the node of the prefix's last block, or null
  // Calls f(end, name, parent name, block) for each whole block of tokens[0, limit).
  template <class F>
  void walk(std::span<const int32_t> tokens, int64_t limit, F&& f) const;
  void forget_content_nodes();                       // keeps the content-only nodes under max_nodes_

  int64_t block_tokens_, max_nodes_;
  std::unordered_map<uint64_t, Node> nodes_;
  uint64_t clock_ = 0;
  int64_t blocks_ = 0, snapshots_ = 0;
};

}  // namespace deepinfer::cache
