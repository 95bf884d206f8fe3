// DeepSeek V4 / V4.1 chat prompt rendering and model-output parsing (DSML tool calls).
// A port of DeepSeek's Python encoders (encoding_dsv4.py, V4.1 encoding.py); see docs/tokenizer.md.
// Rendering produces text with special-token strings; encode it with add_special_tokens=false so
// the ids come from the tokenizer file.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

enum class ChatFormat { kV4, kV41 };

struct ToolCall {
  std::string id;         // optional; orders the tool results that answer it
  std::string name;
  std::string arguments;  // JSON text of an object (OpenAI style)
};

struct Message {
  // "system", "user", "assistant", "tool", "latest_reminder"; "developer" (V4 only).
  std::string role;
  std::string content;
  // User messages (V4.1): byte offsets into content, ascending, where an image goes. render_chat writes
  // kImagePlaceholder there, encode_chat the id ChatOptions::image_token_id.
  std::vector<size_t> image_offsets;
  std::string reasoning_content;       // assistant: the thinking text
  std::vector<ToolCall> tool_calls;    // assistant
  std::string tool_call_id;            // tool: which call this result answers
  nlohmann::ordered_json tools;        // system/developer: OpenAI tool list ([{"type":"function","function":{...}}])
  nlohmann::ordered_json response_format;  // system/developer: a JSON schema to answer in
  std::optional<std::string> task;     // internal task tokens: action, query, authority, domain, title, read_url
  bool wo_eos = false;                 // assistant: leave the turn open (no end-of-sentence)
};

struct ChatOptions {
  bool thinking = false;               // thinking mode (<think>) vs chat mode (</think>)
  bool drop_thinking = true;           // drop reasoning of turns before the last user turn (kept with tools)
  bool add_bos = true;                 // BOS once, at the start
  bool add_generation_prompt = true;   // the assistant header after the last user turn
  // V4: "" / "high" (nothing) or "max" (the fixed paragraph). V4.1: "" (= "high"), "low", "high",
  // "xhigh", "max" or a number "1".."100"; rendered in thinking mode only.
  std::string reasoning_effort;
  // encode_chat: special-token strings inside message fields become special tokens (trusted
  // input only). Default: they stay text, so a message cannot forge a role or a turn boundary.
  bool special_tokens_in_content = false;
  // encode_chat: the id of an image placeholder (the model's image_token_id), for messages with images.
  std::optional<int32_t> image_token_id;
};

// V4.1's image placeholder; each one becomes an image span of the model's vision stage.
inline constexpr std::string_view kImagePlaceholder = "<｜deepseek_image｜>";

// m.content cut at its image offsets (image_offsets.size() + 1 pieces); throws naming message i when
// the format has no images, the message is not a user message or the offsets are out of order.
std::vector<std::string_view> content_pieces(ChatFormat format, const Message& m, size_t i);

// The prompt text. Throws deepinfer::Error on messages the format cannot express.
std::string render_v4(std::span<const Message> messages, const ChatOptions& options = {});
std::string render_v41(std::span<const Message> messages, const ChatOptions& options = {});
std::string render_chat(ChatFormat format, std::span<const Message> messages, const ChatOptions& options = {});

// The prompt's token ids: rendered and encoded (no BOS added: the text has it). Only the format's
// own markup becomes special tokens unless options.special_tokens_in_content.
std::vector<int32_t> encode_chat(const Tokenizer& tok, ChatFormat format, std::span<const Message> messages,
                                 const ChatOptions& options = {});

// The special tokens of the chat format, with ids read from the tokenizer file.
struct ChatTokens {
  int32_t bos, eos, user, assistant, think_begin, think_end, dsml;
  std::optional<int32_t> system;  // <｜System｜>, V4.1 only
  static ChatTokens from(const Tokenizer& tok);  // throws when one is missing
};

// One assistant turn parsed from the model's output text (decoded without skipping special tokens).
struct ParsedMessage {
  std::string reasoning_content;  // text before </think> (thinking mode)
  std::string content;            // the answer
  std::vector<ToolCall> tool_calls;  // arguments: a JSON object text
  bool ended = false;             // the text ended with <｜end▁of▁sentence｜>
};

// thinking: the prompt ended with <think>, so the output starts with reasoning. The trailing EOS
// may be present or already stripped. Throws deepinfer::Error naming the problem on malformed markup.
ParsedMessage parse_completion(std::string_view text, ChatFormat format, bool thinking);

// json.dumps(value, ensure_ascii=False) of Python: the spacing DeepSeek's encoders produce.
std::string python_json_dumps(const nlohmann::ordered_json& value);

}  // namespace deepinfer::tokenizer
