#include "engine/engine.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <span>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "engine/data_parallel.h"
#include "engine/decoder_replay.h"
#include "engine/job.h"
#include "core/counter_rng.h"
#include "sampling/sampler.h"

namespace deepinfer::engine {

EngineOptions resolve_options(const EngineConfig& c) {
  EngineOptions o;
  o.max_num_seqs = c.max_num_seqs > 0 ? c.max_num_seqs : static_cast<int>(env_int("DEEPINFER_MAX_NUM_SEQS"));
  o.max_num_batched_tokens = c.max_num_batched_tokens > 0 ? c.max_num_batched_tokens
                                                          : static_cast<int>(env_int("DEEPINFER_MAX_NUM_BATCHED_TOKENS"));
  o.num_state_blocks = c.num_state_blocks;
  o.async_scheduling = c.async_scheduling.value_or(env_bool("DEEPINFER_ASYNC_SCHEDULING"));
  o.batch_invariant = c.batch_invariant.value_or(env_bool("DEEPINFER_BATCH_INVARIANT"));
  o.device_sampling = c.device_sampling.value_or(env_bool("DEEPINFER_DEVICE_SAMPLING"));
  o.seed = c.seed;
  o.prefix_caching = c.enable_prefix_caching.value_or(true);
  check(c.prefix_block_tokens >= 0, "prefix_block_tokens must be positive (0: the default), got ", c.prefix_block_tokens);
  if (c.prefix_block_tokens > 0) o.prefix_block_tokens = c.prefix_block_tokens;
  o.eos_token_ids = c.eos_token_ids;
  if (c.max_model_len > 0) o.max_model_len = c.max_model_len;
  o.max_logprobs = c.max_logprobs;
  const SpeculativeConfig& sc = c.speculative;
  check(sc.num_draft_tokens >= 0, "speculative.num_draft_tokens must be >= 0 (0: DEEPINFER_USE_NEXTN_DECODE), got ",
        sc.num_draft_tokens);
  o.speculative = sc.enabled.value_or(env_bool("DEEPINFER_ENABLE_MTP_VARLEN"));
  o.confidence_scheduling = sc.confidence_scheduling.value_or(env_bool("DEEPINFER_ENABLE_MTP_VARLEN"));
  // 0: not asked for; the engine then takes the default draft count, capped at the draft head's block size
  const char* nextn = std::getenv("DEEPINFER_USE_NEXTN_DECODE");
  o.num_draft_tokens = sc.num_draft_tokens > 0      ? sc.num_draft_tokens
                       : nextn != nullptr && *nextn ? static_cast<int>(env_int("DEEPINFER_USE_NEXTN_DECODE"))
                                                    : 0;
  o.step_costs = sc.step_costs;
  o.log_speculation = sc.log_steps;
  // 0 (or -1 for the byte budget) means "the default"; anything below is a mistake, not a default.
  check(c.max_num_seqs >= 0, "max_num_seqs must be positive, got ", c.max_num_seqs);
  check(c.max_num_batched_tokens >= 0, "max_num_batched_tokens must be positive, got ", c.max_num_batched_tokens);
  check(c.max_model_len >= 0, "max_model_len must be positive, got ", c.max_model_len);
  check(c.state_memory_bytes >= -1, "state_memory_bytes must be >= 0 (0: unlimited), got ", c.state_memory_bytes);
  check(c.num_state_blocks >= 0, "num_state_blocks must be >= 0 (0: from state_memory_bytes), got ", c.num_state_blocks);
  check(c.max_logprobs >= 0, "max_logprobs must be >= 0, got ", c.max_logprobs);
  check(o.max_num_seqs > 0, "max_num_seqs must be positive, got ", o.max_num_seqs);
  check(o.max_num_batched_tokens > 0, "max_num_batched_tokens must be positive, got ", o.max_num_batched_tokens);
  return o;
}

// Runs jobs on one background thread (async scheduling) or inline.
class Engine::Worker {
 public:
  explicit Worker(bool threaded) {
    if (threaded) thread_ = std::thread([this] { loop(); });
  }
  ~Worker() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void submit(std::function<void()> fn) {
    if (!thread_.joinable()) return fn();
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = std::move(fn);
      busy_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || fn_; });
      if (stop_) return;
      auto fn = std::move(fn_);
      fn_ = nullptr;
      lock.unlock();
      fn();
      lock.lock();
      busy_ = false;
      cv_.notify_all();
    }
  }
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> fn_;
  bool busy_ = false, stop_ = false;
};

