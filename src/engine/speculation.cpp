// Speculative decoding in the engine loop (spec/engine-features.md §1–2). After a step lands a decoding
// sequence's token (its anchor), the drafter proposes the next tokens; the next step's schedule chooses
// how many of them each request verifies (confidence scheduling, or a fixed count), the verified drafts
// ride as extra query tokens of their sequence in the same flat forward, every one of their rows is
// sampled exactly as plain decoding would sample it, drafts are accepted while they equal those tokens
// (spec/acceptance.h: chain speculative sampling for a deterministic drafter), and the state takes back
// the rejected ones with truncate().
#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/job.h"
#include "spec/acceptance.h"
#include "spec/verify_scheduler.h"

namespace deepinfer::engine {

void add_metrics(SpeculativeMetrics& into, const SpeculativeMetrics& m) {
  into.drafted += m.drafted;
  into.verified += m.verified;
  into.accepted += m.accepted;
  into.decode_steps += m.decode_steps;
  const size_t n = std::max(into.verified_at.size(), m.verified_at.size());
  into.verified_at.resize(n);
  into.accepted_at.resize(n);
  for (size_t j = 0; j < m.verified_at.size(); ++j) {
    into.verified_at[j] += m.verified_at[j];
    into.accepted_at[j] += m.accepted_at[j];
  }
}

void Engine::init_speculation() {
  if (!options_.speculative) return;
  options_.async_scheduling = false;  // a step's drafts need the previous step's tokens before it is planned
  drafter_ = options_.drafter ? options_.drafter : std::shared_ptr<spec::Drafter>(spec::make_dspark_drafter(*model_));
  check(drafter_ != nullptr, "speculative decoding needs a model with a DSpark draft head (a DeepSeek-V4.1 checkpoint "
        "with dspark_block_size > 0); this model has none");
  const int block = drafter_->block_size();
  if (options_.num_draft_tokens == 0) options_.num_draft_tokens = std::min(5, block);  // DEEPINFER_USE_NEXTN_DECODE's default
  const int k = options_.num_draft_tokens;
  check(k >= 1 && k <= block, "DEEPINFER_USE_NEXTN_DECODE / speculative num_draft_tokens = ", k,
        " must be between 1 and the draft head's block size ", block, " (the head drafts ", block,
        " tokens a step; more could never be verified)");
  const int64_t rollback = model_->new_sequence()->max_rollback();
  check(k <= rollback, "speculative num_draft_tokens = ", k, " needs states that take back ", k,
        " tokens, and this model's take back ", rollback, " (rejected drafts would corrupt the state)");
  if (!options_.confidence_scheduling) return;
  if (!options_.step_costs.empty()) {
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < options_.step_costs.size(); ++i) sizes.push_back(int64_t{1} << i);
    step_cost_ = spec::StepCostTable(std::move(sizes), options_.step_costs);
    return;
  }
  // SPS(B) measured on this engine's own forward: one sequence of B tokens, a logit row per token (as
  // verification asks), up to the largest step speculation is likely to make; longer ones extrapolate.
  const int64_t most = std::min<int64_t>({options_.max_num_batched_tokens,
                                          int64_t{options_.max_num_seqs} * (k + 1), int64_t{128}});
  auto st = model_->new_sequence();
  std::vector<float> logits;
  step_cost_ = spec::StepCostTable::profile(
      [&](int64_t b) {
        st->reset();
        model::ForwardBatch fb;
        fb.token_ids.assign(b, 0);
        fb.seq_start = {0, static_cast<int32_t>(b)};
        fb.states = {st.get()};
        for (int32_t i = 0; i < b; ++i) fb.logit_rows.push_back(i);
        model_->forward(fb, logits);
      },
      most);
  st->reset();
}

