// deepinfer._core.render_chat / parse_chat: the DeepSeek chat encoding with everything OpenAI's chat
// API carries (tools, tool calls, tool results, reasoning), for the server. Messages travel as JSON
// text in OpenAI's shape, so this layer stays a thin conversion.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

namespace py = pybind11;
using namespace deepinfer;
using nlohmann::ordered_json;

namespace {

tokenizer::ChatFormat format_of(const std::string& name) {
  if (name == "v4") return tokenizer::ChatFormat::kV4;
  if (name == "v41") return tokenizer::ChatFormat::kV41;
  fail("chat format must be 'v4' or 'v41', got '", name, "'");
}

std::string text_of(const ordered_json& m, const char* key) {
  if (!m.contains(key) || m[key].is_null()) return "";
  const auto& v = m[key];
  if (v.is_string()) return v.get<std::string>();
  // OpenAI content parts: [{"type": "text", "text": ...}, ...]
  check(v.is_array(), "message '", key, "' must be a string or a list of text parts");
  std::string out;
  for (auto& part : v) {
    check(part.is_object() && part.value("type", "") == "text" && part.contains("text"),
          "message '", key, "': only text parts are supported");
    out += part["text"].get<std::string>();
  }
  return out;
}

tokenizer::Message message_from_json(const ordered_json& m, size_t i) {
  check(m.is_object() && m.contains("role") && m["role"].is_string(), "message ", i, " needs a string 'role'");
  tokenizer::Message x;
  x.role = m["role"].get<std::string>();
  x.content = text_of(m, "content");
  x.reasoning_content = text_of(m, "reasoning_content");
  if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) x.tool_call_id = m["tool_call_id"].get<std::string>();
  if (m.contains("tools") && !m["tools"].is_null()) x.tools = m["tools"];
  if (m.contains("response_format") && !m["response_format"].is_null()) x.response_format = m["response_format"];
  if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
    for (auto& c : m["tool_calls"]) {
      check(c.is_object() && c.contains("function") && c["function"].contains("name"),
            "message ", i, ": a tool call needs function.name");
      const auto& f = c["function"];
      tokenizer::ToolCall call;
      call.id = c.value("id", "");
      call.name = f["name"].get<std::string>();
      call.arguments = !f.contains("arguments") ? "{}" : f["arguments"].is_string() ? f["arguments"].get<std::string>()
                                                                                     : f["arguments"].dump();
      x.tool_calls.push_back(std::move(call));
    }
  }
  return x;
}

}  // namespace

void bind_chat(py::module_& m) {
  m.def(
      "render_chat",
      [](const std::string& messages_json, const std::string& format, bool thinking, const std::string& reasoning_effort,
         bool add_generation_prompt) {
        auto j = ordered_json::parse(messages_json, nullptr, false);
        check(j.is_array() && !j.empty(), "messages must be a non-empty list");
        std::vector<tokenizer::Message> msgs;
        for (size_t i = 0; i < j.size(); ++i) msgs.push_back(message_from_json(j[i], i));
        tokenizer::ChatOptions o;
        o.thinking = thinking;
        o.reasoning_effort = reasoning_effort;
        o.add_generation_prompt = add_generation_prompt;
        return tokenizer::render_chat(format_of(format), msgs, o);
      },
      py::arg("messages_json"), py::arg("format"), py::arg("thinking") = false, py::arg("reasoning_effort") = "",
      py::arg("add_generation_prompt") = true,
      "The prompt text (with special-token strings) of OpenAI-shaped messages given as JSON text.");
  m.def(
      "parse_chat",
      [](const std::string& text, const std::string& format, bool thinking) {
        auto p = tokenizer::parse_completion(text, format_of(format), thinking);
        py::dict d;
        d["content"] = p.content;
        d["reasoning_content"] = p.reasoning_content;
        py::list calls;
        for (auto& c : p.tool_calls) calls.append(py::make_tuple(c.name, c.arguments));
        d["tool_calls"] = calls;
        d["ended"] = p.ended;
        return d;
      },
      py::arg("text"), py::arg("format"), py::arg("thinking") = false,
      "One assistant turn parsed from the model's text: content, reasoning_content, tool_calls [(name, arguments)].");
}