Engine::Engine(std::unique_ptr<model::CausalLM> model, std::unique_ptr<TextCodec> codec, EngineOptions options)
    : model_(std::move(model)),
      codec_(std::move(codec)),
      options_(std::move(options)),
      states_(*model_, options_.num_state_blocks),
      runner_(*model_, states_),
      scheduler_({options_.max_num_seqs, options_.max_num_batched_tokens, options_.max_model_len,
                  options_.batch_invariant, std::min(64, options_.max_num_batched_tokens),
                  decoder_replay_keep(*model_)},
                 states_),
      worker_(std::make_unique<Worker>(options_.async_scheduling && !options_.speculative)) {
  if (options_.batch_invariant) model_->set_batch_invariant(true);
  check(options_.prefix_block_tokens > 0, "prefix_block_tokens must be positive, got ", options_.prefix_block_tokens);
  // Batch-invariant chunks end at multiples of the invariant chunk; a cached prefix must end on one too.
  check(!options_.prefix_caching || !options_.batch_invariant ||
            options_.prefix_block_tokens % scheduler_.config().invariant_chunk == 0,
        "prefix_block_tokens = ", options_.prefix_block_tokens, " must be a multiple of ",
        scheduler_.config().invariant_chunk, " in batch-invariant mode (or turn prefix caching off)");
  // A model whose states cannot be copied (DeepSeek-V4) runs with prefix caching off.
  if (options_.prefix_caching && model_->can_copy_states()) states_.enable_prefix_cache(options_.prefix_block_tokens);
  options_.prefix_caching = prefix_caching();
  init_speculation();
}

Engine::~Engine() {
  if (inflight_) worker_->wait();
}

std::string Engine::add_request(const Prompt& prompt, const SamplingParams& params, std::string request_id) {
  if (dp_) return dp_->add_request(prompt, params, std::move(request_id));
  return add_local(prompt, params, std::move(request_id));
}

std::string Engine::add_local(const Prompt& prompt, const SamplingParams& params, std::string request_id) {
  params.validate();
  check(params.n <= options_.max_num_seqs, "SamplingParams.n = ", params.n, " is above max_num_seqs = ",
        options_.max_num_seqs, " (the n samples of a prompt run side by side)");
  if (params.logprobs)
    check(*params.logprobs <= options_.max_logprobs, "SamplingParams.logprobs = ", *params.logprobs,
          " is above max_logprobs = ", options_.max_logprobs, " (an engine argument)");
  if (params.prompt_logprobs)
    check(*params.prompt_logprobs <= options_.max_logprobs, "SamplingParams.prompt_logprobs = ",
          *params.prompt_logprobs, " is above max_logprobs = ", options_.max_logprobs, " (an engine argument)");
  for (int32_t t : params.stop_token_ids)
    check(t >= 0 && t < model_->vocab_size(), "SamplingParams.stop_token_ids: ", t, " is outside the vocabulary [0, ",
          model_->vocab_size(), ")");
  auto req = std::make_unique<Request>();
  req->prompt_text = prompt.text;
  req->prompt = prompt.token_ids;
  if (req->prompt.empty() && !prompt.text.empty()) {
    check(codec_ != nullptr, "this model has no tokenizer: pass token ids (prompt_token_ids) instead of text");
    req->prompt = codec_->encode(prompt.text);
  }
  check(!req->prompt.empty(), "the prompt is empty");
  if (!prompt.images.empty() || vision_) {  // image placeholders -> spans of vision rows
    vision::ImagePrompt ip = vision::prepare_prompt(vision_.get(), req->prompt, prompt.images, options_.max_model_len - 1);
    req->prompt = std::move(ip.ids);
    req->embed_positions = std::move(ip.span_positions);
    req->embed_rows = std::move(ip.span_rows);
  }
  const int64_t vocab = model_->vocab_size();
  for (int32_t t : req->prompt) check(t >= 0 && t < vocab, "prompt token id ", t, " is outside the vocabulary [0, ", vocab, ")");
  int64_t len = static_cast<int64_t>(req->prompt.size());
  check(len < options_.max_model_len, "the prompt has ", len, " tokens, more than max_model_len - 1 = ",
        options_.max_model_len - 1, " allows");
  check(states_.can_ever_hold(len + 1), "the prompt needs ", states_.blocks_for(len + 1),
        " state blocks but the state budget has only ", states_.total_blocks());
  check(params.stop.empty() || codec_, "stop strings need a tokenizer, and this model has none");
  for (auto [t, b] : params.logit_bias) check(t < vocab, "logit_bias token id ", t, " is outside the vocabulary");
  req->params = params;
  if (!params.so_args.empty()) {
    check(codec_ != nullptr, "structured output (so_args) needs a tokenizer, and this model has none");
    std::lock_guard<std::mutex> lock(grammar_mu_);
    if (!grammar_) {
      std::vector<std::string> bytes = codec_->token_bytes();
      bytes.resize(vocab);  // the logit width; ids past the tokenizer are never text
      grammar_ = make_grammar_compiler(std::move(bytes), options_.eos_token_ids);
    }
    check(grammar_ != nullptr, "this build has no structured-output library");
    for (int i = 0; i < params.n; ++i) req->grammars.push_back(grammar_->make(params.so_args));
  }
  std::lock_guard<std::mutex> lock(incoming_mu_);
  req->id = request_id.empty() ? std::to_string(id_counter_) : std::move(request_id);
  ++id_counter_;
  for (auto& r : incoming_) check(r->id != req->id, "request id '", req->id, "' is already in use");
  check(!live_ids_.count(req->id), "request id '", req->id, "' is already in use");
  live_ids_.insert(req->id);
  req->seed = params.seed ? *params.seed : splitmix64(options_.seed ^ (id_counter_ * 0x2545F4914F6CDD1DULL));
  incoming_.push_back(std::move(req));
  return incoming_.back()->id;
}

