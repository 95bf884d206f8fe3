#include "tokenizer/chat_encoding.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace deepinfer::tokenizer {

using ojson = nlohmann::ordered_json;

namespace {

const std::string kBos = "<｜begin▁of▁sentence｜>";
const std::string kEos = "<｜end▁of▁sentence｜>";
const std::string kUser = "<｜User｜>";
const std::string kAssistant = "<｜Assistant｜>";
const std::string kSystem = "<｜System｜>";
const std::string kReminder = "<｜latest_reminder｜>";
const std::string kThinkBegin = "<think>";
const std::string kThinkEnd = "</think>";
const std::string kDsml = "｜DSML｜";

const std::map<std::string, std::string> kTaskTokens = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"},   {"read_url", "<｜read_url｜>"}};

const std::string kEffortMaxV4 =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The per-format differences: DSML tag names (V4.1 puts a space after the DSML token).
struct Dialect {
  ChatFormat format;
  std::string calls, invoke, parameter;
};
const Dialect kV4{ChatFormat::kV4, "tool_calls", "invoke", "parameter"};
const Dialect kV41{ChatFormat::kV41, " calls", " invoke", " parameter"};

std::string tools_prompt(const Dialect& d, const std::string& schemas) {
  const std::string& D = kDsml;
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools "
         "by writing a \"<" + D + d.calls + ">\" block like the following:\n\n"
         "<" + D + d.calls + ">\n"
         "<" + D + d.invoke + " name=\"$TOOL_NAME\">\n"
         "<" + D + d.parameter + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + D + d.parameter + ">\n"
         "...\n"
         "</" + D + d.invoke + ">\n"
         "<" + D + d.invoke + " name=\"$TOOL_NAME2\">\n"
         "...\n"
         "</" + D + d.invoke + ">\n"
         "</" + D + d.calls + ">\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
         "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by " + kThinkBegin + "), you MUST output your complete reasoning "
         "inside " + kThinkBegin + "..." + kThinkEnd + " BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after " + kThinkEnd + " with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n" + schemas + "\n\n"
         "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
}

void dump_string(std::string_view s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void dump(const ojson& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      dump_string(it.key(), out);
      out += ": ";
      dump(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      dump(j[i], out);
    }
    out += ']';
  } else if (j.is_string()) {
    dump_string(j.get_ref<const std::string&>(), out);
  } else {
    out += j.dump();  // numbers, booleans, null
  }
}

// The tool list of a system/developer message: each entry's "function" object.
std::string render_tools(const Dialect& d, const ojson& tools) {
  check(tools.is_array(), "chat: 'tools' must be a list of {\"type\": \"function\", \"function\": {...}}");
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    check(tools[i].is_object() && tools[i].contains("function"), "chat: tool #", i, " has no 'function'");
    if (i) schemas += '\n';
    schemas += python_json_dumps(tools[i]["function"]);
  }
  return tools_prompt(d, schemas);
}

std::string render_arguments(const Dialect& d, const ToolCall& call) {
  // Arguments are a JSON object text; a double-encoded one is unwrapped, anything else is kept
  // whole under "arguments" (as DeepSeek's encoder does).
  ojson args = ojson::parse(call.arguments, nullptr, false);
  if (args.is_string()) args = ojson::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) args = ojson{{"arguments", call.arguments}};
  std::string out;
  bool first = true;
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (!first) out += '\n';
    first = false;
    bool is_str = it.value().is_string();
    out += "<" + kDsml + d.parameter + " name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") + "\">";
    out += is_str ? it.value().get<std::string>() : python_json_dumps(it.value());
    out += "</" + kDsml + d.parameter + ">";
  }
  return out;
}

// A user turn after merging: text and tool results, joined by blank lines.
struct Block {
  bool tool_result;
  std::string text, tool_use_id;
};
struct Msg {
  const Message* m;
  std::vector<Block> blocks;  // user turns only
  bool has_blocks = false;
  bool drop_reasoning = false;
  const std::string& role() const { return m->role; }
};

