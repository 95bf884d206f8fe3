// Engine core on the deterministic test double: scheduling, chunked prefill, preemption, async
// scheduling, seeded sampling, stops, aborts and error paths. Equalities are bitwise.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <random>

#include "core/error.h"
#include "engine_helpers.h"
#include "test_model.h"

namespace deepinfer::engine {
namespace {

using testing::HashLM;
using testing_helpers::expect_same;
using testing_helpers::prompt_of;
using testing_helpers::run;
using testing::LetterCodec;

EngineOptions opts(bool async = true) {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 64;
  o.max_model_len = 512;
  o.async_scheduling = async;
  o.eos_token_ids = {};
  return o;
}

std::unique_ptr<Engine> make(EngineOptions o, int32_t poison = -1, bool codec = true, int tokens_per_block = 16) {
  return std::make_unique<Engine>(std::make_unique<HashLM>(97, poison, -1, tokens_per_block),
                                  codec ? std::make_unique<LetterCodec>() : nullptr, o);
}

SamplingParams seeded(uint64_t seed, int max_tokens = 12) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.seed = seed;
  p.max_tokens = max_tokens;
  return p;
}

SamplingParams greedy(int max_tokens = 12) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

// A mixed workload: 12 requests, prompt lengths 1..150, greedy and seeded sampling.
std::map<std::string, RequestOutput> workload(EngineOptions o) {
  auto e = make(o);
  for (int i = 0; i < 12; ++i) {
    SamplingParams p = i % 2 ? seeded(100 + i, 8 + i) : greedy(8 + i);
    if (i % 3 == 0) p.logprobs = 3;
    e->add_request(Prompt::from_ids(prompt_of(i, 1 + i * 13)), p, "r" + std::to_string(i));
  }
  return run(*e);
}

TEST(Engine, GreedyMatchesTheModelStepByStep) {
  HashLM ref;
  auto e = make(opts());
  auto prompt = prompt_of(7, 20);
  e->add_request(Prompt::from_ids(prompt), greedy(10), "a");
  auto out = run(*e).at("a");
  std::vector<int32_t> hist = prompt, expect;
  for (int i = 0; i < 10; ++i) {
    auto row = ref.logits_after(hist);
    int32_t t = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    expect.push_back(t);
    hist.push_back(t);
  }
  EXPECT_EQ(out.outputs[0].token_ids, expect);
  EXPECT_EQ(out.outputs[0].finish_reason, "length");
  EXPECT_TRUE(out.finished);
}

TEST(Engine, AsyncOnAndOffGiveIdenticalOutputs) {
  expect_same(workload(opts(true)), workload(opts(false)));
}

TEST(Engine, ChunkedPrefillGivesIdenticalOutputsAndMixesSequences) {
  EngineOptions small = opts();
  small.max_num_batched_tokens = 7;  // long prompts are prefilled 7 tokens at a time
  auto e = make(small);
  e->add_request(Prompt::from_ids(prompt_of(1, 40)), greedy(4), "x");
  run(*e);
  EXPECT_EQ(e->stats().forward_tokens, 40 + 3);  // prompt once, then one token per decode
  expect_same(workload(opts()), workload(small));
  auto big = make(opts());
  for (int i = 0; i < 4; ++i) big->add_request(Prompt::from_ids(prompt_of(i, 10)), greedy(3));
  run(*big);
  EXPECT_GT(big->stats().max_seqs_in_step, 1);  // one flat batch carries several sequences
}

TEST(Engine, PreemptionUnderATinyBudgetGivesIdenticalOutputs) {
  for (bool async : {false, true}) {
    EngineOptions tiny = opts(async);
    tiny.num_state_blocks = 50;  // 4 tokens a block: the longest request (157 + 19 tokens) needs 44
    auto e = make(tiny, -1, true, 4);
    for (int i = 0; i < 12; ++i) {
      SamplingParams p = i % 2 ? seeded(100 + i, 8 + i) : greedy(8 + i);
      if (i % 3 == 0) p.logprobs = 3;
      e->add_request(Prompt::from_ids(prompt_of(i, 1 + i * 13)), p, "r" + std::to_string(i));
    }
    auto out = run(*e);
    EXPECT_GT(e->stats().preemptions, 0) << "async=" << async;
    expect_same(workload(opts()), out);
  }
}

TEST(Engine, SeededRequestsAreIdenticalAloneAndInAnyBatchOrOrder) {
  auto alone = [&](int i) {
    auto e = make(opts());
    e->add_request(Prompt::from_ids(prompt_of(i, 5 + i)), seeded(42 + i), "q");
    return run(*e).at("q").outputs[0].token_ids;
  };
  std::vector<std::vector<int32_t>> ref;
  for (int i = 0; i < 5; ++i) ref.push_back(alone(i));
  for (int trial = 0; trial < 3; ++trial) {
    EngineOptions o = opts(trial != 1);
    o.max_num_batched_tokens = 5 + 11 * trial;
    auto e = make(o);
    std::vector<int> order = {4, 2, 0, 3, 1};
    std::rotate(order.begin(), order.begin() + trial, order.end());
    for (int i : order) {
      for (int f = 0; f < trial + 1; ++f)  // unrelated fillers around the needles
        e->add_request(Prompt::from_ids(prompt_of(1000 + f, 9)), seeded(7 + f));
      e->add_request(Prompt::from_ids(prompt_of(i, 5 + i)), seeded(42 + i), "n" + std::to_string(i));
    }
    auto out = run(*e);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(out.at("n" + std::to_string(i)).outputs[0].token_ids, ref[i]);
  }
  // A different seed gives different tokens.
  auto e = make(opts());
  e->add_request(Prompt::from_ids(prompt_of(0, 5)), seeded(43), "q");
  EXPECT_NE(run(*e).at("q").outputs[0].token_ids, ref[0]);
}

TEST(Engine, NSamplesDifferAndAreReproducible) {
  auto gen = [&] {
    auto e = make(opts());
    SamplingParams p = seeded(5, 10);
    p.n = 3;
    e->add_request(Prompt::from_ids(prompt_of(3, 6)), p, "m");
    return run(*e).at("m");
  };
  auto a = gen(), b = gen();
  ASSERT_EQ(a.outputs.size(), 3u);
  EXPECT_NE(a.outputs[0].token_ids, a.outputs[1].token_ids);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.outputs[i].index, i);
    EXPECT_EQ(a.outputs[i].token_ids, b.outputs[i].token_ids);
  }
}