void Engine::abort(const std::string& request_id) {
  if (dp_) return dp_->abort(request_id);
  abort_local(request_id);
}

void Engine::abort_local(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(incoming_mu_);
  aborts_.push_back(request_id);
}

bool Engine::has_unfinished() const { return dp_ ? dp_->has_unfinished() : has_unfinished_local(); }

bool Engine::has_unfinished_local() const {
  std::lock_guard<std::mutex> lock(incoming_mu_);
  return !live_ids_.empty();
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);  // step() writes them on the driving thread
    s = stats_;
  }
  s.preemptions = scheduler_.num_preemptions();
  for (int r = 1; dp_ && r < dp_->size(); ++r) {  // lock-step: the ranks' steps are the same steps
    const EngineStats o = dp_->rank(r).stats();
    s.forward_tokens += o.forward_tokens, s.preemptions += o.preemptions, s.failed_batches += o.failed_batches;
    s.max_seqs_in_step = std::max(s.max_seqs_in_step, o.max_seqs_in_step);
    s.draft_tokens_verified += o.draft_tokens_verified, s.draft_tokens_accepted += o.draft_tokens_accepted;
    s.device_drawn_rows += o.device_drawn_rows;
    s.device_idle_ms += o.device_idle_ms, s.device_idle_forwards += o.device_idle_forwards;
    s.waiting_seqs += o.waiting_seqs, s.running_seqs += o.running_seqs;
  }
  return s;
}

void Engine::set_data_parallel(std::unique_ptr<DataParallelGroup> group) {
  check(!dp_ && requests_.empty() && !has_unfinished_local(), "set_data_parallel: call it once, before any request");
  dp_ = std::move(group);
}

void Engine::drain_incoming() {
  std::vector<std::unique_ptr<Request>> added;
  std::vector<std::string> aborted;
  {
    std::lock_guard<std::mutex> lock(incoming_mu_);
    added.swap(incoming_);
    aborted.swap(aborts_);
  }
  for (auto& r : added) {
    r->prompt_logprobs.assign(1, {});  // the first prompt token has no context
    for (int i = 0; i < r->params.n; ++i) {
      auto s = std::make_unique<Sequence>();
      s->id = next_seq_id_++;
      s->request = r.get();
      s->index = i;
      s->tokens = r->prompt;
      s->out.index = i;
      if (!r->grammars.empty()) s->grammar = r->grammars[i];
      scheduler_.add(s.get());
      r->seqs.push_back(std::move(s));
    }
    std::string id = r->id;
    requests_[id] = std::move(r);
  }
  for (auto& id : aborted) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    for (auto& s : it->second->seqs)
      if (!s->finished()) finish(*s, "abort");
  }
}

