// The public chat messages (deepinfer/llm.h) as the chat encoding's messages.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/llm.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::engine {

// tools_json: the OpenAI tool list (JSON text, "" for none); it goes with the first system (or
// developer) message, or a new empty system message in front when there is none. Content parts are
// joined as the format does (V4.1: "\n\n", images at their place; V4: text concatenated).
std::vector<tokenizer::Message> encoding_messages(const std::vector<ChatMessage>& messages,
                                                  const std::string& tools_json, tokenizer::ChatFormat format);

// The bytes of an image_url part's image (chat_messages_image.cpp); `where` names the part in errors.
std::vector<uint8_t> image_from_url(const std::string& url, const ChatImageSources& sources, const std::string& where);
// Standard base64 (padding optional); any other character is an error naming `where`.
std::vector<uint8_t> base64_decode(std::string_view text, const std::string& where);

}  // namespace deepinfer::engine