TEST(Engine, BatchInvariantModeChunksEachSequenceIndependently) {
  // The chunk boundaries a sequence sees are a function of its own length only.
  auto chunks = [&](int fillers) {
    EngineOptions o = opts();
    o.batch_invariant = true;
    o.max_num_batched_tokens = 300;
    auto model = std::make_unique<HashLM>();
    auto e = std::make_unique<Engine>(std::move(model), nullptr, o);
    for (int f = 0; f < fillers; ++f) e->add_request(Prompt::from_ids(prompt_of(50 + f, 37 * (f + 1))), greedy(3));
    e->add_request(Prompt::from_ids(prompt_of(9, 200)), greedy(5), "needle");
    auto out = run(*e);
    return out.at("needle").outputs[0].token_ids;
  };
  EXPECT_EQ(chunks(0), chunks(3));
  // Directly: a 200-token prompt is fed in chunks ending at multiples of 64, whatever the budget.
  HashLM lm;
  cache::StateManager sm(lm, 0);
  Scheduler s({16, 100, 512, true, 64}, sm);
  Request r;
  r.prompt = prompt_of(9, 200);
  r.params = greedy(1);
  Sequence q;
  q.request = &r;
  q.tokens = r.prompt;
  s.add(&q);
  std::vector<int32_t> sizes;
  for (int i = 0; i < 4; ++i) sizes.push_back(s.schedule().at(0).count);
  EXPECT_EQ(sizes, (std::vector<int32_t>{64, 64, 64, 8}));
}