std::unique_ptr<Engine::Job> Engine::plan(std::vector<ScheduledChunk> chunks) {
  auto job = std::make_unique<Job>();
  job->logits = std::exchange(spare_logits_, {});
  job->chunks = std::move(chunks);
  auto& b = job->batch;
  ModelRunner::layout(job->chunks, b);
  for (int c = 0; c < static_cast<int>(job->chunks.size()); ++c) {
    const ScheduledChunk& ch = job->chunks[c];
    const Request& req = *ch.seq->request;
    if (req.params.prompt_logprobs && ch.seq->index == 0) {
      int64_t from = std::max<int64_t>(ch.start, static_cast<int64_t>(req.prompt_logprobs.size()) - 1);
      for (int64_t p = from; p < ch.start + ch.count && p + 1 < ch.seq->prompt_len(); ++p) {
        b.logit_rows.push_back(b.seq_start[c] + static_cast<int32_t>(p - ch.start));
        job->rows.push_back({c, p, false});
      }
    }
    if (ch.sample) {  // the chunk's last token, then each draft (verification)
      const int l = static_cast<int>(ch.drafts.size());
      for (int j = 0; j <= l; ++j) {
        b.logit_rows.push_back(b.seq_start[c + 1] - 1 - l + j);
        job->rows.push_back({c, ch.start + ch.count - 1 + j, true, j});
      }
    }
  }
  update_stats([&](EngineStats& st) {
    st.max_seqs_in_step = std::max<int>(st.max_seqs_in_step, static_cast<int>(job->chunks.size()));
  });
  return job;
}

// Sample rows are drawn by the model on its device with the noise and truncation the host sampler
// would use (sampler.h: draw_params), so that only their token crosses: every row but those asking for
// logprobs (the host ranks the whole row) and grammar rows verifying drafts (their mask needs the drafts
// fed to the matcher). Built at launch: the penalties and the grammar's mask need the tokens the
// previous step sampled.
void Engine::plan_draws(Job& job) const {
  job.draws = {};
  job.slot.assign(job.rows.size(), 0);
  job.batch.draws = nullptr;
  const int64_t vocab = model_->vocab_size();
  const bool on = options_.device_sampling && model_->draws_on_device();
  std::vector<int32_t> output;
  std::vector<uint32_t> mask;
  int32_t full = 0;
  for (size_t r = 0; r < job.rows.size(); ++r) {
    const Job::Row& row = job.rows[r];
    const ScheduledChunk& ch = job.chunks[row.chunk];
    const Sequence& seq = *ch.seq;
    const Request& req = *seq.request;
    if (!on || !row.sample || req.params.logprobs || (seq.grammar && !ch.drafts.empty())) {
      job.slot[r] = full++;
      continue;
    }
    // the row's context: what the sequence generated before the chunk's last token, then drafts before row j
    output.assign(seq.tokens.begin() + seq.prompt_len(), seq.tokens.begin() + (row.position + 1 - row.draft));
    output.insert(output.end(), ch.drafts.begin(), ch.drafts.begin() + row.draft);
    ops::DrawRow p = sampling::draw_params(sample_input(seq, output, row.position + 1), vocab, job.draws.adjust);
    if (seq.grammar) {
      seq.grammar->fill_bitmask(mask, vocab);
      p.mask = static_cast<int32_t>(job.draws.masks.size() / mask.size());
      job.draws.masks.insert(job.draws.masks.end(), mask.begin(), mask.end());
    }
    job.slot[r] = -1 - static_cast<int32_t>(job.draws.rows.size());
    job.draws.rows.push_back(static_cast<int32_t>(r));
    job.draws.param.push_back(p);
  }
  if (!job.draws.rows.empty()) job.batch.draws = &job.draws;
}

