// The engine core: requests come and go at any time; each step() schedules a flat batch of
// prefill chunks and decode tokens, runs the model's forward and the sampler, and turns results
// into outputs. With async scheduling, step N+1 is scheduled (and step N's results are
// detokenized and checked for stops) while step N's forward runs on a worker thread.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cache/state_manager.h"
#include "deepinfer/llm.h"
#include "engine/grammar.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/text.h"
#include "sampling/sampler.h"
#include "model/causal_lm.h"
#include "spec/drafter.h"
#include "vision/image_prompt.h"
#include "spec/step_cost.h"

namespace deepinfer::engine {

struct EngineOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int64_t max_model_len = 4096;
  int64_t num_state_blocks = 0;           // blocks of model->state_block_bytes(); <= 0: unlimited
  bool async_scheduling = true;
  bool batch_invariant = false;
  // Plain rows (greedy, or temperature alone) are drawn on the model's device: only tokens come back.
  bool device_sampling = true;
  int max_logprobs = 20;                  // cap on logprobs / prompt_logprobs per request (vLLM's default)
  uint64_t seed = 0;                      // seeds requests without seq_seed
  std::vector<int32_t> eos_token_ids;
  // Speculative decoding (engine/speculation.cpp); runs one step at a time (no async overlap).
  bool speculative = false;
  int num_draft_tokens = 0;               // most drafts a request verifies per step; 0: min(5, block size)
  bool confidence_scheduling = false;     // false: every request verifies num_draft_tokens
  std::vector<double> step_costs;         // seconds of 1, 2, 4, ... tokens; empty: measured at start-up
  std::shared_ptr<spec::Drafter> drafter; // default: the model's DSpark head
  bool log_speculation = false;           // each step's verify budget to stderr
  // Prefix caching (docs/prefix_caching.md): on unless turned off or the model cannot copy its states.
  bool prefix_caching = true;
  int64_t prefix_block_tokens = 64;       // tokens per cache block
  // Every step runs a forward, an empty one when nothing is scheduled: the ranks of expert
  // parallelism exchange tokens at every MoE layer of every step (engine/data_parallel.h). With
  // async scheduling one forward stays in flight between steps (an empty one when nothing is planned).
  bool lockstep = false;
};

// Reads the DEEPINFER_* defaults and applies the config's explicit values on top.
EngineOptions resolve_options(const EngineConfig& config);

// Sums speculative counters (a request's samples).
void add_metrics(SpeculativeMetrics& into, const SpeculativeMetrics& m);

struct EngineStats {
  int64_t steps = 0;
  int64_t forward_tokens = 0;
  int64_t preemptions = 0;
  int64_t failed_batches = 0;
  int max_seqs_in_step = 0;
  int64_t draft_tokens_verified = 0;      // speculative: over all steps
  int64_t draft_tokens_accepted = 0;
  int64_t last_verify_budget = 0;         // draft tokens the last step verified
  int64_t device_drawn_rows = 0;          // sample rows drawn on the model's device (device_sampling)
  // The device's idle time before each forward (from the previous forward's end, on the device's clock;
  // a DSpark draft in between counts as idle): its sum and how many forwards it covers (0 on the CPU).
  double device_idle_ms = 0;
  int64_t device_idle_forwards = 0;
  int64_t prefix_cached_tokens = 0;       // prompt tokens restored from the prefix cache
  int64_t prefix_hits = 0;                // sequences restored from it
  int64_t prefix_snapshots = 0;           // snapshots taken
  int64_t prefix_evictions = 0;           // snapshots evicted for room
  int64_t prefix_cached_blocks = 0;       // state blocks the snapshots hold now
  // State held after the last step. Reserved and live states return to 0 when the engine is idle
  // (nothing leaks); allocated too, but for the blocks prefix-cache snapshots hold (at most
  // prefix_cached_blocks, which counts shared blocks once per snapshot).
  int64_t state_blocks_reserved = 0;      // blocks the scheduler reserved for live sequences
  int64_t state_blocks_allocated = 0;     // blocks the pool has handed out
  int64_t live_states = 0;                // sequences holding a state
  int64_t waiting_seqs = 0;               // sequences queued for their first schedule (queue depth)
  int64_t running_seqs = 0;               // sequences the scheduler runs (prefilling or decoding)
};

class DataParallelGroup;

class Engine {
 public:
  Engine(std::unique_ptr<model::CausalLM> model, std::unique_ptr<TextCodec> codec, EngineOptions options);
  ~Engine();
  // The model's vision stage (V4.1 with a vision tower): prompts with images are expanded by it at
  // add_request. Call before the first request.
  void set_vision(std::unique_ptr<vision::VisionStage> vision) { vision_ = std::move(vision); }

  // Thread-safe. Validates (throws deepinfer::Error naming the problem) and queues the request;
  // it joins the next step. Returns the request id (generated when empty).
  std::string add_request(const Prompt& prompt, const SamplingParams& params, std::string request_id = "");
  // Thread-safe. The request finishes with finish_reason "abort", keeping what it generated.
  void abort(const std::string& request_id);

  // Runs one step. Returns the requests that finished, and with include_unfinished also those
  // that changed (cumulative outputs, for streaming).
  // Throws when another thread holds the engine with claim_driver() (its outputs would be lost).
  std::vector<RequestOutput> step(bool include_unfinished = false);
  bool has_unfinished() const;