TEST(Engine, StopStringsAcrossTokenBoundariesAreCutFromTheText) {
  auto e = make(opts());
  e->add_request(Prompt::from_ids(prompt_of(11, 8)), greedy(30), "free");
  auto free = run(*e).at("free").outputs[0];
  ASSERT_EQ(free.token_ids.size(), 30u);
  // Pick a stop string that spans the boundary between tokens 5 and 6.
  std::string prefix;
  for (int i = 0; i < 5; ++i) prefix += LetterCodec::piece(free.token_ids[i]);
  std::string stop = prefix.substr(prefix.size() - 1) + LetterCodec::piece(free.token_ids[5]).substr(0, 1);
  size_t first = free.text.find(stop);
  ASSERT_NE(first, std::string::npos);
  for (bool include : {false, true}) {
    SamplingParams p = greedy(30);
    p.stop = {"zzzzzz", stop};
    p.include_stop_str_in_output = include;
    e->add_request(Prompt::from_ids(prompt_of(11, 8)), p, "s");
    auto out = run(*e).at("s").outputs[0];
    EXPECT_EQ(out.finish_reason, "stop");
    EXPECT_EQ(out.stop_string, stop);
    EXPECT_EQ(out.text, free.text.substr(0, first + (include ? stop.size() : 0)));
    EXPECT_LT(out.token_ids.size(), 30u);
  }
}

TEST(Engine, StreamedTextNeverShowsAPartialStopString) {
  auto e = make(opts());
  e->add_request(Prompt::from_ids(prompt_of(11, 8)), greedy(30), "free");
  auto free = run(*e).at("free").outputs[0].text;
  // Stop strings that share prefixes with the text all along, and one that really matches late.
  SamplingParams p = greedy(30);
  p.stop = {free.substr(free.size() / 2, 6), std::string(1, free[3]) + "#"};
  e->add_request(Prompt::from_ids(prompt_of(11, 8)), p, "s");
  std::vector<std::string> stream;
  while (e->has_unfinished())
    for (auto& o : e->step(true)) stream.push_back(o.outputs[0].text);
  const std::string& final_text = stream.back();
  EXPECT_EQ(final_text, free.substr(0, free.find(p.stop[0])));
  for (auto& s : stream) EXPECT_EQ(final_text.compare(0, s.size(), s), 0) << s;  // only ever grows
}

TEST(Engine, StopTokensEosIgnoreEosMinTokens) {
  auto e = make(opts());
  e->add_request(Prompt::from_ids(prompt_of(2, 5)), greedy(20), "free");
  auto free = run(*e).at("free").outputs[0].token_ids;
  int32_t stop_tok = free[3];
  SamplingParams p = greedy(20);
  p.stop_token_ids = {stop_tok};
  e->add_request(Prompt::from_ids(prompt_of(2, 5)), p, "st");
  auto st = run(*e).at("st").outputs[0];
  size_t first = std::find(free.begin(), free.end(), stop_tok) - free.begin();
  EXPECT_EQ(st.token_ids, std::vector<int32_t>(free.begin(), free.begin() + first + 1));  // stop token kept
  EXPECT_EQ(st.stop_token, stop_tok);
  EXPECT_EQ(st.finish_reason, "stop");

  EngineOptions o = opts();
  o.eos_token_ids = {stop_tok};
  auto eo = make(o);
  eo->add_request(Prompt::from_ids(prompt_of(2, 5)), greedy(20), "eos");
  SamplingParams ig = greedy(20);
  ig.ignore_eos = true;
  eo->add_request(Prompt::from_ids(prompt_of(2, 5)), ig, "ign");
  SamplingParams mt = greedy(20);
  mt.min_tokens = 15;
  eo->add_request(Prompt::from_ids(prompt_of(2, 5)), mt, "min");
  auto out = run(*eo);
  EXPECT_EQ(out.at("eos").outputs[0].token_ids.size(), first + 1);
  EXPECT_FALSE(out.at("eos").outputs[0].stop_token.has_value());
  EXPECT_EQ(out.at("ign").outputs[0].token_ids, free);
  auto& m = out.at("min").outputs[0].token_ids;
  EXPECT_GE(m.size(), 15u);
  for (size_t i = 0; i < 15 && i < m.size(); ++i) EXPECT_NE(m[i], stop_tok);
}