void Engine::add_drafts(std::vector<ScheduledChunk>& chunks) {
  if (!drafter_) return;
  int64_t base = 0, sampling = 0;
  for (const auto& ch : chunks) base += ch.count, sampling += ch.sample;
  std::vector<size_t> which;
  std::vector<spec::VerifyRequest> reqs;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ScheduledChunk& ch = chunks[c];
    const Sequence& s = *ch.seq;
    if (!ch.sample || ch.count != 1 || s.draft.empty() || s.draft_for != s.tokens.size()) continue;
    // room: the emitted tokens (accepted drafts + 1) stay within max_tokens and max_model_len
    const int64_t room = std::min<int64_t>(s.request->params.max_tokens - s.num_output(),
                                           options_.max_model_len - static_cast<int64_t>(s.tokens.size())) - 1;
    const int64_t cap = std::min<int64_t>({room, options_.num_draft_tokens, static_cast<int64_t>(s.draft.size())});
    if (cap <= 0) continue;
    which.push_back(c);
    reqs.push_back({s.draft_confidence, static_cast<int>(cap)});
  }
  int64_t verify_budget = 0;
  update_stats([](EngineStats& st) { st.last_verify_budget = 0; });
  if (reqs.empty()) return;
  const int64_t budget = options_.max_num_batched_tokens - base;
  const spec::VerifyPlan plan = options_.confidence_scheduling
                                    ? spec::schedule_by_confidence(reqs, base, sampling, budget, step_cost_)
                                    : spec::schedule_fixed(reqs, options_.num_draft_tokens, budget);
  for (size_t i = 0; i < which.size(); ++i) {
    ScheduledChunk& ch = chunks[which[i]];
    Sequence& s = *ch.seq;
    const int l = plan.lengths[i];
    // no state room for the drafts: verify none (a decision that never looks at their values)
    if (l == 0 || !states_.reserve(s.id, s.num_computed + l)) continue;
    ch.drafts.assign(s.draft.begin(), s.draft.begin() + l);
    s.num_computed += l;
    verify_budget += l;
  }
  update_stats([&](EngineStats& st) { st.last_verify_budget = verify_budget; });
  if (options_.log_speculation)
    std::fprintf(stderr, "[deepinfer] step %lld: %zu requests with drafts, verifying %lld draft tokens (budget %lld, %s)\n",
                 static_cast<long long>(stats().steps + 1), reqs.size(), static_cast<long long>(verify_budget),
                 static_cast<long long>(budget), options_.confidence_scheduling ? "confidence" : "fixed");
}

void Engine::verify(const Job& job, size_t first_row, std::vector<sampling::SampleOutput>& out,
                    std::vector<float>& scratch) {
  const Job::Row& row = job.rows[first_row];
  const ScheduledChunk& ch = job.chunks[row.chunk];
  const Sequence& seq = *ch.seq;
  const int64_t vocab = model_->vocab_size();
  std::vector<int32_t> output(seq.tokens.begin() + seq.prompt_len(), seq.tokens.begin() + row.position + 1);
  std::vector<uint32_t> mask;
  int fed = 0;  // drafts fed to the grammar matcher, taken back afterwards (resolve() feeds what lands)
  auto draw = [&](int j) {
    if (j > 0) {  // row j sees drafts 0..j-1 as context: penalties, min_tokens, grammar
      output.push_back(ch.drafts[j - 1]);
      if (seq.grammar) {
        check(seq.grammar->accept(ch.drafts[j - 1]), "internal: an accepted draft was outside the grammar");
        ++fed;
      }
    }
    if (const int32_t slot = job.slot[first_row + j]; slot < 0) {  // drawn on the device
      out.push_back(sampling::drawn_sample(job.draws.token[-1 - slot], job.draws.logprob[-1 - slot], row.position + 1 + j));
      return out.back().token;
    }
    sampling::SampleInput in = sample_input(seq, output, row.position + 1 + j);
    in.logits = row_logits(job, first_row + j);
    if (seq.grammar) {
      seq.grammar->fill_bitmask(mask, vocab);
      in.allowed_bitmask = &mask;
    }
    out.push_back(sampling::sample(in, scratch));
    return out.back().token;
  };
  try {
    spec::verify_deterministic(ch.drafts, draw);
  } catch (...) {
    if (seq.grammar) seq.grammar->rollback(fed);
    throw;
  }
  if (seq.grammar) seq.grammar->rollback(fed);
}

