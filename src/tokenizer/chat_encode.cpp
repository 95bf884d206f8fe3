// encode_chat: the rendered prompt as token ids, where only the format's own markup becomes special
// tokens. Every string that came from a message (content, reasoning, tool calls, tool results, tool
// schemas) is escaped before rendering: each added-token string in it becomes a private-use mark
// U+10FFFD + index + ';', which the renderer copies as is; the marks are then encoded as plain text.
// An image of a message is the mark U+10FFFD + "i;", encoded as the image token id.
#include <algorithm>
#include <array>
#include <optional>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kMark = "\xF4\x8F\xBF\xBD";  // U+10FFFD, a private-use noncharacter
const std::string kImageMark = kMark + "i;";

class Escaper {
 public:
  // specials_pass: added-token strings in messages stay special tokens (trusted input); only marks are escaped.
  Escaper(const Tokenizer& tok, bool specials_pass, std::optional<int32_t> image_token_id)
      : image_token_id_(image_token_id) {
    for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()) && !specials_pass; ++id)
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
      if (text.compare(m, kImageMark.size(), kImageMark) == 0) {
        check(image_token_id_.has_value(), "chat: a message holds an image, but this model has no image token "
              "(images need a V4.1 model with a vision tower)");
        out.push_back(*image_token_id_);
        at = semi + 1;
        continue;
      }
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
  std::optional<int32_t> image_token_id_;
};

}  // namespace

std::vector<int32_t> encode_chat(const Tokenizer& tok, ChatFormat format, std::span<const Message> messages,
                                 const ChatOptions& options) {
  Escaper esc(tok, options.special_tokens_in_content, options.image_token_id);
  std::vector<Message> safe(messages.begin(), messages.end());
  for (size_t i = 0; i < safe.size(); ++i) {
    Message& m = safe[i];
    std::string content;
    const std::vector<std::string_view> pieces = content_pieces(format, m, i);
    for (size_t k = 0; k < pieces.size(); ++k) content += (k ? kImageMark : "") + esc.escape(std::string(pieces[k]));
    m.content = std::move(content);
    m.image_offsets.clear();
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