sampling::SampleInput Engine::sample_input(const Sequence& seq, std::span<const int32_t> output, int64_t position) const {
  const Request& req = *seq.request;
  sampling::SampleInput in;
  in.params = &req.params;
  in.prompt = std::span<const int32_t>(seq.tokens.data(), seq.prompt_len());
  in.output = output;
  if (!req.params.ignore_eos) in.eos_token_ids = options_.eos_token_ids;
  in.seed = req.seed;
  in.stream = static_cast<uint64_t>(seq.index);
  in.position = position;
  return in;
}

std::span<const float> Engine::row_logits(const Job& job, size_t row) const {
  const int64_t vocab = model_->vocab_size();
  check(job.slot[row] >= 0, "internal: logits of a row drawn on the device");
  return std::span<const float>(job.logits.data() + job.slot[row] * vocab, vocab);
}

// A plan made while the previous step ran assumed each of its samples would land; one that failed
// (sampling error, grammar rejection) leaves nothing to feed: drop that sequence's chunk (it
// finishes with an error in process()).
std::unique_ptr<Engine::Job> Engine::drop_unresolvable(std::unique_ptr<Job> job) {
  std::vector<ScheduledChunk> keep;
  for (auto& ch : job->chunks) {
    if (!ch.seq->finished() && ch.start + ch.count <= static_cast<int64_t>(ch.seq->tokens.size())) {
      keep.push_back(ch);
    } else if (ch.sample) {
      --ch.seq->pending;
    }
  }
  if (keep.size() == job->chunks.size()) return job;
  return keep.empty() ? nullptr : plan(std::move(keep));
}

void Engine::launch(std::unique_ptr<Job> job) {
  // No forward is in flight when a job launches: states released by scheduling (preemption) give
  // their pool blocks back now, before this forward allocates the blocks reserved in their place.
  states_.recycle();
  // Sequences admitted after a cached prefix get its state now (nothing else reads or writes states).
  int64_t restored = 0, hits = 0;
  for (const ScheduledChunk& ch : job->chunks) {
    Sequence& seq = *ch.seq;
    if (!seq.restore_from) continue;
    states_.restore(seq.id, *seq.restore_from);
    seq.restore_from.reset();
    restored += ch.start;
    ++hits;
  }
  // SWA bounded replay: the chunk that crosses a sequence's replay_from after a cached prefix or an
  // earlier chunk starts its decoder rings there, as the one-chunk prefill does (a chunk from 0 is
  // cut by the model itself).
  for (const ScheduledChunk& ch : job->chunks) {
    const int64_t from = ch.seq->replay_from;
    if (from > 0 && ch.start > 0 && ch.start <= from && from < ch.start + ch.count)
      start_decoder_window(*model_, *states_.state(ch.seq->id), from);
  }
  // Fill the token ids now: tokens sampled by the step that just finished are known at last.
  auto& b = job->batch;
  runner_.fill(job->chunks, b);
  plan_draws(*job);
  update_stats([&](EngineStats& st) {
    ++st.steps;
    st.forward_tokens += static_cast<int64_t>(b.token_ids.size());
    st.device_drawn_rows += static_cast<int64_t>(job->draws.rows.size());
    st.prefix_cached_tokens += restored;
    st.prefix_hits += hits;
    st.prefix_cached_blocks = states_.cached_blocks();
    st.prefix_evictions = states_.evictions();
  });
  inflight_ = std::move(job);
  Job* j = inflight_.get();
  worker_->submit([this, j] { run_job(*j); });
}

void Engine::run_job(Job& job) {
  try {
    runner_.run(job.batch, job.logits);
    if (const double idle = model_->idle_before_last_forward_ms(); idle >= 0)
      update_stats([&](EngineStats& st) { st.device_idle_ms += idle, ++st.device_idle_forwards; });
    const size_t full = job.rows.size() - job.draws.rows.size();
    check(job.logits.size() == full * static_cast<size_t>(model_->vocab_size()) &&
              job.draws.token.size() == job.draws.rows.size(),
          "the model returned ", job.logits.size(), " logits for ", full, " rows");
  } catch (const std::exception& e) {
    job.failed = true;
    job.error = e.what();
    return;
  }
  job.samples.resize(job.chunks.size());
  job.sample_errors.resize(job.chunks.size());
  std::vector<float> scratch;
  for (size_t r = 0; r < job.rows.size(); ++r) {
    const auto& row = job.rows[r];
    const Sequence& seq = *job.chunks[row.chunk].seq;
    if (!row.sample) {
      int top = *seq.request->params.prompt_logprobs;
      try {
        job.prompt_lps.emplace_back(row.chunk, sampling::position_logprobs(row_logits(job, r), seq.tokens[row.position + 1], top));
        job.prompt_lp_positions.push_back(row.position + 1);
      } catch (const std::exception& e) {  // fails its sequence in process(), even in a chunk that samples nothing
        job.sample_errors[row.chunk] = "prompt logprobs of position " + std::to_string(row.position + 1) + ": " + e.what();
      }
      continue;
    }
    if (row.draft > 0) continue;  // verified with the chunk's first sample row
    try {
      verify(job, r, job.samples[row.chunk], scratch);
    } catch (const std::exception& e) {
      job.sample_errors[row.chunk] = e.what();
    }
  }
}

