#include "model/context_parallel_lm.h"

#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace deepinfer::model {
namespace {

// One sequence of the context-parallel model: each rank's copy of its state, advanced together.
class CpSequenceState final : public SequenceState {
 public:
  std::vector<std::unique_ptr<SequenceState>> ranks;

  int64_t length() const override { return ranks[0]->length(); }
  int64_t bytes() const override {
    int64_t b = 0;
    for (const auto& r : ranks) b += r->bytes();
    return b;
  }
  void reset() override {
    for (auto& r : ranks) r->reset();
  }
  void truncate(int64_t length) override {
    for (auto& r : ranks) r->truncate(length);
  }
  int64_t max_rollback() const override { return ranks[0]->max_rollback(); }
  void copy_from(const SequenceState& src) override {
    const auto* s = dynamic_cast<const CpSequenceState*>(&src);
    check(s != nullptr && s->ranks.size() == ranks.size(), "context parallel: copy_from a state of another model");
    for (size_t r = 0; r < ranks.size(); ++r) ranks[r]->copy_from(*s->ranks[r]);
  }
};

}  // namespace

ContextParallelLM::ContextParallelLM(int size, parallel::CpLayout layout, const LoadRank& load) {
  check(size >= 1, "context_parallel_size must be >= 1, got ", size);
  group_ = std::make_unique<parallel::CpuCommGroup>(size);
  for (int r = 0; r < size; ++r) comms_.push_back(std::make_unique<parallel::CpuCommunicator>(*group_, r));
  for (int r = 0; r < size; ++r) {
    cps_.push_back(std::make_shared<parallel::ContextParallel>(*comms_[r], layout));
    ranks_.push_back(load(cps_[r]));
    check(ranks_.back() != nullptr, "context parallel: rank ", r, " has no model");
  }
}

ContextParallelLM::~ContextParallelLM() = default;

void ContextParallelLM::connect() {
  auto group = std::make_unique<parallel::CpuCommGroup>(size());
  std::vector<std::unique_ptr<parallel::CpuCommunicator>> comms;
  for (int r = 0; r < size(); ++r) {
    comms.push_back(std::make_unique<parallel::CpuCommunicator>(*group, r));
    cps_[r]->rebind(*comms[r]);
  }
  comms_ = std::move(comms);  // the old communicators go before their group
  group_ = std::move(group);
}

SequenceState& ContextParallelLM::rank_state(SequenceState& state, int r) {
  auto* s = dynamic_cast<CpSequenceState*>(&state);
  check(s != nullptr && r >= 0 && r < static_cast<int>(s->ranks.size()), "context parallel: rank ", r,
        " of a state that is not this model's");
  return *s->ranks[r];
}

std::unique_ptr<SequenceState> ContextParallelLM::new_sequence() const {
  auto s = std::make_unique<CpSequenceState>();
  for (const auto& m : ranks_) s->ranks.push_back(m->new_sequence());
  return s;
}

void ContextParallelLM::set_state_pool(std::shared_ptr<BlockPool> pool) {
  check(pool != nullptr, "set_state_pool: no pool");
  for (int r = 1; r < size(); ++r)
    ranks_[r]->set_state_pool(std::make_shared<BlockPool>(pool->block_bytes(), pool->capacity(), &pool->memory()));
  ranks_[0]->set_state_pool(std::move(pool));
}

void ContextParallelLM::set_batch_invariant(bool on) {
  for (auto& m : ranks_) m->set_batch_invariant(on);
}

void ContextParallelLM::forward(const ForwardBatch& batch, std::vector<float>& logits, const ForwardTaps* taps) {
  const int n = size();
  std::vector<ForwardBatch> part(n, batch);  // the same batch on every rank, each with its own states
  for (size_t i = 0; i < batch.states.size(); ++i) {
    auto* s = dynamic_cast<CpSequenceState*>(batch.states[i]);
    check(s != nullptr && static_cast<int>(s->ranks.size()) == n, "forward: sequence ", i,
          " has no state of this context-parallel model");
    for (int r = 0; r < n; ++r) part[r].states[i] = s->ranks[r].get();
  }
  std::vector<std::vector<float>> out(n);
  std::mutex mu;
  std::exception_ptr first;  // the failure that stopped the step; the others follow from the abort
  auto run = [&](int r) {
    try {
      ranks_[r]->forward(part[r], r == 0 ? logits : out[r], taps);
    } catch (const std::exception& e) {
      std::lock_guard lock(mu);
      if (!first) first = std::current_exception();
      group_->abort(e.what());  // the ranks waiting in an exchange throw instead of waiting
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < n; ++r) threads.emplace_back(run, r);
  run(0);
  for (auto& t : threads) t.join();
  if (!first) return;
  connect();
  std::rethrow_exception(first);
}

}  // namespace deepinfer::model