void Engine::land_verification(const ScheduledChunk& ch, int emitted) {
  if (!drafter_ || ch.count != 1) return;
  Sequence& s = *ch.seq;
  const int l = static_cast<int>(ch.drafts.size()), accepted = emitted - 1;
  if (l > 0) {  // the state consumed every draft; keep the accepted ones, the new anchor comes next step
    const int64_t keep = ch.start + ch.count + accepted;
    states_.state(s.id)->truncate(keep);
    s.num_computed = keep;
  }
  SpeculativeMetrics& m = s.spec;
  ++m.decode_steps;
  m.verified += l;
  m.accepted += accepted;
  if (static_cast<int>(m.verified_at.size()) < l) m.verified_at.resize(l), m.accepted_at.resize(l);
  for (int j = 0; j < l; ++j) ++m.verified_at[j], m.accepted_at[j] += j < accepted;
  update_stats([&](EngineStats& st) {
    st.draft_tokens_verified += l;
    st.draft_tokens_accepted += accepted;
  });
}

// The sequences that just landed a token get their next drafts, in one drafter call (one flat forward
// of every draft block). A failing batch is retried sequence by sequence, so an error ends only the
// request that caused it.
void Engine::draft_next(const std::vector<Sequence*>& landed) {
  std::vector<Sequence*> want;
  std::vector<model::SequenceState*> states;
  std::vector<int32_t> anchors;
  for (Sequence* sp : landed) {
    Sequence& s = *sp;
    s.draft.clear();
    if (!drafter_ || s.finished() || s.status != SeqStatus::Running || !states_.holds(s.id)) continue;
    model::SequenceState* st = states_.state(s.id);
    if (s.num_computed + 1 != static_cast<int64_t>(s.tokens.size()) || st->length() != s.num_computed) continue;
    if (s.request->params.max_tokens - s.num_output() <= 1 ||
        options_.max_model_len - static_cast<int64_t>(s.tokens.size()) <= 1)
      continue;  // its next token is its last: nothing to verify
    want.push_back(sp);
    states.push_back(st);
    anchors.push_back(s.tokens.back());
  }
  if (want.empty()) return;
  std::vector<spec::Draft> drafts;
  try {
    drafts = drafter_->draft(states, anchors);
  } catch (const std::exception&) {
    drafts.clear();
  }
  for (size_t i = 0; i < want.size(); ++i) {
    Sequence& s = *want[i];
    spec::Draft d;
    if (drafts.size() == want.size()) {
      d = std::move(drafts[i]);
    } else {
      try {
        d = drafter_->draft(*states[i], anchors[i]);
      } catch (const std::exception& e) {
        s.request->error = std::string("drafting failed: ") + e.what();
        finish(s, "error");
        continue;
      }
    }
    take_draft(s, std::move(d));
  }
}

void Engine::take_draft(Sequence& s, spec::Draft d) {
  s.spec.drafted += static_cast<int64_t>(d.tokens.size());
  size_t keep = d.tokens.size();
  if (s.grammar) {  // only drafts the grammar allows, and none that ends it (its row after would have no token)
    int fed = 0;
    for (keep = 0; keep < d.tokens.size() && s.grammar->accept(d.tokens[keep]); ++keep) {
      ++fed;
      if (s.grammar->terminated()) break;
    }
    s.grammar->rollback(fed);
  }
  d.tokens.resize(keep);
  d.confidence.resize(keep);
  s.draft = std::move(d.tokens);
  s.draft_confidence = std::move(d.confidence);
  s.draft_for = s.tokens.size();
}

}  // namespace deepinfer::engine
