// The public chat messages (deepinfer/llm.h) as the chat encoding's messages.
#pragma once
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "tokenizer/chat_encoding.h"

namespace deepinfer::engine {

// tools_json: the OpenAI tool list (JSON text, "" for none); it goes with the first system (or
// developer) message, or a new empty system message in front when there is none.
std::vector<tokenizer::Message> encoding_messages(const std::vector<ChatMessage>& messages,
                                                  const std::string& tools_json);

}  // namespace deepinfer::engine
