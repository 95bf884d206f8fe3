// encode_chat: the rendered prompt as token ids, where only the format's own markup becomes special
// tokens. Every string that came from a message (content, reasoning, tool calls, tool results, tool
// schemas) is escaped before rendering: each added-token string in it becomes a private-use mark
// U+10FFFD + index + ';', which the renderer copies as is; the marks are then encoded as plain text.
#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kMark = "\xF4\x8F\xBF\xBD";  // U+10FFFD, a private-use noncharacter

class Escaper {
 public:
  explicit Escaper(const Tokenizer& tok) {
    for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id)
      if (tok.is_added(id) && !tok.token_string(id).empty()) add(tok.token_string(id));
    add(kMark);  // a mark typed by the user is escaped like a special token
    for (auto& bucket : by_first_)
      std::sort(bucket.begin(), bucket.end(), [](auto& a, auto& b) { return a.size() > b.size(); });
  }

  std::string escape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      const std::string* hit = nullptr;
      for (const std::string& t : by_first_[static_cast<unsigned char>(s[i])])
        if (s.compare(i, t.size(), t) == 0) { hit = &t; break; }
      if (!hit) {
        out += s[i++];
        continue;
      }
      out += kMark + std::to_string(spans_.size()) + ';';
      spans_.push_back(*hit);
      i += hit->size();
    }
    return out;
  }

  void escape(ojson& j) {
    if (j.is_string()) {
      j = escape(j.get<std::string>());
    } else if (j.is_array()) {
      for (auto& v : j) escape(v);
    } else if (j.is_object()) {
      ojson out = ojson::object();
      for (auto it = j.begin(); it != j.end(); ++it) {
        ojson v = it.value();
        escape(v);
        out[escape(it.key())] = std::move(v);
      }
      j = std::move(out);
    }
  }

  // Encodes the rendered text: markup with special tokens, escaped spans as plain text.
  std::vector<int32_t> encode(const Tokenizer& tok, const std::string& text) const {
    std::vector<int32_t> out;
    size_t at = 0;
    while (at <= text.size()) {
      const size_t m = text.find(kMark, at);
      const std::string_view piece = std::string_view(text).substr(at, m == std::string::npos ? std::string::npos : m - at);
      if (!piece.empty()) tok.encode_into(piece, false, out);
      if (m == std::string::npos) break;
      const size_t semi = text.find(';', m + kMark.size());
      check(semi != std::string::npos, "chat: internal: unterminated escape mark");
      const size_t index = std::stoul(text.substr(m + kMark.size(), semi - m - kMark.size()));
      check(index < spans_.size(), "chat: internal: escape mark out of range");
      const std::vector<int32_t> plain = tok.encode_plain(spans_[index]);
      out.insert(out.end(), plain.begin(), plain.end());
      at = semi + 1;
    }
    return out;
  }

 private:
  void add(const std::string& t) { by_first_[static_cast<unsigned char>(t[0])].push_back(t); }
  std::array<std::vector<std::string>, 256> by_first_;
  std::vector<std::string> spans_;
};

}  // namespace

std::vector<int32_t> encode_chat(const Tokenizer& tok, ChatFormat format, std::span<const Message> messages,
                                 const ChatOptions& options) {
  if (options.special_tokens_in_content) return tok.encode(render_chat(format, messages, options), false);
  Escaper esc(tok);
  std::vector<Message> safe(messages.begin(), messages.end());
  for (Message& m : safe) {
    m.content = esc.escape(m.content);
    m.reasoning_content = esc.escape(m.reasoning_content);
    m.tool_call_id = esc.escape(m.tool_call_id);
    for (ToolCall& c : m.tool_calls) {
      c.id = esc.escape(c.id);
      c.name = esc.escape(c.name);
      c.arguments = esc.escape(c.arguments);
    }
    esc.escape(m.tools);
    esc.escape(m.response_format);
  }
  return esc.encode(tok, render_chat(format, safe, options));
}

}  // namespace deepinfer::tokenizer