void Engine::resolve(Job& job) {
  job.landed.assign(job.chunks.size(), 0);
  for (size_t c = 0; c < job.chunks.size(); ++c) {
    const ScheduledChunk& ch = job.chunks[c];
    Sequence& seq = *ch.seq;
    if (!ch.sample) continue;
    --seq.pending;
    if (seq.finished() || !job.sample_errors[c].empty()) continue;  // errors finish in process()
    int n = 0;  // logprobs are added in process(), which knows where a stop cuts accepted drafts
    for (const auto& s : job.samples[c]) {
      if (seq.grammar && !seq.grammar->accept(s.token)) {
        job.sample_errors[c] = "structured output: the grammar rejected token " + std::to_string(s.token);
        break;
      }
      seq.tokens.push_back(s.token);
      ++n;
    }
    if (!job.sample_errors[c].empty()) continue;
    land_verification(ch, n);
    scheduler_.end_isolation(&seq);
    job.landed[c] = n;
  }
  for (size_t i = 0; i < job.prompt_lps.size(); ++i) {
    Request& req = *job.chunks[job.prompt_lps[i].first].seq->request;
    if (job.prompt_lp_positions[i] == static_cast<int64_t>(req.prompt_logprobs.size()))
      req.prompt_logprobs.push_back(std::move(job.prompt_lps[i].second));
  }
}

void Engine::recover_from_failure(Job& failed, Job* next) {
  update_stats([](EngineStats& st) { ++st.failed_batches; });
  std::vector<Sequence*> seqs;
  for (auto& ch : failed.chunks) seqs.push_back(ch.seq);
  bool alone = failed.chunks.size() == 1;
  if (next)
    for (auto& ch : next->chunks)
      if (std::find(seqs.begin(), seqs.end(), ch.seq) == seqs.end()) seqs.push_back(ch.seq);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence* s = seqs[i];
    s->pending = 0;  // nothing of the failed step or of the dropped plan lands
    if (s->finished()) continue;
    bool in_failed = i < failed.chunks.size();
    if (in_failed && alone) {
      s->request->error = "the model failed on this request: " + failed.error;
      finish(*s, "error");
      continue;
    }
    scheduler_.preempt(s, in_failed);  // recomputed from scratch; what it generated is kept
  }
}

void Engine::take_snapshots(const Job& job) {
  if (!prefix_caching()) return;
  int64_t taken = 0;
  for (const ScheduledChunk& ch : job.chunks) {
    Sequence& seq = *ch.seq;
    std::vector<int64_t>& at = seq.snapshot_at;
    if (at.empty() || seq.finished() || !states_.holds(seq.id)) continue;
    const int64_t len = states_.state(seq.id)->length();
    while (!at.empty() && at.front() < len) at.erase(at.begin());  // (passed: not a chunk end)
    if (at.empty() || at.front() != len) continue;
    at.erase(at.begin());
    taken += states_.snapshot(seq.id, std::span<const int32_t>(seq.tokens).first(len));
  }
  update_stats([&](EngineStats& st) {
    st.prefix_snapshots += taken;
    st.prefix_cached_blocks = states_.cached_blocks();
    st.prefix_evictions = states_.evictions();
  });
}

void Engine::finish(Sequence& seq, const std::string& reason) {
  seq.status = SeqStatus::Finished;
  seq.out.finish_reason = reason;
  seq.request->changed = true;
  scheduler_.remove(&seq);
}