  // A driver that keeps only its own requests' outputs (LLM::generate) claims the engine for its
  // call, so that step() from another thread is refused instead of taking its results; outputs it
  // receives for requests that are not its own go back with return_outputs() to the next step().
  void claim_driver();                    // throws when another thread holds it
  void release_driver();
  void return_outputs(std::vector<RequestOutput> outs);

  const EngineOptions& options() const { return options_; }
  bool prefix_caching() const { return states_.prefix_cache() != nullptr; }
  int64_t state_block_bytes() const { return model_->state_block_bytes(); }
  const TextCodec* codec() const { return codec_.get(); }
  model::CausalLM& model() { return *model_; }
  EngineStats stats() const;  // summed over the data-parallel ranks

  // Attention DP: this engine becomes rank 0 and the front end of the group (data_parallel.h);
  // add_request, abort, step and has_unfinished then act on every rank.
  void set_data_parallel(std::unique_ptr<DataParallelGroup> group);
  DataParallelGroup* data_parallel() { return dp_.get(); }

 private:
  struct Job;
  class Worker;
  friend class DataParallelGroup;

  // This rank's own requests (what the public calls do without data parallelism).
  std::string add_local(const Prompt& prompt, const SamplingParams& params, std::string request_id);
  void abort_local(const std::string& request_id);
  bool has_unfinished_local() const;
  std::vector<RequestOutput> step_local(bool include_unfinished);

  void drain_incoming();
  std::vector<ScheduledChunk> schedule();
  std::unique_ptr<Job> plan(std::vector<ScheduledChunk> chunks);
  std::unique_ptr<Job> drop_unresolvable(std::unique_ptr<Job> job);
  void plan_draws(Job& job) const;  // which sample rows the model draws on its device, and how (at launch)
  void launch(std::unique_ptr<Job> job);
  void run_job(Job& job);                 // forward + sampling (worker thread)
  void resolve(Job& job);                 // lands sampled tokens (no job in flight)
  void process(Job& job);                 // stops, detokenization, finishes (overlaps the next forward)
  void recover_from_failure(Job& failed, Job* next);
  void finish(Sequence& seq, const std::string& reason);
  void take_snapshots(const Job& job);    // prefix caching: states that reached a snapshot point
  // Why the sequence ends at its token end-1 ("" = it goes on); detokenizes up to it.
  std::string stop_reason(Sequence& seq, size_t end, bool last);
  // Speculative decoding (speculation.cpp): set up, choose the drafts each decode verifies, verify one
  // chunk's rows, and draft after a step.
  void init_speculation();
  void add_drafts(std::vector<ScheduledChunk>& chunks);
  void verify(const Job& job, size_t first_row, std::vector<sampling::SampleOutput>& out, std::vector<float>& scratch);
  std::span<const float> row_logits(const Job& job, size_t row) const;
  // The sampler's input (no logits, no mask) for the token of `seq` at `position`, after `output`.
  sampling::SampleInput sample_input(const Sequence& seq, std::span<const int32_t> output, int64_t position) const;
  void land_verification(const ScheduledChunk& ch, int emitted);  // rollback of rejected drafts, metrics
  void draft_next(const std::vector<Sequence*>& landed);
  void take_draft(Sequence& seq, spec::Draft draft);
  RequestOutput make_output(const Request& req) const;
  void collect(std::vector<RequestOutput>& outs, bool include_unfinished);

  std::unique_ptr<model::CausalLM> model_;
  std::unique_ptr<TextCodec> codec_;
  EngineOptions options_;
  cache::StateManager states_;
  ModelRunner runner_;  // scheduled chunks -> ForwardBatch -> forward
  Scheduler scheduler_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<Job> inflight_;
  // A finished step's logits buffer, handed to the next plan: a fresh one pays for its first touch (a batch
  // of 768 rows' 397 MB took ~270 ms of page faults on the H200 machine, more than its read-back).
  std::vector<float> spare_logits_;
  std::mutex grammar_mu_;
  std::unique_ptr<vision::VisionStage> vision_;
  std::unique_ptr<GrammarCompiler> grammar_;  // built on the first so_args request
  std::shared_ptr<spec::Drafter> drafter_;    // speculative decoding
  spec::StepCostTable step_cost_;             // confidence scheduling

  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::vector<std::unique_ptr<Request>> retired_;  // finished; freed once no job can see them
  int64_t next_seq_id_ = 0;
  EngineStats stats_;  // written through update_stats, read through stats() (another thread may call it)
  mutable std::mutex stats_mu_;
  template <class F>
  void update_stats(F f) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    f(stats_);
  }

  std::mutex step_mu_;                    // step() is driven by one thread at a time
  std::mutex driver_mu_;                  // guards the three below
  std::thread::id driver_;                // the thread that claimed the engine; none: anyone may step
  int driver_depth_ = 0;
  std::vector<RequestOutput> returned_;
  mutable std::mutex incoming_mu_;        // guards the two queues below and id_counter_
  std::vector<std::unique_ptr<Request>> incoming_;
  std::vector<std::string> aborts_;
  uint64_t id_counter_ = 0;
  std::unordered_set<std::string> live_ids_;  // added and not yet reported finished
  std::unique_ptr<DataParallelGroup> dp_;       // rank 0 of attention DP: the other ranks (destroyed first)
};

}  // namespace deepinfer::engine