// Tool messages become <tool_result> blocks of a user turn; consecutive user turns merge.
std::vector<Msg> merge_tool_messages(std::span<const Message> messages) {
  std::vector<Msg> out;
  for (const Message& m : messages) {
    if (m.role == "tool" || m.role == "user") {
      Block b{m.role == "tool", m.content, m.tool_call_id};
      bool merge = !out.empty() && out.back().role() == "user" && out.back().has_blocks &&
                   (m.role == "tool" || !out.back().m->task);
      if (merge) {
        out.back().blocks.push_back(std::move(b));
        continue;
      }
      // A synthetic user turn for tool results: owns no Message, so point at a static one.
      static const Message tool_user = [] {
        Message u;
        u.role = "user";
        return u;
      }();
      Msg x{m.role == "tool" ? &tool_user : &m, {std::move(b)}, true};
      out.push_back(std::move(x));
    } else {
      out.push_back(Msg{&m, {}, false});
    }
  }
  return out;
}

// Tool results are ordered like the calls of the latest assistant turn that made calls.
void sort_tool_results(std::vector<Msg>& msgs) {
  std::map<std::string, int> order;
  for (Msg& x : msgs) {
    if (x.role() == "assistant" && !x.m->tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < x.m->tool_calls.size(); ++i)
        if (!x.m->tool_calls[i].id.empty()) order[x.m->tool_calls[i].id] = int(i);
    } else if (x.role() == "user" && x.has_blocks && !order.empty()) {
      std::vector<Block> results;
      for (auto& b : x.blocks)
        if (b.tool_result) results.push_back(b);
      if (results.size() < 2) continue;
      auto rank = [&](const Block& b) {
        auto it = order.find(b.tool_use_id);
        return it == order.end() ? 0 : it->second;
      };
      std::stable_sort(results.begin(), results.end(), [&](auto& a, auto& b) { return rank(a) < rank(b); });
      size_t k = 0;
      for (auto& b : x.blocks)
        if (b.tool_result) b = results[k++];
    }
  }
}

// The last generation boundary: a user turn (V4: or developer; V4.1: or a later system turn).
int last_user_index(const std::vector<Msg>& msgs, ChatFormat f) {
  for (int i = int(msgs.size()) - 1; i >= 0; --i) {
    const std::string& r = msgs[i].role();
    if (r == "user" || (f == ChatFormat::kV4 && r == "developer") || (f == ChatFormat::kV41 && r == "system" && i > 0))
      return i;
  }
  return -1;
}

// Before the last user turn: assistants lose their reasoning, developer turns disappear.
std::vector<Msg> drop_thinking(std::vector<Msg> msgs, ChatFormat f) {
  int last = last_user_index(msgs, f);
  std::vector<Msg> out;
  for (int i = 0; i < int(msgs.size()); ++i) {
    const std::string& r = msgs[i].role();
    if (r == "user" || r == "system" || r == "tool" || r == "latest_reminder" || i >= last) {
      out.push_back(std::move(msgs[i]));
    } else if (r == "assistant") {
      msgs[i].drop_reasoning = true;
      out.push_back(std::move(msgs[i]));
    }
  }
  return out;
}