void Engine::process(Job& job) {
  for (size_t c = 0; c < job.chunks.size(); ++c) {
    Sequence& seq = *job.chunks[c].seq;
    Request& req = *seq.request;
    if (seq.finished()) continue;
    if (!job.sample_errors[c].empty()) {
      req.error = "sampling failed: " + job.sample_errors[c];
      finish(seq, "error");
      continue;
    }
    if (!job.chunks[c].sample) continue;
    req.changed = true;
    // Each landed token in order: a stop inside accepted drafts drops the tokens after it.
    const int n = job.landed[c];
    const size_t first = seq.tokens.size() - n;
    for (int k = 0; k < n; ++k) {
      const sampling::SampleOutput& s = job.samples[c][k];
      seq.out.cumulative_logprob += s.logprob;
      if (req.params.logprobs) seq.out.logprobs.push_back(s.logprobs);
      std::string reason = stop_reason(seq, first + k + 1, k == n - 1);
      if (reason.empty()) continue;
      seq.tokens.resize(first + k + 1);
      finish(seq, reason);
      break;
    }
  }
}

std::string Engine::stop_reason(Sequence& seq, size_t end, bool last) {
  const SamplingParams& p = seq.request->params;
  const int32_t tok = seq.tokens[end - 1];
  const int64_t n_out = static_cast<int64_t>(end) - seq.prompt_len();
  if (codec_ && p.detokenize)
    seq.text.update(*codec_, std::span<const int32_t>(seq.tokens).subspan(seq.prompt_len(), n_out), p.skip_special_tokens);
  const auto& eos = options_.eos_token_ids;
  if (!p.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) return "stop";
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end()) {
    seq.out.stop_token = tok;
    return "stop";
  }
  if (auto hit = p.stop.empty() || n_out < p.min_tokens ? std::nullopt
                                                        : seq.text.find_stop(p.stop, p.include_stop_str_in_output)) {
    seq.out.stop_string = *hit;
    return "stop";
  }
  if (last && seq.grammar && seq.grammar->terminated()) return "stop";  // (drafts never end the grammar early)
  if (n_out >= p.max_tokens || static_cast<int64_t>(end) >= options_.max_model_len) return "length";
  return "";
}

RequestOutput Engine::make_output(const Request& req) const {
  RequestOutput o;
  o.request_id = req.id;
  o.prompt = req.prompt_text;
  o.prompt_token_ids = req.prompt;
  if (req.params.prompt_logprobs) o.prompt_logprobs = req.prompt_logprobs;
  for (auto& s : req.seqs) {
    CompletionOutput c = s->out;
    c.text = s->finished() ? s->text.text() : s->text.visible(req.params.stop);
    c.token_ids.assign(s->tokens.begin() + s->prompt_len(), s->tokens.end());
    o.outputs.push_back(std::move(c));
    add_metrics(o.metrics.speculative, s->spec);
    o.metrics.num_cached_tokens = std::max(o.metrics.num_cached_tokens, s->cached_tokens);
  }
  o.finished = req.finished();
  o.error = req.error;
  return o;
}

void Engine::collect(std::vector<RequestOutput>& outs, bool include_unfinished) {
  for (auto it = requests_.begin(); it != requests_.end();) {
    Request& req = *it->second;
    bool done = req.finished();
    if (req.changed && (done || include_unfinished)) outs.push_back(make_output(req));
    req.changed = false;
    if (!done) {
      ++it;
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(incoming_mu_);
      live_ids_.erase(req.id);
    }
    retired_.push_back(std::move(it->second));  // an in-flight job may still point at it
    it = requests_.erase(it);
  }
  if (!inflight_) retired_.clear();
}

std::vector<ScheduledChunk> Engine::schedule() {
  auto chunks = scheduler_.schedule();
  // A sequence that outgrew the whole state budget ends as if it hit max_model_len.
  for (Sequence* s : scheduler_.take_out_of_room()) finish(*s, "length");
  return chunks;
}

void Engine::claim_driver() {
  std::lock_guard<std::mutex> lock(driver_mu_);
  const auto me = std::this_thread::get_id();
  check(driver_ == std::thread::id() || driver_ == me,
        "the engine is being driven by another thread (LLM.generate or a step loop there); drive one engine from "
        "one thread at a time, or wait for that call to return");
  driver_ = me;
  ++driver_depth_;
}

