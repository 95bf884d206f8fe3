// DeepInfer's public C++ API: an offline LLM over the continuous-batching engine.
//
//   deepinfer::LLM llm({.model = "deepseek-ai/DeepSeek-V4.1-Flash-1017"});
//   auto outs = llm.generate({deepinfer::Prompt::text("Hello")}, {deepinfer::SamplingParams{}});
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/outputs.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {
namespace model { class CausalLM; }
namespace engine { class Engine; class TextCodec; }

struct EngineConfig {
  std::string model;                      // local folder or Hugging Face repo id
  std::string tokenizer;                  // default: the model folder
  int max_num_seqs = 0;                   // 0: DEEPINFER_MAX_NUM_SEQS
  int max_num_batched_tokens = 0;         // 0: DEEPINFER_MAX_NUM_BATCHED_TOKENS
  int64_t max_model_len = 0;              // 0: the model's max_position_embeddings
  int64_t state_memory_bytes = -1;        // -1: DEEPINFER_STATE_MEMORY_MB; 0: unlimited
  int64_t num_state_blocks = 0;           // >0: exact budget in the model's state blocks (overrides the bytes)
  std::optional<bool> async_scheduling;   // default: DEEPINFER_ASYNC_SCHEDULING
  std::optional<bool> batch_invariant;    // default: DEEPINFER_BATCH_INVARIANT
  uint64_t seed = 0;                      // seeds requests that have no seq_seed
  std::vector<int32_t> eos_token_ids;     // default: config.json's eos_token_id
};

struct Prompt {
  std::string text;                       // encoded with the model's tokenizer when token_ids is empty
  std::vector<int32_t> token_ids;
  static Prompt from_text(std::string t) { return {std::move(t), {}}; }
  static Prompt from_ids(std::vector<int32_t> ids) { return {{}, std::move(ids)}; }
};

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatOptions {
  bool thinking = false;                  // DeepSeek thinking mode: the answer starts with reasoning
  std::string reasoning_effort;           // V4.1: "low", "high", "xhigh", "max", "1".."100" (thinking)
  bool add_generation_prompt = true;      // end with the assistant header
};

// Called after every engine step for each request that changed (outputs are cumulative).
using StreamCallback = std::function<void(const RequestOutput&)>;

class LLM {
 public:
  explicit LLM(EngineConfig config);
  // Drives an already-built model (tests, custom models); the tokenizer is optional.
  LLM(std::unique_ptr<model::CausalLM> model, EngineConfig config);
  LLM(std::unique_ptr<model::CausalLM> model, std::unique_ptr<engine::TextCodec> codec, EngineConfig config);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // One params for all prompts, or one per prompt. Results come back in input order.
  // Invalid input throws deepinfer::Error before anything runs; a request failing inside the
  // engine comes back with finish_reason "error" and RequestOutput::error set.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      const StreamCallback& on_update = {});
  // Renders each conversation with the model's DeepSeek chat encoding, then generates.
  std::vector<RequestOutput> chat(const std::vector<std::vector<ChatMessage>>& conversations,
                                  const std::vector<SamplingParams>& params, const ChatOptions& options = {},
                                  const StreamCallback& on_update = {});

  engine::Engine& engine();               // the request-level API (add, abort, step)
  std::string model_dir() const;

 private:
  std::unique_ptr<engine::Engine> engine_;
  std::string model_dir_;
  std::unique_ptr<std::mutex> generate_mu_ = std::make_unique<std::mutex>();  // one generate() at a time
};

}  // namespace deepinfer