TEST(Engine, DetokenizesSplitUtf8Characters) {
  // Bias tokens 90 then 91 ("é" split over two tokens): no broken character ever appears.
  auto e = make(opts());
  SamplingParams p = greedy(2);
  p.logit_bias = {{90, 200.0f}, {91, 150.0f}};
  p.frequency_penalty = 2.0f;
  p.presence_penalty = 2.0f;
  p.repetition_penalty = 100.0f;  // not 90 twice
  e->add_request(Prompt::from_ids({1, 2}), p, "u");
  std::vector<std::string> seen;
  while (e->has_unfinished())
    for (auto& o : e->step(true)) seen.push_back(o.outputs[0].text);
  EXPECT_EQ(seen.back(), "\xC3\xA9");
  for (auto& s : seen) EXPECT_EQ(s.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(Engine, AbortKeepsWhatWasGeneratedAndOthersFinish) {
  for (bool async : {false, true}) {
    auto e = make(opts(async));
    e->add_request(Prompt::from_ids(prompt_of(1, 4)), greedy(200), "long");
    e->add_request(Prompt::from_ids(prompt_of(2, 4)), greedy(30), "other");
    for (int i = 0; i < 6; ++i) e->step();
    e->abort("long");
    e->abort("no-such-request");  // ignored
    auto out = run(*e);
    EXPECT_EQ(out.at("long").outputs[0].finish_reason, "abort");
    EXPECT_GE(out.at("long").outputs[0].token_ids.size(), 4u);
    EXPECT_EQ(out.at("other").outputs[0].token_ids.size(), 30u);
  }
}

TEST(Engine, BadInputIsRejectedWithAClearMessage) {
  EngineOptions o = opts();
  o.max_model_len = 32;
  auto e = make(o, -1, /*codec=*/false);
  auto expect_error = [&](const Prompt& pr, const SamplingParams& p, const std::string& fragment,
                          const std::string& id = "") {
    try {
      e->add_request(pr, p, id);
      ADD_FAILURE() << "no error for " << fragment;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(fragment), std::string::npos) << err.what();
    }
  };
  expect_error(Prompt::from_ids({}), greedy(), "empty");
  expect_error(Prompt::from_ids(prompt_of(1, 40)), greedy(), "max_model_len");
  expect_error(Prompt::from_ids({5, 97}), greedy(), "outside the vocabulary");
  expect_error(Prompt::from_text("hello"), greedy(), "no tokenizer");
  SamplingParams bad = greedy();
  bad.top_p = 0;
  expect_error(Prompt::from_ids({1}), bad, "top_p");
  bad = greedy();
  bad.temperature = -1;
  expect_error(Prompt::from_ids({1}), bad, "temperature");
  bad = greedy();
  bad.stop = {"x"};
  expect_error(Prompt::from_ids({1}), bad, "tokenizer");
  bad = greedy();
  bad.so_args = R"({"schema_type": "yaml", "schema": "x"})";
  expect_error(Prompt::from_ids({1}), bad, "schema_type");
  e->add_request(Prompt::from_ids({1}), greedy(3), "dup");
  expect_error(Prompt::from_ids({1}), greedy(), "already in use", "dup");
  // Still serving; a request reaching max_model_len stops with "length".
  e->add_request(Prompt::from_ids(prompt_of(2, 30)), greedy(10), "edge");
  auto out = run(*e);
  EXPECT_EQ(out.at("dup").outputs[0].token_ids.size(), 3u);
  EXPECT_EQ(out.at("edge").outputs[0].token_ids.size(), 2u);
  EXPECT_EQ(out.at("edge").outputs[0].finish_reason, "length");
}

TEST(Engine, ARequestFailingInsideTheModelFailsAloneAndOthersAreUnharmed) {
  for (bool async : {false, true}) {
    auto e = make(opts(async), /*poison=*/88);
    std::vector<int32_t> bad = prompt_of(5, 10);
    bad[4] = 88;
    for (int i = 0; i < 4; ++i) e->add_request(Prompt::from_ids(prompt_of(i, 12)), greedy(6), "ok" + std::to_string(i));
    e->add_request(Prompt::from_ids(bad), greedy(6), "bad");
    auto out = run(*e);
    EXPECT_EQ(out.at("bad").outputs[0].finish_reason, "error");
    EXPECT_NE(out.at("bad").error.find("poisoned"), std::string::npos);
    EXPECT_GT(e->stats().failed_batches, 0);
    auto clean = make(opts(async));
    for (int i = 0; i < 4; ++i) clean->add_request(Prompt::from_ids(prompt_of(i, 12)), greedy(6), "ok" + std::to_string(i));
    auto ref = run(*clean);
    for (int i = 0; i < 4; ++i) {
      auto id = "ok" + std::to_string(i);
      EXPECT_EQ(out.at(id).outputs[0].token_ids, ref.at(id).outputs[0].token_ids);
      EXPECT_EQ(out.at(id).outputs[0].finish_reason, "length");
    }
  }
}

TEST(Engine, ASamplingFailureFailsOnlyItsSequence) {
  for (bool async : {false, true}) {
    auto e = std::make_unique<Engine>(std::make_unique<HashLM>(97, -1, /*nan_after=*/87), nullptr, opts(async));
    for (int i = 0; i < 3; ++i) e->add_request(Prompt::from_ids(prompt_of(i, 12)), greedy(6), "ok" + std::to_string(i));
    e->add_request(Prompt::from_ids({5, 6, 87}), greedy(6), "nan");
    auto out = run(*e);
    EXPECT_EQ(out.at("nan").outputs[0].finish_reason, "error");
    EXPECT_NE(out.at("nan").error.find("NaN"), std::string::npos);
    auto clean = make(opts(async));
    for (int i = 0; i < 3; ++i) clean->add_request(Prompt::from_ids(prompt_of(i, 12)), greedy(6), "ok" + std::to_string(i));
    auto ref = run(*clean);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(out.at("ok" + std::to_string(i)).outputs[0].token_ids, ref.at("ok" + std::to_string(i)).outputs[0].token_ids);
  }
}

// A NaN row read only for prompt logprobs (in a prefill chunk that samples nothing) fails its request, as a
// NaN sampled row does; it used to come back as a NaN logprob.
TEST(Engine, NaNPromptLogprobsFailOnlyTheirRequest) {
  for (bool async : {false, true}) {
    EngineOptions o = opts(async);
    o.max_num_batched_tokens = 4;  // the 12-token prompts prefill in chunks
    auto e = std::make_unique<Engine>(std::make_unique<HashLM>(97, -1, /*nan_after=*/87), nullptr, o);
    SamplingParams p = greedy(6);
    p.prompt_logprobs = 1;
    std::vector<int32_t> bad = prompt_of(1, 12);
    bad[1] = 87;  // the logits after it (position 2's prompt logprob) are NaN
    e->add_request(Prompt::from_ids(bad), p, "nan");
    for (int i = 0; i < 3; ++i) e->add_request(Prompt::from_ids(prompt_of(i, 12)), p, "ok" + std::to_string(i));
    auto out = run(*e);
    EXPECT_EQ(out.at("nan").outputs[0].finish_reason, "error");
    EXPECT_NE(out.at("nan").error.find("prompt logprobs of position 2: the model produced NaN logits"), std::string::npos)
        << out.at("nan").error;
    auto clean = make(o);
    for (int i = 0; i < 3; ++i) clean->add_request(Prompt::from_ids(prompt_of(i, 12)), p, "ok" + std::to_string(i));
    auto ref = run(*clean);
    for (int i = 0; i < 3; ++i) {
      const auto id = "ok" + std::to_string(i);
      EXPECT_EQ(out.at(id).outputs[0].token_ids, ref.at(id).outputs[0].token_ids);
      EXPECT_EQ(out.at(id).prompt_logprobs.size(), 12u);
    }
  }
}

TEST(Engine, LogprobsAndPromptLogprobsMatchTheModel) {
  HashLM ref;
  EngineOptions o = opts();
  o.max_num_batched_tokens = 5;  // prompt logprobs gathered across chunks
  auto e = make(o);
  SamplingParams p = greedy(4);
  p.logprobs = 2;
  p.prompt_logprobs = 1;
  auto prompt = prompt_of(8, 12);
  e->add_request(Prompt::from_ids(prompt), p, "lp");
  auto out = run(*e).at("lp");
  auto logsoftmax = [](std::vector<float> row, int32_t t) {
    double m = *std::max_element(row.begin(), row.end()), s = 0;
    for (float v : row) s += std::exp(v - m);
    return row[t] - (m + std::log(s));
  };
  ASSERT_EQ(out.prompt_logprobs.size(), prompt.size());
  EXPECT_TRUE(out.prompt_logprobs[0].empty());
  for (size_t j = 1; j < prompt.size(); ++j) {
    std::vector<int32_t> hist(prompt.begin(), prompt.begin() + j);
    EXPECT_EQ(out.prompt_logprobs[j][0].token_id, prompt[j]);
    EXPECT_NEAR(out.prompt_logprobs[j][0].logprob, logsoftmax(ref.logits_after(hist), prompt[j]), 1e-5);
  }
  auto& c = out.outputs[0];
  ASSERT_EQ(c.logprobs.size(), 4u);
  std::vector<int32_t> hist = prompt;
  double cum = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(c.logprobs[i][0].token_id, c.token_ids[i]);
    EXPECT_EQ(c.logprobs[i][0].rank, 1);  // greedy picks the top token
    EXPECT_NEAR(c.logprobs[i][0].logprob, logsoftmax(ref.logits_after(hist), c.token_ids[i]), 1e-5);
    cum += c.logprobs[i][0].logprob;
    hist.push_back(c.token_ids[i]);
  }
  EXPECT_NEAR(c.cumulative_logprob, cum, 1e-4);
}