std::string effort_prefix_v41(const std::string& effort, bool thinking, size_t index) {
  int budget = 0;
  if (effort.empty() || effort == "high") budget = 50;
  else if (effort == "low") budget = 25;
  else if (effort == "xhigh") budget = 75;
  else if (effort == "max") budget = 100;
  else {
    size_t used = 0;
    try {
      budget = std::stoi(effort, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    check(used == effort.size() && budget >= 1 && budget <= 100, "chat: reasoning effort '", effort,
          "' is not low/high/xhigh/max or a number 1-100");
  }
  if (index != 0 || !thinking) return "";
  return "Reasoning Effort: " + std::to_string(budget) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

std::string render(const Dialect& d, std::span<const Message> messages, const ChatOptions& opt) {
  const ChatFormat f = d.format;
  if (f == ChatFormat::kV4)
    check(opt.reasoning_effort.empty() || opt.reasoning_effort == "high" || opt.reasoning_effort == "max",
          "chat: V4 reasoning effort must be empty, 'high' or 'max', got '", opt.reasoning_effort, "'");
  std::vector<Msg> msgs = merge_tool_messages(messages);
  sort_tool_results(msgs);
  bool any_tools = std::any_of(messages.begin(), messages.end(), [](auto& m) { return !m.tools.is_null() && !m.tools.empty(); });
  bool drop = opt.drop_thinking && !any_tools;  // reasoning is kept whenever tools are in play
  if (opt.thinking && drop) msgs = drop_thinking(std::move(msgs), f);
  const int last_user = last_user_index(msgs, f);

  std::string out = opt.add_bos ? kBos : "";
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Msg& x = msgs[i];
    const Message& m = *x.m;
    std::string p;
    if (f == ChatFormat::kV4) {
      if (i == 0 && opt.thinking && opt.reasoning_effort == "max") p += kEffortMaxV4;
    } else {
      std::string effort = effort_prefix_v41(opt.reasoning_effort, opt.thinking, i);
      if (i == 0 && (!effort.empty() || m.role == "system")) p += kSystem;  // <｜System｜> opens the chat
      p += effort;
    }
    auto tools_and_format = [&] {
      if (!m.tools.is_null() && !m.tools.empty()) p += "\n\n" + render_tools(d, m.tools);
      if (!m.response_format.is_null())
        p += "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
             python_json_dumps(m.response_format);
    };
    if (m.role == "system") {
      if (f == ChatFormat::kV41 && i > 0) p += kSystem;
      p += m.content;
      tools_and_format();
    } else if (m.role == "developer") {
      check(f == ChatFormat::kV4, "chat: V4.1 has no 'developer' role (message ", i, ")");
      check(!m.content.empty(), "chat: a developer message needs content (message ", i, ")");
      p += kUser + m.content;
      tools_and_format();
    } else if (m.role == "user") {
      p += kUser;
      for (size_t k = 0; k < x.blocks.size(); ++k) {
        if (k) p += "\n\n";
        p += x.blocks[k].tool_result ? "<tool_result>" + x.blocks[k].text + "</tool_result>" : x.blocks[k].text;
      }
    } else if (m.role == "latest_reminder") {
      p += kReminder + m.content;
    } else if (m.role == "assistant") {
      std::string calls;
      if (!m.tool_calls.empty()) {
        calls = "\n\n<" + kDsml + d.calls + ">\n";
        for (size_t k = 0; k < m.tool_calls.size(); ++k) {
          if (k) calls += '\n';
          calls += "<" + kDsml + d.invoke + " name=\"" + m.tool_calls[k].name + "\">\n" +
                   render_arguments(d, m.tool_calls[k]) + "\n</" + kDsml + d.invoke + ">";
        }
        calls += "\n</" + kDsml + d.calls + ">";
      }
      bool prev_task = i > 0 && msgs[i - 1].m->task.has_value();
      if (opt.thinking && !prev_task && (!drop || int(i) > last_user))
        p += (x.drop_reasoning ? std::string() : m.reasoning_content) + kThinkEnd;
      p += m.content + calls;
      if (!m.wo_eos) p += kEos;
    } else {
      fail("chat: unknown role '", m.role, "' (message ", i, ")");
    }

    // What follows the turn: nothing when another non-assistant turn comes next; else the task
    // token or the assistant header with the thinking switch.
    bool next_breaks = i + 1 < msgs.size() && msgs[i + 1].role() != "assistant" && msgs[i + 1].role() != "latest_reminder";
    if (!next_breaks) {
      bool is_boundary = m.role == "user" || (f == ChatFormat::kV4 && m.role == "developer") ||
                         (f == ChatFormat::kV41 && m.role == "system" && i > 0);
      if (m.task) {
        auto it = kTaskTokens.find(*m.task);
        check(it != kTaskTokens.end(), "chat: unknown task '", *m.task, "'");
        if (*m.task == "action") p += kAssistant + (opt.thinking ? kThinkBegin : kThinkEnd);
        p += it->second;
      } else if (is_boundary && (opt.add_generation_prompt || i + 1 < msgs.size())) {
        p += kAssistant + (opt.thinking && (!drop || int(i) >= last_user) ? kThinkBegin : kThinkEnd);
      }
    }
    out += p;
  }
  return out;
}

// Finds the earliest of the stop strings at or after pos. Returns text[pos, hit) and moves pos
// past the stop string; `which` is its index, or -1 when none occurs (pos moves to the end).
std::string_view read_until(std::string_view text, size_t& pos, std::initializer_list<std::string_view> stops, int& which) {
  size_t best = std::string_view::npos;
  which = -1;
  int k = 0;
  for (std::string_view s : stops) {
    size_t at = text.find(s, pos);
    if (at < best) best = at, which = k;
    ++k;
  }
  std::string_view part;
  if (which < 0) {
    part = text.substr(pos);
    pos = text.size();
  } else {
    part = text.substr(pos, best - pos);
    pos = best + (stops.begin() + which)->size();
  }
  return part;
}

// `name="X">\n` (after optional whitespace) -> X.
std::string parse_invoke_name(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  std::string_view rest = s.substr(i);
  check(rest.starts_with("name=\"") && rest.ends_with("\">\n") && rest.size() >= 9,
        "tool call: malformed invoke header '", s, "'");
  return std::string(rest.substr(6, rest.size() - 9));
}

}  // namespace

std::string python_json_dumps(const ojson& value) {
  std::string out;
  dump(value, out);
  return out;
}

std::string render_v4(std::span<const Message> messages, const ChatOptions& options) {
  return render_chat(ChatFormat::kV4, messages, options);
}

std::string render_v41(std::span<const Message> messages, const ChatOptions& options) {
  return render_chat(ChatFormat::kV41, messages, options);
}

std::vector<std::string_view> content_pieces(ChatFormat format, const Message& m, size_t i) {
  const std::string_view c = m.content;
  if (m.image_offsets.empty()) return {c};
  check(format == ChatFormat::kV41, "chat: the V4 chat format has no images (message ", i, ")");
  check(m.role == "user", "chat: only user messages may hold images (message ", i, " is '", m.role, "')");
  std::vector<std::string_view> out;
  size_t at = 0;
  for (size_t off : m.image_offsets) {
    check(off >= at && off <= c.size(), "chat: image offsets of message ", i, " out of order or past its content");
    out.push_back(c.substr(at, off - at));
    at = off;
  }
  out.push_back(c.substr(at));
  return out;
}

std::string render_chat(ChatFormat format, std::span<const Message> messages, const ChatOptions& options) {
  if (std::any_of(messages.begin(), messages.end(), [](auto& m) { return !m.image_offsets.empty(); })) {
    std::vector<Message> placed(messages.begin(), messages.end());  // images as their placeholder text
    for (size_t i = 0; i < placed.size(); ++i) {
      std::string c;
      const std::vector<std::string_view> pieces = content_pieces(format, placed[i], i);
      for (size_t k = 0; k < pieces.size(); ++k) (k ? c.append(kImagePlaceholder) : c).append(pieces[k]);
      placed[i].content = std::move(c);
      placed[i].image_offsets.clear();
    }
    return render_chat(format, placed, options);
  }
  return render(format == ChatFormat::kV4 ? kV4 : kV41, messages, options);
}

ChatTokens ChatTokens::from(const Tokenizer& tok) {
  auto need = [&](const std::string& s) {
    auto id = tok.token_to_id(s);
    check(id.has_value(), "tokenizer has no token '", s, "' needed by the chat format");
    return *id;
  };
  ChatTokens t{need(kBos), need(kEos), need(kUser), need(kAssistant), need(kThinkBegin), need(kThinkEnd), need(kDsml), std::nullopt};
  t.system = tok.token_to_id(kSystem);
  return t;
}

ParsedMessage parse_completion(std::string_view text, ChatFormat format, bool thinking) {
  const Dialect& d = format == ChatFormat::kV4 ? kV4 : kV41;
  const std::string calls_start = "\n\n<" + kDsml + d.calls;
  const std::string calls_end = "</" + kDsml + d.calls + ">";
  const std::string invoke_open = "<" + kDsml + d.invoke, invoke_close = "</" + kDsml + d.invoke;
  const std::string param_open = "<" + kDsml + d.parameter, param_close = "/" + kDsml + d.parameter;
  ParsedMessage out;
  size_t pos = 0;
  int which;
  if (thinking) {
    out.reasoning_content = read_until(text, pos, {kThinkEnd, calls_start}, which);
    check(which == 0, "model output: missing ", kThinkEnd, " after the reasoning");
  }
  out.content = read_until(text, pos, {kEos, calls_start}, which);
  out.ended = which == 0;
  if (which == 1) {  // DSML tool calls
    while (true) {
      std::string_view gap = read_until(text, pos, {invoke_open, calls_end}, which);
      check(gap == ">\n", "tool call: expected '>\\n' before an invoke, got '", gap, "'");
      if (which == 1) break;
      check(which == 0, "tool call: the block is not closed with ", calls_end);
      ToolCall call;
      std::string_view header = read_until(text, pos, {param_open, invoke_close}, which);
      check(which >= 0, "tool call: invoke is not closed with ", invoke_close, ">");
      call.name = parse_invoke_name(header);
      ojson args = ojson::object();
      std::string json_args = "{";
      while (which == 0) {  // parameters: ` name="K" string="true|false">V<`
        std::string_view p = read_until(text, pos, {param_close}, which);
        check(which == 0, "tool call '", call.name, "': parameter is not closed with ", param_close, ">");
        size_t q = p.find("\" string=\"");
        check(p.starts_with(" name=\"") && q != std::string_view::npos && p.ends_with("<"),
              "tool call '", call.name, "': malformed parameter '", p, "'");
        std::string key(p.substr(7, q - 7));
        std::string_view rest = p.substr(q + 10);
        bool is_str = rest.starts_with("true\">");
        check(is_str || rest.starts_with("false\">"), "tool call '", call.name, "': parameter '", key,
              "' needs string=\"true\" or string=\"false\"");
        std::string_view value = rest.substr(is_str ? 6 : 7);
        value.remove_suffix(1);
        check(!args.contains(key), "tool call '", call.name, "': duplicate parameter '", key, "'");
        ojson v;
        if (is_str) {
          v = std::string(value);
        } else {
          v = ojson::parse(value, nullptr, false);
          check(!v.is_discarded(), "tool call '", call.name, "': parameter '", key, "' has string=\"false\" but '",
                value, "' is not JSON");
        }
        if (json_args.size() > 1) json_args += ", ";
        json_args += python_json_dumps(key) + ": " + (is_str ? python_json_dumps(v) : std::string(value));
        args[key] = std::move(v);
        std::string_view sep = read_until(text, pos, {param_open, invoke_close}, which);
        check(which >= 0 && sep == ">\n", "tool call '", call.name, "': expected '>\\n' after a parameter, got '", sep, "'");
      }
      call.arguments = json_args + "}";
      out.tool_calls.push_back(std::move(call));
    }
    std::string_view tail = read_until(text, pos, {kEos}, which);
    check(tail.empty(), "model output: unexpected text after the tool calls: '", tail, "'");
    out.ended = which == 0;
  }
  check(pos == text.size(), "model output: unexpected text after ", kEos, ": '", text.substr(pos), "'");
  for (const std::string& t : {kBos, kEos, kThinkBegin, kThinkEnd, kDsml})
    check(out.content.find(t) == std::string::npos && out.reasoning_content.find(t) == std::string::npos,
          "model output: unexpected special token ", t, " in the text");
  return out;
}

}  // namespace deepinfer::tokenizer
