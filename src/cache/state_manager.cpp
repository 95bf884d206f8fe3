#include "cache/state_manager.h"

#include <algorithm>

#include "core/error.h"

namespace deepinfer::cache {

StateManager::StateManager(model::CausalLM& model, int64_t num_blocks)
    : model_(model),
      total_blocks_(num_blocks),
      pool_(std::make_shared<BlockPool>(model.state_block_bytes(), num_blocks, model.state_memory())) {
  model.set_state_pool(pool_);
}

bool StateManager::reserve(int64_t id, int64_t tokens) {
  auto it = seqs_.find(id);
  int64_t have = it == seqs_.end() ? 0 : it->second.blocks;
  int64_t need = blocks_for(tokens) - have;
  if (need > 0 && !fits(need)) return false;
  if (it == seqs_.end()) {
    Entry e;
    if (!spare_.empty()) {
      e.state = std::move(spare_.back());
      spare_.pop_back();
    } else {
      e.state = model_.new_sequence();
    }
    it = seqs_.emplace(id, std::move(e)).first;
  }
  if (need > 0) {
    it->second.blocks += need;
    used_blocks_ += need;
  }
  return true;
}

bool StateManager::fits(int64_t more) {
  if (total_blocks_ <= 0) return true;
  while (used_blocks() + more > total_blocks_) {
    if (!prefix_ || prefix_->evict_one() == 0) return false;
    ++evictions_;
  }
  return true;
}

void StateManager::enable_prefix_cache(int64_t block_tokens) {
  check(model_.can_copy_states(), "prefix caching: this model's states cannot be copied");
  prefix_ = std::make_unique<PrefixCache>(block_tokens);
}

bool StateManager::snapshot(int64_t id, std::span<const int32_t> prefix) {
  check(prefix_ != nullptr, "internal: prefix caching is off");
  const int64_t n = static_cast<int64_t>(prefix.size());
  model::SequenceState* live = state(id);
  check(live->length() == n, "internal: snapshot of sequence ", id, " at ", n, ", its state is at ", live->length());
  if (prefix_->has_snapshot(prefix)) return false;
  check_recycled("snapshot");
  const int64_t blocks = blocks_for(n);
  if (!fits(blocks)) return false;
  std::shared_ptr<model::SequenceState> snap = model_.new_sequence();
  snap->copy_from(*live);
  prefix_->insert(prefix, std::move(snap), blocks);
  return true;
}

void StateManager::restore(int64_t id, const model::SequenceState& snap) {
  check_recycled("restore");
  state(id)->copy_from(snap);
}

void StateManager::check_recycled(const char* what) const {
  // The copy allocates now, against a budget that already counts released states' blocks as free.
  check(retiring_.empty(), "internal: prefix-cache ", what, " while released states still hold their blocks (",
        "recycle() first)");
}

void StateManager::release(int64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  used_blocks_ -= it->second.blocks;
  retiring_.push_back(std::move(it->second.state));
  seqs_.erase(it);
}

void StateManager::recycle() {
  for (auto& s : retiring_) {
    s->reset();
    spare_.push_back(std::move(s));
  }
  retiring_.clear();
}

model::SequenceState* StateManager::state(int64_t id) const {
  auto it = seqs_.find(id);
  check(it != seqs_.end(), "internal: sequence ", id, " holds no state");
  return it->second.state.get();
}

int64_t StateManager::held_blocks(int64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : it->second.blocks;
}

int64_t StateManager::state_bytes() const {
  int64_t b = 0;
  for (auto& [id, e] : seqs_) b += e.state->bytes();
  return b;
}

int64_t blocks_for_budget(int64_t bytes, int64_t bytes_per_block) {
  if (bytes <= 0) return 0;
  return std::max<int64_t>(1, bytes / std::max<int64_t>(1, bytes_per_block));
}

}  // namespace deepinfer::cache
