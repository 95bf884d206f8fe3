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
  if (need > 0 && total_blocks_ > 0 && used_blocks_ + need > total_blocks_) return false;
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