TEST(Engine, ASequenceOutgrowingTheWholeBudgetEndsWithLength) {
  for (bool async : {false, true}) {
    EngineOptions o = opts(async);
    o.num_state_blocks = 10;  // 4 tokens a block: 40 tokens in all
    auto e = make(o, -1, true, 4);
    e->add_request(Prompt::from_ids(prompt_of(1, 10)), greedy(100), "big");
    e->add_request(Prompt::from_ids(prompt_of(2, 6)), greedy(5), "small");
    auto out = run(*e);
    auto& big = out.at("big").outputs[0];
    EXPECT_EQ(big.finish_reason, "length");
    EXPECT_GE(big.token_ids.size(), 20u);
    EXPECT_LE(big.token_ids.size(), 31u);
    EXPECT_EQ(out.at("small").outputs[0].token_ids.size(), 5u);
  }
}

TEST(Engine, AddAndAbortFromAnotherThreadWhileStepping) {
  auto e = make(opts());
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (int i = 0; i < 200; ++i) {
      e->add_request(Prompt::from_ids(prompt_of(i, 1 + i % 17)), seeded(i, 1 + i % 9), "t" + std::to_string(i));
      if (i % 10 == 5) e->abort("t" + std::to_string(i - 3));
    }
    done = true;
  });
  std::map<std::string, RequestOutput> out;
  while (!done || e->has_unfinished())
    for (auto& o : e->step()) out[o.request_id] = o;
  producer.join();
  for (auto& o : e->step()) out[o.request_id] = o;
  ASSERT_EQ(out.size(), 200u);
  for (auto& [id, r] : out) {
    const auto& c = r.outputs[0];
    int i = std::stoi(id.substr(1));
    if (c.finish_reason == "length") EXPECT_EQ(c.token_ids.size(), static_cast<size_t>(1 + i % 9)) << id;
    else EXPECT_EQ(c.finish_reason, "abort") << id;
  }
}

