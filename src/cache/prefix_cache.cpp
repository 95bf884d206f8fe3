#include "cache/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::cache {
namespace {

constexpr uint64_t kRoot = 0x9E3779B97F4A7C15ULL;  // the empty prefix's name

uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 step over the running name
  h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBULL;
  return h ^ (h >> 31);
}

}  // namespace

PrefixCache::PrefixCache(int64_t block_tokens, int64_t max_nodes) : block_tokens_(block_tokens), max_nodes_(max_nodes) {
  check(block_tokens > 0, "prefix cache: block_tokens must be positive, got ", block_tokens);
}

uint64_t PrefixCache::chain(uint64_t parent, std::span<const int32_t> block) {
  uint64_t h = mix(parent, block.size());
  for (int32_t t : block) h = mix(h, static_cast<uint32_t>(t));
  return h;
}

PrefixCache::Node* PrefixCache::find(uint64_t name, uint64_t parent, std::span<const int32_t> block) {
  auto it = nodes_.find(name);
  if (it == nodes_.end() || it->second.parent != parent || !std::equal(block.begin(), block.end(), it->second.tokens.begin(),
                                                                        it->second.tokens.end()))
    return nullptr;
  return &it->second;
}

template <class F>
void PrefixCache::walk(std::span<const int32_t> tokens, int64_t limit, F&& f) const {
  uint64_t parent = kRoot;
  for (int64_t end = block_tokens_; end <= std::min<int64_t>(limit, tokens.size()); end += block_tokens_) {
    auto block = tokens.subspan(end - block_tokens_, block_tokens_);
    const uint64_t name = chain(parent, block);
    f(end, name, parent, block);
    parent = name;
  }
}

PrefixCache::Match PrefixCache::match(std::span<const int32_t> tokens, int64_t limit) {
  Match m;
  const uint64_t now = ++clock_;
  walk(tokens, limit, [&](int64_t end, uint64_t name, uint64_t parent, std::span<const int32_t> block) {
    Node* n = find(name, parent, block);
    if (!n) return;  // a forgotten block: deeper ones may still be there (names chain the content)
    n->used = now;
    m.known = end;
    if (n->state) {
      m.tokens = end;
      m.state = n->state;
    }
  });
  return m;
}

void PrefixCache::remember(std::span<const int32_t> tokens, int64_t limit) {
  const uint64_t now = ++clock_;
  walk(tokens, limit, [&](int64_t, uint64_t name, uint64_t parent, std::span<const int32_t> block) {
    auto [it, added] = nodes_.try_emplace(name);
    if (added) {
      it->second.parent = parent;
      it->second.tokens.assign(block.begin(), block.end());
    }
    it->second.used = now;  // (a collision keeps the older node's content: find() then misses)
  });
  forget_content_nodes();
}

PrefixCache::Node* PrefixCache::last_node(std::span<const int32_t> prefix) {
  Node* last = nullptr;
  const int64_t n = static_cast<int64_t>(prefix.size());
  walk(prefix, n, [&](int64_t end, uint64_t name, uint64_t parent, std::span<const int32_t> block) {
    if (end == n) last = find(name, parent, block);
  });
  return last;
}

bool PrefixCache::has_snapshot(std::span<const int32_t> prefix) {
  const Node* n = last_node(prefix);
  return n && n->state;
}

void PrefixCache::insert(std::span<const int32_t> prefix, std::shared_ptr<model::SequenceState> state, int64_t blocks) {
  const int64_t n = static_cast<int64_t>(prefix.size());
  check(n > 0 && n % block_tokens_ == 0, "prefix cache: a snapshot must end at a block boundary, got length ", n);
  check(state && state->length() == n, "prefix cache: the snapshot's length is not its prefix's");
  remember(prefix, n);
  Node* node = last_node(prefix);
  if (!node || node->state) return;  // a collision with another prefix, or already there
  node->state = std::move(state);
  node->blocks = blocks;
  node->used = ++clock_;
  blocks_ += blocks;
  ++snapshots_;
}

int64_t PrefixCache::evict_one() {
  Node* victim = nullptr;
  for (auto& [name, n] : nodes_)
    if (n.state && n.state.use_count() == 1 && (!victim || n.used < victim->used)) victim = &n;
  if (!victim) return 0;
  const int64_t b = victim->blocks;
  victim->state.reset();  // its blocks go back to the pool (those not shared with live sequences)
  victim->blocks = 0;
  blocks_ -= b;
  --snapshots_;
  return b;
}

void PrefixCache::forget_content_nodes() {
  int64_t content = static_cast<int64_t>(nodes_.size()) - snapshots_;
  if (content <= max_nodes_) return;
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (used, name) of content-only nodes
  for (auto& [name, n] : nodes_)
    if (!n.state) order.emplace_back(n.used, name);
  std::sort(order.begin(), order.end());
  for (size_t i = 0; content > max_nodes_ * 3 / 4 && i < order.size(); ++i, --content) nodes_.erase(order[i].second);
}

}  // namespace deepinfer::cache
