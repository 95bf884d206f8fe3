// Fuzz target: one request (sampling parameters, prompt, stops, logit bias, structured output) into a
// running engine beside a canary request. The fuzzed request must be refused at add_request with a
// deepinfer::Error or end on its own (finished, or failed with its error); it never crashes, never
// hangs, and never changes the canary's tokens. The model is the deterministic test double of the
// engine tests (logits a hash of the history), so a run takes microseconds.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../engine/test_model.h"
#include "core/error.h"
#include "deepinfer/llm.h"
#include "engine/engine.h"

namespace {
using namespace deepinfer;

// The test codec with token bytes, so that structured output compiles against its vocabulary.
class FuzzCodec : public testing::LetterCodec {
 public:
  std::vector<std::string> token_bytes() const override {
    std::vector<std::string> t;
    for (int32_t i = 0; i < 97; ++i) t.push_back(piece(i));
    return t;
  }
};

// Reads the input as a stream of choices; past the end every read is 0.
struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n ? (--n, *p++) : 0; }
  uint32_t u32() { return byte() | byte() << 8 | byte() << 16 | static_cast<uint32_t>(byte()) << 24; }
  int32_t integer() {  // small values mostly, then the edges of the type
    switch (byte() % 16) {
      case 0: return 0;
      case 1: return -1;
      case 2: return std::numeric_limits<int32_t>::max();
      case 3: return std::numeric_limits<int32_t>::min();
      case 4: return static_cast<int32_t>(u32());
      default: return byte() % 40;
    }
  }
  float real() {
    switch (byte() % 20) {
      case 0: return 0.0f;
      case 1: return 1.0f;
      case 2: return -1.0f;
      case 3: return std::numeric_limits<float>::quiet_NaN();
      case 4: return std::numeric_limits<float>::infinity();
      case 5: return std::numeric_limits<float>::denorm_min();
      case 6: { uint32_t b = u32(); float f; std::memcpy(&f, &b, 4); return f; }
      default: return (byte() % 11) / 10.0f;  // mostly in range
    }
  }
  std::string text(size_t max) {
    std::string s;
    for (size_t k = byte() % (max + 1); k > 0 && n; --k) s += static_cast<char>(byte());
    return s;
  }
};

const char* kSchemaTypes[] = {"regex", "json", "json_schema", "ebnf", "grammar", "json_object", "choice", "xml"};

SamplingParams params_from(Reader& r) {
  SamplingParams p;
  const uint32_t set = r.u32() & r.u32();  // which fields the input sets (a few)
  auto has = [&](int bit) { return (set >> bit) & 1; };
  if (has(0)) p.n = r.integer();
  if (has(1)) p.temperature = r.real();
  if (has(2)) p.top_p = r.real();
  if (has(3)) p.top_k = r.integer();
  if (has(4)) p.min_p = r.real();
  if (has(5)) p.repetition_penalty = r.real();
  if (has(6)) p.presence_penalty = r.real();
  if (has(7)) p.frequency_penalty = r.real();
  if (has(8)) p.max_tokens = r.integer();
  if (has(9)) p.min_tokens = r.integer();
  if (has(10)) p.seed = r.u32();
  if (has(11)) p.logprobs = r.integer();
  if (has(12)) p.prompt_logprobs = r.integer();
  if (has(13)) p.ignore_eos = true;
  if (has(14)) p.detokenize = false;
  if (has(15)) p.include_stop_str_in_output = true;
  if (has(16)) p.skip_special_tokens = false;
  for (int k = has(17) ? 1 + r.byte() % 3 : 0; k > 0; --k) p.stop.push_back(r.text(4));
  for (int k = has(18) ? 1 + r.byte() % 3 : 0; k > 0; --k) p.stop_token_ids.push_back(r.integer());
  for (int k = has(19) ? 1 + r.byte() % 3 : 0; k > 0; --k) p.logit_bias[r.integer()] = r.real();
  if (has(20)) {
    if (has(21)) {
      p.so_args = r.text(200);  // raw text: often not JSON at all
    } else {
      nlohmann::json so{{"schema_type", kSchemaTypes[r.byte() % 8]}};
      if (has(22)) so["schema"] = r.text(200);
      if (has(23)) so["schema"] = nlohmann::json::array({r.text(6), r.text(6)});
      p.so_args = so.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return p;
}

Prompt prompt_from(Reader& r) {
  Prompt pr;
  if (r.byte() % 4 == 0) {
    pr.text = r.text(40);
  } else {
    for (int k = r.byte() % 48; k > 0; --k) pr.token_ids.push_back(r.byte() % 8 == 0 ? r.integer() : r.byte() % 97);
  }
  return pr;
}

struct Fixture {
  LLM llm;
  Prompt canary = Prompt::from_ids({5, 6, 7});
  SamplingParams canary_params;
  std::vector<int32_t> canary_tokens;  // alone
  Fixture() : llm(std::make_unique<testing::HashLM>(), std::make_unique<FuzzCodec>(), config()) {
    canary_params.temperature = 0.7f;
    canary_params.seed = 42;
    canary_params.max_tokens = 12;
    canary_params.ignore_eos = true;
    canary_tokens = llm.generate({canary}, {canary_params}).at(0).outputs.at(0).token_ids;
  }
  static EngineConfig config() {
    EngineConfig c;
    c.max_model_len = 96;  // every request ends within 96 steps
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 32;
    c.num_state_blocks = 24;  // tight: requests preempt each other
    return c;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture f;
  engine::Engine& eng = f.llm.engine();
  Reader r{data, size};
  eng.add_request(f.canary, f.canary_params, "canary");
  bool added = false;
  try {
    const Prompt p = prompt_from(r);
    eng.add_request(p, params_from(r), "fuzzed");
    added = true;
  } catch (const Error&) {
  }
  const bool abort_early = added && r.byte() % 5 == 0;
  std::vector<int32_t> canary;
  bool canary_done = false, fuzzed_done = !added;
  for (int step = 0; step < 2000 && eng.has_unfinished(); ++step) {
    if (abort_early && step == 2) eng.abort("fuzzed");
    for (auto& o : eng.step()) {
      if (o.request_id == "canary") canary = o.outputs.at(0).token_ids, canary_done = true;
      if (o.request_id == "fuzzed") fuzzed_done = true;
    }
  }
  if (eng.has_unfinished() || !canary_done || !fuzzed_done) {
    std::fprintf(stderr, "fuzz_request: a request did not finish (canary %d, fuzzed %d)\n", canary_done, fuzzed_done);
    std::abort();
  }
  if (canary != f.canary_tokens) {
    std::fprintf(stderr, "fuzz_request: the fuzzed request changed the canary's tokens\n");
    std::abort();
  }
  const engine::EngineStats st = eng.stats();
  if (st.state_blocks_reserved != 0 || st.state_blocks_allocated != 0 || st.live_states != 0) {
    std::fprintf(stderr, "fuzz_request: state left behind (%lld reserved, %lld allocated, %lld states)\n",
                 static_cast<long long>(st.state_blocks_reserved), static_cast<long long>(st.state_blocks_allocated),
                 static_cast<long long>(st.live_states));
    std::abort();
  }
  return 0;
}
