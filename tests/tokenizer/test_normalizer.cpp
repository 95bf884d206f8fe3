// The Engram key normalizer (tokenizer/normalizer.h): known folds, an exhaustive checksum of the fold
// over every code point, and engram_normalize against answers of the reference's `tokenizers` sequence.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/normalizer.h"

using namespace deepinfer::tokenizer;

namespace {

std::string fold(uint32_t cp) {
  std::string s;
  append_folded(s, cp);
  return s;
}

}  // namespace

// Python's fold (tools/gen/gen_fold_tables.py) of letters, marks, compatibility forms, Hangul and code
// points that fold to themselves.
TEST(Normalizer, KnownFolds) {
  const std::vector<std::pair<uint32_t, std::string>> cases = {
    {0x41, "a"},  // LATIN CAPITAL LETTER A
    {0x5A, "z"},  // LATIN CAPITAL LETTER Z
    {0x61, "a"},  // LATIN SMALL LETTER A
    {0xC5, "a"},  // LATIN CAPITAL LETTER A WITH RING ABOVE
    {0xE9, "e"},  // LATIN SMALL LETTER E WITH ACUTE
    {0xBD, "1\xe2\x81\x84" "2"},  // VULGAR FRACTION ONE HALF
    {0x130, "i"},  // LATIN CAPITAL LETTER I WITH DOT ABOVE
    {0x149, "\xca\xbcn"},  // LATIN SMALL LETTER N PRECEDED BY APOSTROPHE
    {0x1C4, "dz"},  // LATIN CAPITAL LETTER DZ WITH CARON
    {0x1E9E, "\xc3\x9f"},  // LATIN CAPITAL LETTER SHARP S
    {0x301, ""},  // COMBINING ACUTE ACCENT
    {0x2126, "\xcf\x89"},  // OHM SIGN
    {0x212A, "k"},  // KELVIN SIGN
    {0x2163, "iv"},  // ROMAN NUMERAL FOUR
    {0x2460, "1"},  // CIRCLED DIGIT ONE
    {0x2473, "20"},  // CIRCLED NUMBER TWENTY
    {0x2474, "(1)"},  // PARENTHESIZED DIGIT ONE
    {0xFB01, "fi"},  // LATIN SMALL LIGATURE FI
    {0xFF21, "a"},  // FULLWIDTH LATIN CAPITAL LETTER A
    {0xFF41, "a"},  // FULLWIDTH LATIN SMALL LETTER A
    {0x3000, " "},  // IDEOGRAPHIC SPACE
    {0x3392, "mhz"},  // SQUARE MHZ
    {0x32FF, "\xe4\xbb\xa4\xe5\x92\x8c"},  // SQUARE ERA NAME REIWA
    {0x1D400, "a"},  // MATHEMATICAL BOLD CAPITAL A
    {0x1F130, "a"},  // SQUARED LATIN CAPITAL LETTER A
    {0xAC00, "\xe1\x84\x80\xe1\x85\xa1"},  // HANGUL SYLLABLE GA
    {0xAC01, "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"},  // HANGUL SYLLABLE GAG
    {0xD7A3, "\xe1\x84\x92\xe1\x85\xb5\xe1\x87\x82"},  // HANGUL SYLLABLE HIH
    {0xD55C, "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab"},  // HANGUL SYLLABLE HAN
    {0x3131, "\xe1\x84\x80"},  // HANGUL LETTER KIYEOK
    {0x1100, "\xe1\x84\x80"},  // HANGUL CHOSEONG KIYEOK
    {0x3A3, "\xcf\x83"},  // GREEK CAPITAL LETTER SIGMA
    {0x3C2, "\xcf\x82"},  // GREEK SMALL LETTER FINAL SIGMA
    {0x1F88, "\xce\xb1"},  // GREEK CAPITAL LETTER ALPHA WITH PSILI AND PROSGEGRAMMENI
    {0x4E00, "\xe4\xb8\x80"},  // CJK UNIFIED IDEOGRAPH-4E00
    {0xF900, "\xe8\xb1\x88"},  // CJK COMPATIBILITY IDEOGRAPH-F900
    {0x2F00, "\xe4\xb8\x80"},  // KANGXI RADICAL ONE
    {0x10400, "\xf0\x90\x90\xa8"},  // DESERET CAPITAL LETTER LONG I
    {0x1E900, "\xf0\x9e\xa4\xa2"},  // ADLAM CAPITAL LETTER ALIF
    {0x5D0, "\xd7\x90"},  // HEBREW LETTER ALEF
    {0x622, "\xd8\xa7"},  // ARABIC LETTER ALEF WITH MADDA ABOVE
    {0xE01, "\xe0\xb8\x81"},  // THAI CHARACTER KO KAI
    {0x10FFFF, "\xf4\x8f\xbf\xbf"},  // the last code point (a noncharacter)
    {0xE000, "\xee\x80\x80"},  // the first private-use code point
  };
  for (const auto& [cp, want] : cases) EXPECT_EQ(fold(cp), want) << std::hex << "U+" << cp;
}

// FNV-1a 64 over fold(c) + 0xFF for every code point but the surrogates; the generator prints the same
// checksum computed straight from Python's unicodedata, so the runs and the Hangul rule match it everywhere.
TEST(Normalizer, FoldOfEveryCodePoint) {
  uint64_t h = 0xCBF29CE484222325ULL;
  auto add = [&](unsigned char b) { h = (h ^ b) * 0x100000001B3ULL; };
  std::string s;
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    s.clear();
    append_folded(s, cp);
    for (char ch : s) add(static_cast<unsigned char>(ch));
    add(0xFF);
  }
  EXPECT_EQ(h, 0x188596D1A617051CULL);
}

// Answers of tokenizers' NFKC, NFD, StripAccents, Lowercase, Replace([ \t\r\n]+, " "), " " protected,
// Strip (engram.py), with an empty result falling back to the text.
TEST(Normalizer, EngramKeys) {
  const std::vector<std::pair<std::string, std::string>> cases = {
  {"  Hello\x09World  ", "hello world"},
  {" ", " "},
  {"\x0a\x0a", " "},
  {"\xcc\x81", "\xcc\x81"},
  {"\xef\xbc\xa3\xef\xbd\x81\xef\xbd\x86\xc3\xa9", "cafe"},
  {"\xef\xbc\xa1\xe3\x80\x80", "a"},
  {"\xc2\xa0x", "x"},
  {"x\xe2\x80\xa8", "x"},
  {"  a \x0d\x0a b  ", "a b"},
  {"\xef\xac\x81nance", "finance"},
  {"\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab\xe1\x84\x80\xe1\x85\xae\xe1\x86\xa8\xe1\x84\x8b\xe1\x85\xa5"},
  {"Stra\xc3\x9f" "e", "stra\xc3\x9f" "e"},
  {"\xc3\x80\xc3\x89\xc3\x8e", "aei"},
  {"\xe2\x85\xa3", "iv"},
  {"", ""},
  {"a\xc2\x85", "a"},
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(engram_normalize(text), want) << text;
}

TEST(Normalizer, MalformedBytesPassThrough) {
  EXPECT_EQ(engram_normalize("\xFF" "A\xC3"), "\xFF" "a\xC3");
  EXPECT_EQ(engram_normalize(" \x80 "), "\x80");
}