void Engine::release_driver() {
  std::lock_guard<std::mutex> lock(driver_mu_);
  if (driver_ == std::this_thread::get_id() && --driver_depth_ == 0) driver_ = std::thread::id();
}

void Engine::return_outputs(std::vector<RequestOutput> outs) {
  std::lock_guard<std::mutex> lock(driver_mu_);
  for (auto& o : outs) returned_.push_back(std::move(o));
}

std::vector<RequestOutput> Engine::step(bool include_unfinished) {
  std::vector<RequestOutput> outs;
  {
    std::lock_guard<std::mutex> lock(driver_mu_);
    check(driver_ == std::thread::id() || driver_ == std::this_thread::get_id(),
          "step(): the engine is being driven by another thread (LLM.generate there); its requests' results would "
          "be lost, so this call is refused");
    outs.swap(returned_);  // outputs a driver received for requests that are not its own
  }
  std::vector<RequestOutput> mine = dp_ ? dp_->step(include_unfinished) : step_local(include_unfinished);
  outs.insert(outs.end(), std::make_move_iterator(mine.begin()), std::make_move_iterator(mine.end()));
  return outs;
}

std::vector<RequestOutput> Engine::step_local(bool include_unfinished) {
  std::vector<RequestOutput> outs;
  std::lock_guard<std::mutex> one_stepper(step_mu_);
  // Requests retired before this step may still be seen by the job in flight; this step waits
  // for and processes that job, so they are freed when the step returns.
  std::vector<std::unique_ptr<Request>> expired = std::move(retired_);
  retired_.clear();
  drain_incoming();
  if (!inflight_) {
    auto chunks = schedule();
    add_drafts(chunks);
    if (!chunks.empty() || options_.lockstep) launch(plan(std::move(chunks)));
  }
  std::unique_ptr<Job> next;
  // Lock-step ranks with async scheduling keep one forward in flight between steps, an empty one when
  // nothing is planned: every rank launches one forward per step, so the ranks' forwards pair up.
  const bool keep_in_flight = options_.lockstep && options_.async_scheduling;
  if (inflight_ && options_.async_scheduling) {  // overlaps the forward of the in-flight step
    auto chunks = schedule();
    if (!chunks.empty() || keep_in_flight) next = plan(std::move(chunks));
  }
  if (inflight_) {
    worker_->wait();
    // Safe point: no forward in flight, so released states can be reset. Before the snapshots: a state
    // released while that forward ran (an abort, a preemption by the schedule above) still holds pool
    // blocks the budget counts as free, and a snapshot allocates at once.
    states_.recycle();
    std::unique_ptr<Job> done = std::move(inflight_);
    if (done->failed) {
      recover_from_failure(*done, next.get());
      next.reset();
    } else {
      resolve(*done);
      take_snapshots(*done);  // before the next forward moves the states on
    }
    if (next) next = drop_unresolvable(std::move(next));
    if (!next && keep_in_flight) next = plan({});
    if (next) launch(std::move(next));
    if (!done->failed) {
      process(*done);
      std::vector<Sequence*> landed;
      for (size_t c = 0; c < done->chunks.size(); ++c)
        if (done->landed[c] > 0) landed.push_back(done->chunks[c].seq);
      draft_next(landed);
    }
    if (done->logits.capacity() > spare_logits_.capacity()) spare_logits_ = std::move(done->logits);
  }
  collect(outs, include_unfinished);
  // Every request has finished: a forward launched ahead for them (async scheduling) serves no one.
  // Wait for it and drop it, so that the idle engine holds no state and no request until its next step.
  if (inflight_ && !has_unfinished() && !keep_in_flight) {
    worker_->wait();
    inflight_.reset();
    retired_.clear();
  }
  if (!inflight_) states_.recycle();  // states released by this step give their blocks back now
  update_stats([&](EngineStats& st) {
    st.state_blocks_reserved = states_.sequence_blocks();
    st.prefix_cached_blocks = states_.cached_blocks();
    st.state_blocks_allocated = states_.pool_blocks();
    st.live_states = states_.num_states();
    st.waiting_seqs = static_cast<int64_t>(scheduler_.num_waiting());
    st.running_seqs = static_cast<int64_t>(scheduler_.num_running());
  });
  return outs;
}

}  // namespace deepinfer::engine
