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

// Speculative decoding with the checkpoint's DSpark draft head (DeepSeek-V4.1): each step every decoding
// request drafts up to num_draft_tokens tokens and verifies some of them in the same forward; lossless
// (greedy and seeded outputs are the tokens decoding without drafts gives).
struct SpeculativeConfig {
  std::optional<bool> enabled;            // default: on when DEEPINFER_ENABLE_MTP_VARLEN=1
  int num_draft_tokens = 0;               // 0: DEEPINFER_USE_NEXTN_DECODE (default 5, at most the block size);
                                          // 1 .. the checkpoint's dspark_block_size
  // true: per-request lengths chosen from the drafts' confidences against the measured step cost;
  // false: every request verifies num_draft_tokens. Default: DEEPINFER_ENABLE_MTP_VARLEN.
  std::optional<bool> confidence_scheduling;
  std::vector<double> step_costs;         // seconds of a forward of 1, 2, 4, 8, ... tokens; empty: measured at start-up
  bool log_steps = false;                 // the engine logs each step's verify budget to stderr
};

struct EngineConfig {
  std::string model;                      // local folder or Hugging Face repo id
  std::string tokenizer;                  // default: the model folder
  std::string device;                     // "cpu", "cuda", "cuda:N"; default: DEEPINFER_DEVICE
  std::string load_format;                // "auto" (the checkpoint) or "dummy" (random weights, V4.1); default: DEEPINFER_LOAD_FORMAT
  int max_num_seqs = 0;                   // 0: DEEPINFER_MAX_NUM_SEQS
  int max_num_batched_tokens = 0;         // 0: DEEPINFER_MAX_NUM_BATCHED_TOKENS
  int64_t max_model_len = 0;              // 0: the model's max_position_embeddings
  bool allow_long_max_model_len = false;  // allow max_model_len above the checkpoint's positions
  int64_t state_memory_bytes = -1;        // -1: DEEPINFER_STATE_MEMORY_MB; 0: unlimited
  int64_t num_state_blocks = 0;           // >0: exact budget in the model's state blocks (overrides the bytes)
  std::optional<bool> async_scheduling;   // default: DEEPINFER_ASYNC_SCHEDULING
  std::optional<bool> batch_invariant;    // default: DEEPINFER_BATCH_INVARIANT
  std::optional<bool> device_sampling;    // default: DEEPINFER_DEVICE_SAMPLING
  int max_logprobs = 20;                  // most logprobs / prompt_logprobs a request may ask for
  uint64_t seed = 0;                      // seeds requests that have no seq_seed
  std::vector<int32_t> eos_token_ids;     // default: config.json's eos_token_id
  SpeculativeConfig speculative;
  // Prefix caching: requests sharing a prompt prefix reuse its model state (docs/prefix_caching.md).
  std::optional<bool> enable_prefix_caching;  // default: on (off for models that cannot copy states)
  int64_t prefix_block_tokens = 0;        // tokens per cache block; 0: 64
  // Attention DP ranks (CPU threads in one process) and MoE expert parallelism over them
  // (docs/parallelism.md); 0 / unset: DEEPINFER_DATA_PARALLEL_SIZE, DEEPINFER_ENABLE_EXPERT_PARALLEL.
  int data_parallel_size = 0;
  std::optional<bool> enable_expert_parallel;
  // Balanced context parallelism: each forward's tokens split over this many ranks (CPU threads),
  // laid out as context_parallel_layout ("zigzag" or "round_robin"); 0 / empty:
  // DEEPINFER_CONTEXT_PARALLEL_SIZE, DEEPINFER_CONTEXT_PARALLEL_LAYOUT. With data_parallel_size, each
  // DP rank is a group of this many; with expert parallelism the experts split over all dp * cp ranks.
  int context_parallel_size = 0;
  std::string context_parallel_layout;
};

struct Prompt {
  std::string text;                       // encoded with the model's tokenizer when token_ids is empty
  std::vector<int32_t> token_ids;
  // Image files (PNG / JPEG / WebP bytes), one per image placeholder token of the prompt, in order
  // (V4.1 with a vision tower).
  std::vector<std::vector<uint8_t>> images;
  static Prompt from_text(std::string t) { return {std::move(t), {}}; }
  static Prompt from_ids(std::vector<int32_t> ids) { return {{}, std::move(ids)}; }
};

struct ChatToolCall {
  std::string id;                         // optional; matches a tool message's tool_call_id
  std::string name;
  std::string arguments;                  // JSON text of an object (OpenAI style)
};

// One OpenAI content part: text, or an image (the file's bytes; V4.1 user messages).
struct ChatContentPart {
  std::string text;
  std::vector<uint8_t> image;             // PNG / JPEG / WebP bytes; non-empty: this part is an image
};

struct ChatMessage {
  std::string role;                       // system, user, assistant, tool (V4: developer too)
  std::string content;
  // The content as parts instead (when non-empty, content is unused): V4.1 joins them with "\n\n", each
  // image as its placeholder; V4 concatenates text parts.
  std::vector<ChatContentPart> parts;
  std::string reasoning_content;          // assistant: its thinking
  std::vector<ChatToolCall> tool_calls;   // assistant
  std::string tool_call_id;               // tool: the call this result answers
};

struct ChatOptions {
  bool thinking = false;                  // DeepSeek thinking mode: the answer starts with reasoning
  std::string reasoning_effort;           // V4.1: "low", "high", "xhigh", "max", "1".."100" (thinking)
  bool add_generation_prompt = true;      // end with the assistant header
  std::string tools;                      // OpenAI tools list as JSON text ("" or "[]": none)
  bool special_tokens_in_content = false; // true: "<｜User｜>" typed in a message is that token (trusted input)
};

// Where image_url parts may take images from.
struct ChatImageSources {
  bool local_files = true;                // image_url as a file path or file:// URL (off: data: URLs only)
  std::string local_root;                 // non-empty: only files inside this folder
  size_t max_image_bytes = 20u << 20;     // per image file (20 MiB, OpenAI's limit)
};

// OpenAI chat messages (JSON text of a list of {"role", "content", ...}): content as a string, null
// or a list of {"type": "text", "text": ...} and {"type": "image_url", "image_url": {"url": ...}} parts
// (url: "data:image/...;base64,...", a file path or file:// URL; http(s) URLs are refused, nothing is
// downloaded); assistant tool_calls ({"id", "type": "function", "function": {"name", "arguments"}});
// tool messages' tool_call_id. Throws Error naming the message and part.
std::vector<ChatMessage> chat_messages_from_json(const std::string& json_text, const ChatImageSources& images = {});

// The image files of a conversation's parts, in order: the Prompt::images of its chat prompt.
std::vector<std::vector<uint8_t>> chat_images(const std::vector<ChatMessage>& messages);

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
