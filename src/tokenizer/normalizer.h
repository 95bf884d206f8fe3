// The Engram key normalizer of DeepSeek-V4.1 (engram.py, spec v41-reference-code §6): the `tokenizers`
// sequence NFKC, NFD, StripAccents, Lowercase, then whitespace collapsing and Strip.
#pragma once
#include <cstdint>
#include <string>

namespace deepinfer::tokenizer {

// Appends the fold of one code point: lowercase(strip marks(NFD(NFKC(cp)))), Python's unicodedata 14.0.
void append_folded(std::string& out, uint32_t cp);

// A token's Engram key: the fold of every code point, [ \t\r\n]+ -> " ", a text that is exactly " " kept,
// Unicode White_Space stripped at both ends; an empty result falls back to the text. Bytes that are not
// well-formed UTF-8 pass through unfolded.
std::string engram_normalize(const std::string& text);

}  // namespace deepinfer::tokenizer
