// chat_messages_from_json and chat_images (declared in deepinfer/llm.h): OpenAI-style chat messages into
// ChatMessage; encoding_messages: ChatMessage into the chat encoding's Message.
#include "engine/chat_messages.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace deepinfer {
namespace {

using nlohmann::json;

// A message's content: a string (or null), or OpenAI content parts into parts.
void read_content(const json& v, const std::string& where, const ChatImageSources& sources, ChatMessage& x) {
  if (v.is_null()) return;
  if (v.is_string()) {
    x.content = v.get<std::string>();
    return;
  }
  check(v.is_array(), where, " must be a string, null or a list of content parts, got a JSON ", v.type_name());
  for (size_t k = 0; k < v.size(); ++k) {
    const json& part = v[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    check(part.is_object() && part.contains("type") && part["type"].is_string(), at,
          " must be an object with a string \"type\"");
    const std::string type = part["type"].get<std::string>();
    ChatContentPart p;
    if (type == "text") {
      check(part.contains("text") && part["text"].is_string(), at, ": a text part needs a string \"text\"");
      p.text = part["text"].get<std::string>();
    } else if (type == "image_url" || type == "input_image") {  // Chat Completions' and the Responses API's
      const json* url = part.contains("image_url") ? &part["image_url"] : nullptr;  // {"url": ...} or the URL
      if (url && url->is_object()) url = url->contains("url") ? &(*url)["url"] : nullptr;
      check(url && url->is_string(), at, ": an image_url part needs {\"image_url\": {\"url\": \"data:image/png;base64,...\"}}");
      p.image = engine::image_from_url(url->get_ref<const std::string&>(), sources, at);
    } else {
      fail(at, ": content part type '", type, "' is not supported (\"text\" or \"image_url\")");
    }
    x.parts.push_back(std::move(p));
  }
}

std::string string_field(const json& m, const char* key, const std::string& where) {
  if (!m.contains(key) || m[key].is_null()) return "";
  check(m[key].is_string(), where, ".", key, " must be a string, got a JSON ", m[key].type_name());
  return m[key].get<std::string>();
}

}  // namespace

std::vector<ChatMessage> chat_messages_from_json(const std::string& json_text, const ChatImageSources& sources) {
  const json j = json::parse(json_text, nullptr, false);
  check(!j.is_discarded(), "chat: messages are not valid JSON");
  check(j.is_array(), "chat: messages must be a list of {\"role\", \"content\"} objects");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& m = j[i];
    const std::string where = "chat: message " + std::to_string(i);
    check(m.is_object(), where, " must be an object, got a JSON ", m.type_name());
    check(m.contains("role") && m["role"].is_string(), where, " needs a string \"role\"");
    ChatMessage x;
    x.role = m["role"].get<std::string>();
    read_content(m.contains("content") ? m["content"] : json(), where + ".content", sources, x);
    x.reasoning_content = string_field(m, "reasoning_content", where);
    x.tool_call_id = string_field(m, "tool_call_id", where);
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      check(x.role == "assistant", where, ": only assistant messages carry tool_calls");
      const json& calls = m["tool_calls"];
      check(calls.is_array(), where, ".tool_calls must be a list");
      for (size_t k = 0; k < calls.size(); ++k) {
        const std::string at = where + ".tool_calls[" + std::to_string(k) + "]";
        const json& c = calls[k];
        check(c.is_object() && c.contains("function") && c["function"].is_object(), at, " needs a \"function\" object");
        const json& f = c["function"];
        ChatToolCall call;
        call.id = string_field(c, "id", at);
        call.name = string_field(f, "name", at + ".function");
        check(!call.name.empty(), at, ".function needs a \"name\"");
        if (f.contains("arguments") && f["arguments"].is_string()) call.arguments = f["arguments"].get<std::string>();
        else if (f.contains("arguments") && f["arguments"].is_object()) call.arguments = f["arguments"].dump();
        else check(!f.contains("arguments") || f["arguments"].is_null(), at, ".function.arguments must be a JSON text or an object");
        if (call.arguments.empty()) call.arguments = "{}";
        x.tool_calls.push_back(std::move(call));
      }
    }
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<std::vector<uint8_t>> chat_images(const std::vector<ChatMessage>& messages) {
  std::vector<std::vector<uint8_t>> out;
  for (auto& m : messages)
    for (auto& p : m.parts)
      if (!p.image.empty()) out.push_back(p.image);
  return out;
}

namespace engine {

std::vector<tokenizer::Message> encoding_messages(const std::vector<ChatMessage>& messages,
                                                  const std::string& tools_json, tokenizer::ChatFormat format) {
  // V4.1 joins content parts with a blank line (DeepSeek's encoder); V4 had no parts: they are concatenated.
  const std::string sep = format == tokenizer::ChatFormat::kV41 ? "\n\n" : "";
  std::vector<tokenizer::Message> msgs;
  for (auto& m : messages) {
    tokenizer::Message x;
    x.role = m.role;
    x.content = m.content;
    for (size_t k = 0; k < m.parts.size(); ++k) {
      if (k) x.content += sep;
      if (m.parts[k].image.empty()) x.content += m.parts[k].text;
      else x.image_offsets.push_back(x.content.size());
    }
    x.reasoning_content = m.reasoning_content;
    x.tool_call_id = m.tool_call_id;
    for (auto& c : m.tool_calls) x.tool_calls.push_back({c.id, c.name, c.arguments});
    msgs.push_back(std::move(x));
  }
  if (tools_json.empty()) return msgs;
  auto tools = nlohmann::ordered_json::parse(tools_json, nullptr, false);
  check(!tools.is_discarded() && tools.is_array(), "chat: tools must be a list of {\"type\": \"function\", ...}");
  if (tools.empty()) return msgs;
  auto sys = std::find_if(msgs.begin(), msgs.end(), [](auto& m) { return m.role == "system" || m.role == "developer"; });
  if (sys == msgs.end()) sys = msgs.insert(msgs.begin(), tokenizer::Message{.role = "system"});
  sys->tools = std::move(tools);
  return msgs;
}

}  // namespace engine
}  // namespace deepinfer