TEST(Engine, RequestsArriveWhileOthersRun) {
  auto e = make(opts());
  e->add_request(Prompt::from_ids(prompt_of(1, 9)), seeded(1, 20), "first");
  std::map<std::string, RequestOutput> out;
  for (int i = 0; i < 5; ++i)
    for (auto& o : e->step()) out[o.request_id] = o;
  e->add_request(Prompt::from_ids(prompt_of(2, 9)), seeded(2, 5), "late");
  for (auto& [k, v] : run(*e)) out[k] = v;
  auto ref = make(opts());
  ref->add_request(Prompt::from_ids(prompt_of(2, 9)), seeded(2, 5), "late");
  EXPECT_EQ(out.at("late").outputs[0].token_ids, run(*ref).at("late").outputs[0].token_ids);
  EXPECT_EQ(out.at("first").outputs[0].token_ids.size(), 20u);
}

TEST(Engine, SoakThousandMixedRequestsAllFinishWithTheRightCounts) {
  EngineOptions o = opts();
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 256;
  o.num_state_blocks = 300;  // 8 tokens a block, tight: forces preemption now and then
  o.eos_token_ids = {3};
  auto e = make(o, -1, true, 8);
  std::mt19937 g(99);
  std::map<std::string, SamplingParams> params;
  std::map<std::string, RequestOutput> out;
  for (int i = 0; i < 1000; ++i) {
    SamplingParams p = i % 3 ? seeded(i, 1 + g() % 24) : greedy(1 + g() % 24);
    p.ignore_eos = i % 2;
    if (i % 7 == 0) p.min_tokens = p.max_tokens;
    if (i % 11 == 0) p.stop = {"q"};
    if (i % 13 == 0) p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f;
    std::string id = "s" + std::to_string(i);
    params[id] = p;
    e->add_request(Prompt::from_ids(prompt_of(i, 1 + g() % 60)), p, id);
    if (i % 50 == 0)  // arrivals interleave with steps
      for (auto& o : e->step()) out[o.request_id] = o;
  }
  for (auto& [k, v] : run(*e)) out[k] = v;
  ASSERT_EQ(out.size(), 1000u);
  for (auto& [id, r] : out) {
    const auto& c = r.outputs[0];
    const auto& p = params[id];
    ASSERT_TRUE(c.finished()) << id;
    if (c.finish_reason == "length") {
      EXPECT_EQ(c.token_ids.size(), static_cast<size_t>(p.max_tokens)) << id;
    } else {
      ASSERT_EQ(c.finish_reason, "stop") << id;
      EXPECT_LE(c.token_ids.size(), static_cast<size_t>(p.max_tokens)) << id;
      EXPECT_GE(c.token_ids.size(), static_cast<size_t>(p.min_tokens)) << id;
      bool eos = !p.ignore_eos && c.token_ids.back() == 3;
      EXPECT_TRUE(eos || c.stop_string) << id;
    }
  }
}

}  // namespace
}  // namespace deepinfer::engine
