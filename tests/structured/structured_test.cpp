#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"
#include "structured/structured.h"
#include "test_vocab.h"

using namespace deepinfer::structured;

namespace {

TokenVocab tiny_vocab() {
  // id 0 is the stop token, id 1 a special token (empty), ids past the end are padding.
  return TokenVocab({"", "", "a", "b", "ab", "abc", "{", "}", "\"", "\":", "1", "12", ",", "é", "\xC3", "\xA9", "", ""}, {0});
}

std::shared_ptr<const CompiledGrammar> make(const std::string& type, const std::string& schema, const TokenVocab& v) {
  return compile(SchemaArgs{type, schema}, v);
}

bool allowed(const Matcher& m, int32_t id) {
  std::vector<uint32_t> w((m.vocab_size() + 31) / 32);
  m.fill_next_token_bitmask(w.data());
  return (w[id >> 5] >> (id & 31)) & 1;
}

TEST(Structured, RegexAcceptRollbackAndEnd) {
  auto v = tiny_vocab();
  Matcher m(make("regex", "(ab)+c?", v));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(allowed(m, 4));   // "ab"
  EXPECT_TRUE(allowed(m, 5));   // "abc"
  EXPECT_FALSE(allowed(m, 3));  // "b"
  EXPECT_FALSE(allowed(m, 0));  // stop not yet
  EXPECT_TRUE(m.accept_token(2));
  EXPECT_FALSE(m.accept_token(2));  // "aa" is not a prefix
  EXPECT_TRUE(m.accept_token(3));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(allowed(m, 0));
  EXPECT_TRUE(m.accept_token(5));  // "ababc": must end now
  EXPECT_TRUE(m.must_end());
  EXPECT_TRUE(m.accept_token(0));
  EXPECT_TRUE(m.is_terminated());
  m.rollback(2);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  EXPECT_FALSE(allowed(m, 1));   // special tokens never
  EXPECT_FALSE(allowed(m, 16));  // padding never
}

// Subset construction can grow exponentially in the pattern (.*a.{n}: 2^n states); one request's
// grammar must not take minutes to compile (fuzz_request found one of 28 s), so it is refused.
TEST(Structured, ExponentialRegexIsRefused) {
  auto v = tiny_vocab();
  EXPECT_NO_THROW(make("regex", ".*a.{6}", v));  // 1,281 nodes
  try {
    make("regex", ".*a.{30}", v);
    FAIL() << "compiled";
  } catch (const deepinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("grammar too complex"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(make("regex", "[a-z]{2000}", v));  // large but linear
}

TEST(Structured, Utf8SplitAcrossTokens) {
  auto v = tiny_vocab();
  Matcher m(make("regex", "[é]+", v));
  EXPECT_TRUE(allowed(m, 13));
  EXPECT_TRUE(allowed(m, 14));   // first byte of é
  EXPECT_FALSE(allowed(m, 15));  // a lone continuation byte
  EXPECT_TRUE(m.accept_token(14));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(allowed(m, 15));
  EXPECT_TRUE(m.accept_token(15));
  EXPECT_TRUE(m.can_end());
}

TEST(Structured, ChoiceAndJsonSchema) {
  auto v = tiny_vocab();
  Matcher c(make("choice", R"(["ab", "abc"])", v));
  EXPECT_TRUE(c.accept_token(4));
  EXPECT_TRUE(c.can_end());
  EXPECT_FALSE(c.must_end());
  Matcher j(make("json", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false})", v));
  for (int32_t id : {6, 8, 2, 9, 11}) EXPECT_TRUE(j.accept_token(id)) << id;  // {"a":12
  EXPECT_FALSE(j.can_end());
  EXPECT_TRUE(j.accept_token(7));
  EXPECT_TRUE(j.must_end());
}

TEST(Structured, ObjectKeysInAnyOrderEachOnce) {
  auto v = tiny_vocab();
  auto g = make("json", R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{}},"required":["a","b"],
                            "additionalProperties":false})", v);
  auto accepts = [&](const std::string& text) {
    Matcher m(g);
    return m.accept_bytes(text) && m.can_end();
  };
  EXPECT_TRUE(accepts(R"({"a":1,"b":2})"));
  EXPECT_TRUE(accepts(R"({"b":2,"a":1})"));
  EXPECT_TRUE(accepts(R"({"c":null,"b":2,"a":1})"));
  EXPECT_FALSE(accepts(R"({"b":2})"));             // required "a" missing
  EXPECT_FALSE(accepts(R"({"a":1,"b":2,"a":3})"));  // a key twice
  EXPECT_FALSE(accepts(R"({"a":1,"b":2,"d":3})"));  // no extra keys
  Matcher m(g);
  ASSERT_TRUE(m.accept_bytes(R"({"c":1,"a":1,"b":2)"));
  EXPECT_TRUE(m.must_end() == false && m.accept_bytes("}") && m.must_end());  // no dangling ','
  // Extra keys may come anywhere, declared keys still at most once.
  auto open = make("json", R"({"properties":{"a":{"type":"integer"}},"required":["a"]})", v);
  Matcher o(open);
  EXPECT_TRUE(o.accept_bytes(R"({"x":"y","a":1,"z":2)") && o.accept_bytes("}") && o.can_end());
  Matcher d(open);
  EXPECT_FALSE(d.accept_bytes(R"({"a":1,"x":2,"a":3)"));
}

TEST(Structured, OneOfExclusiveOrRejected) {
  auto v = tiny_vocab();
  auto accepts = [&](const std::string& schema, const std::string& text) {
    Matcher m(make("json", schema, v));
    return m.accept_bytes(text) && m.can_end();
  };
  const std::string by_type = R"({"oneOf":[{"type":"number"},{}]})";  // exact: anything but a number
  EXPECT_TRUE(accepts(by_type, R"("a")"));
  EXPECT_FALSE(accepts(by_type, "12"));
  const std::string by_key = R"({"oneOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},{"required":["b"]}]})";
  EXPECT_TRUE(accepts(by_key, R"({"a":1})"));
  EXPECT_TRUE(accepts(by_key, R"({"b":1})"));
  EXPECT_FALSE(accepts(by_key, R"({"a":1,"b":2})"));  // both branches would match
  const std::string tagged = R"({"oneOf":[{"properties":{"t":{"const":"a"}},"required":["t"]},{"properties":{"t":{"const":"b"}},"required":["t"]}]})";
  EXPECT_TRUE(accepts(tagged, R"({"t":"b","x":1})"));  // a discriminator: no restriction needed
  // Overlap spelled exactly: one branch and not the other (a non-integer below 2, an integer below 2, or no number).
  const std::string overlap = R"({"oneOf":[{"type":"integer"},{"minimum":2}]})";
  for (auto [text, ok] : {std::pair{"1", true}, {"3", false}, {"2.5", true}, {"1.5", false}, {"\"x\"", true}})
    EXPECT_EQ(accepts(overlap, text), ok) << text;
  try {  // an overlap whose negation cannot be spelled
    make("json", R"({"oneOf":[{"type":"array","uniqueItems":true,"items":{"type":"string"}},{"type":"array","maxItems":3}]})", v);
    ADD_FAILURE() << "overlapping oneOf compiled";
  } catch (const deepinfer::Error& e) {
    EXPECT_NE(std::string(e.what()).find("oneOf"), std::string::npos) << e.what();
  }
}

TEST(Structured, SpecNumbersDatesAndLiterals) {
  auto v = tiny_vocab();
  auto accepts = [&](const std::string& schema, const std::string& text) {
    Matcher m(make("json", schema, v));
    return m.accept_bytes(text) && m.can_end();
  };
  EXPECT_TRUE(accepts(R"({"type":"integer"})", "1.0"));  // draft 2020-12: 1.0 is an integer
  EXPECT_FALSE(accepts(R"({"type":"integer"})", "1.5"));
  EXPECT_TRUE(accepts(R"({"type":"integer","maximum":3})", "3.00"));
  const std::string range = R"({"type":"number","minimum":-1.5,"exclusiveMaximum":2.25})";
  for (const char* ok : {"-1.5", "-1", "0", "2.2", "2.249"}) EXPECT_TRUE(accepts(range, ok)) << ok;
  for (const char* bad : {"-1.51", "2.25", "2.3", "3"}) EXPECT_FALSE(accepts(range, bad)) << bad;
  const std::string date = R"({"type":"string","format":"date"})";
  EXPECT_TRUE(accepts(date, R"("2024-02-29")"));
  EXPECT_TRUE(accepts(date, R"("2000-02-29")"));
  EXPECT_FALSE(accepts(date, R"("1900-02-29")"));
  EXPECT_FALSE(accepts(date, R"("2023-02-29")"));
  const std::string time = R"({"type":"string","format":"date-time"})";
  EXPECT_TRUE(accepts(time, R"("2016-12-31T23:59:60Z")"));
  EXPECT_FALSE(accepts(time, R"("2016-12-31T22:59:60Z")"));
  EXPECT_TRUE(accepts(R"({"const":{"a":[1,{"b":null}],"c":"d"}})", R"({"c":"d","a":[1.0,{"b":null}]})"));
  EXPECT_FALSE(accepts(R"({"const":{"a":1,"c":"d"}})", R"({"a":1})"));
  EXPECT_TRUE(accepts(R"({"maxProperties":1})", R"({"a":1})"));
  EXPECT_FALSE(accepts(R"({"maxProperties":1})", R"({"a":1,"b":2})"));
  EXPECT_FALSE(accepts(R"({"minProperties":2})", R"({"a":1})"));
  EXPECT_TRUE(accepts(R"({"minProperties":2})", R"({"a":1,"b":2})"));
  // Declared keys count too (the perm rule's seen set plus a count of extra members).
  const char* mp = R"({"properties":{"a":{"type":"integer"}},"minProperties":2,"maxProperties":2})";
  EXPECT_FALSE(accepts(mp, R"({"a":1})"));
  EXPECT_TRUE(accepts(mp, R"({"a":1,"b":2})"));
  EXPECT_TRUE(accepts(mp, R"({"b":1,"c":2})"));
  EXPECT_FALSE(accepts(mp, R"({"a":1,"b":2,"c":3})"));
  const char* dr = R"({"properties":{"a":{}},"dependentRequired":{"a":["b"]}})";
  EXPECT_FALSE(accepts(dr, R"({"a":1})"));
  EXPECT_TRUE(accepts(dr, R"({"b":1,"a":1})"));
  EXPECT_TRUE(accepts(dr, R"({"c":1})"));
}

TEST(Structured, ManyPropertiesStayLinear) {
  auto v = tiny_vocab();
  std::string props, text = "{";
  for (int i = 0; i < 300; ++i) props += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":{\"type\":\"integer\"}";
  for (int i = 299; i >= 0; --i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + (i ? "," : "}");
  auto g = make("json", "{\"properties\":{" + props + "},\"required\":[\"k0\",\"k299\"],\"additionalProperties\":false}", v);
  EXPECT_LT(g->automaton().nodes.size(), 300u * 40);  // O(n) rules: no subset construction
  Matcher m(g);
  EXPECT_TRUE(m.accept_bytes(text) && m.can_end());
  Matcher dup(g);
  EXPECT_FALSE(dup.accept_bytes(R"({"k7":1,"k7")"));
}

TEST(Structured, StringLengthsAreCountedNotUnrolled) {
  auto v = tiny_vocab();
  auto small = make("json", R"({"type":"string","minLength":1,"maxLength":4})", v);
  auto big = make("json", R"({"type":"string","minLength":1,"maxLength":4096})", v);
  EXPECT_EQ(small->automaton().nodes.size(), big->automaton().nodes.size());  // the bound is not in the grammar
  EXPECT_EQ(small->num_masks(), big->num_masks());
  Matcher m(small);
  EXPECT_FALSE(allowed(m, 0));
  EXPECT_TRUE(m.accept_token(8));  // "
  EXPECT_FALSE(allowed(m, 8));     // "" is too short
  EXPECT_TRUE(allowed(m, 5));      // abc
  EXPECT_TRUE(m.accept_token(5));
  EXPECT_FALSE(allowed(m, 5));     // abcabc: too long
  EXPECT_TRUE(allowed(m, 13));     // é: the fourth
  EXPECT_TRUE(allowed(m, 14));     // its first byte
  EXPECT_TRUE(m.accept_token(2));  // a: the fourth
  EXPECT_FALSE(allowed(m, 2));
  EXPECT_FALSE(allowed(m, 14));    // a started é would be the fifth
  EXPECT_TRUE(m.accept_token(8));
  EXPECT_TRUE(m.can_end());
}

// Masks are computed at compile time within a budget, the others on first use; those of
// automaton parts that reach no other rule (a JSON string's content) are computed once per
// vocabulary and shared by every grammar over it.
TEST(Structured, MasksAreLazyAndSharedAcrossGrammars) {
  auto v = tiny_vocab();
  const std::string object = R"({"type":"object","properties":{"a":{"type":"string"}}})";
  auto warm = make("json", object, v);  // a small grammar: classified while compiling
  EXPECT_EQ(warm->num_computed_masks(), warm->num_masks());
  auto lazy = [&](const std::string& schema) {  // no compile-time budget
    return std::make_shared<const CompiledGrammar>(json_schema_grammar(schema, SchemaArgs{"json", schema}), v, 0);
  };
  auto a = lazy(object), b = lazy(R"({"type":"array","items":{"type":"string"}})");
  EXPECT_EQ(a->num_computed_masks(), 0u);
  EXPECT_TRUE(Matcher(a).accept_bytes(R"({"a":"ab")"));  // accepting does not classify tokens
  EXPECT_EQ(a->num_computed_masks(), 0u);
  auto all = [](const std::shared_ptr<const CompiledGrammar>& g) {
    std::set<const StateMask*> out;
    for (uint32_t n = 0; n < g->automaton().nodes.size(); ++n)
      if (const StateMask* m = g->mask(n)) out.insert(m);
    return out;
  };
  const std::set<const StateMask*> in_a = all(a), in_b = all(b);
  EXPECT_EQ(a->num_computed_masks(), a->num_masks());
  EXPECT_TRUE(std::any_of(in_b.begin(), in_b.end(), [&](const StateMask* m) { return in_a.count(m) > 0; }));
}

TEST(Structured, ErrorsNameTheConstruct) {
  auto v = tiny_vocab();
  auto msg = [&](const std::string& type, const std::string& schema) {
    try {
      make(type, schema, v);
    } catch (const deepinfer::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("regex", "(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(msg("regex", "a(?=b)").find("lookahead"), std::string::npos);
  EXPECT_NE(msg("regex", "(ab").find("')'"), std::string::npos);
  EXPECT_NE(msg("ebnf", "root ::= foo").find("'foo'"), std::string::npos);
  EXPECT_NE(msg("ebnf", "start ::= \"a\"").find("root"), std::string::npos);
  EXPECT_NE(msg("json", R"({"not":{"uniqueItems":true}})").find("'not' of 'uniqueItems'"), std::string::npos);
  EXPECT_NE(msg("json", R"({"$ref":"http://x/y"})").find("$ref"), std::string::npos);
  EXPECT_NE(msg("json", "{").find("not valid JSON"), std::string::npos);
  // Unknown keywords are ignored; a constraining one we do not support is named.
  EXPECT_EQ(msg("json", R"({"x-vendor":1,"self":{"name":"n"},"type":"integer"})"), "no error");
  // unevaluatedProperties beside 7 anyOf branches that evaluate keys: 127 cases, too many.
  std::string branches;
  for (char k = 'a'; k < 'h'; ++k) branches += std::string(branches.empty() ? "" : ",") + R"({"properties":{")" + k + R"(":{}}})";
  EXPECT_NE(msg("json", R"({"unevaluatedProperties":false,"anyOf":[)" + branches + "]}").find("unevaluatedProperties"), std::string::npos);
  // A $ref into a resource with $dynamicAnchors merged with siblings (they must not get its bindings).
  EXPECT_NE(msg("json", R"({"allOf":[{"$ref":"#/$defs/r"},{"type":"array"}],"$defs":{"r":{"$id":"http://r/","$dynamicAnchor":"a",)"
                        R"("items":{"$dynamicRef":"#a"}},"s":{"$id":"http://s/","$dynamicAnchor":"a"}}})").find("$dynamicAnchors"), std::string::npos);
  EXPECT_NE(msg("json", "false").find("no instance matches"), std::string::npos);
  EXPECT_NE(msg("json", R"({"patternProperties":{"^a":{"type":"integer"}},"propertyNames":{"maxLength":3}})").find("patternProperties"), std::string::npos);
  EXPECT_NE(msg("choice", "[1]").find("string"), std::string::npos);
  EXPECT_NE(msg("yaml", "").find("schema_type"), std::string::npos);
}

TEST(Structured, EbnfRecursionAndRepetition) {
  auto v = tiny_vocab();
  auto g = make("ebnf", "root ::= \"{\" inner? \"}\"\ninner ::= root | [a-b]{2,3}", v);
  Matcher m(g);
  for (int32_t id : {6, 6, 4, 7}) EXPECT_TRUE(m.accept_token(id)) << id;  // {{ab}
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_token(7));
  EXPECT_TRUE(m.can_end());
  Matcher n(g);
  for (int32_t id : {6, 4, 3}) EXPECT_TRUE(n.accept_token(id));
  EXPECT_FALSE(n.accept_token(2));  // "{abba": at most 3 letters
}

// The mask must agree with accept_token on every id of the real vocabulary, at several points
// along a valid output: this checks the precomputed accepted/uncertain sets against the parser.
void check_mask_exact(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  const TokenVocab& v = g->vocab();
  Matcher m(g);
  std::vector<uint32_t> w((v.size() + 31) / 32);
  size_t pos = 0;
  for (int step = 0; step < 4; ++step) {
    m.fill_next_token_bitmask(w.data());
    int allowed_count = 0;
    for (int32_t id = 0; id < v.size(); ++id) {
      bool bit = (w[id >> 5] >> (id & 31)) & 1;
      bool ok = m.accept_token(id);
      if (ok) m.rollback(1);
      ASSERT_EQ(bit, ok) << "token " << id << " '" << v.bytes(id) << "' after '" << text.substr(0, pos) << "'";
      allowed_count += bit;
    }
    EXPECT_GT(allowed_count, 0);
    size_t next = std::min(text.size(), pos + 1 + step * 3);
    ASSERT_TRUE(m.accept_bytes(text.substr(pos, next - pos))) << text.substr(0, next);
    pos = next;
  }
}

// The same after each of the given prefixes of a valid output (each one's mask on a fresh matcher).
void check_mask_exact_after(const std::shared_ptr<const CompiledGrammar>& g, const std::vector<std::string>& prefixes) {
  const TokenVocab& v = g->vocab();
  std::vector<uint32_t> w((v.size() + 31) / 32);
  for (const std::string& prefix : prefixes) {
    Matcher m(g);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    m.fill_next_token_bitmask(w.data());
    for (int32_t id = 0; id < v.size(); ++id) {
      const bool bit = (w[id >> 5] >> (id & 31)) & 1, ok = m.accept_token(id);
      if (ok) m.rollback(1);
      ASSERT_EQ(bit, ok) << "token " << id << " '" << v.bytes(id) << "' after '" << prefix << "'";
    }
  }
}

TEST(StructuredV3, MaskMatchesParserOnRealVocab) {
  TokenVocab v = load_vocab();
  ASSERT_EQ(v.size(), kV3LogitWidth);
  check_mask_exact(make("json_object", "", v), R"({"name":"x y","n":[1,2.5e3,{"a":null}]})");
  check_mask_exact(make("regex", R"([a-z]+@[a-z]+\.(com|org)|\d{3}-\d{4})", v), "abc@def.org");
  check_mask_exact(make("json", R"({"type":"object","properties":{"id":{"type":"integer","minimum":-5,"maximum":120},
      "tags":{"type":"array","items":{"type":"string","maxLength":4}},"when":{"type":"string","format":"date"}},
      "required":["id"]})", v), R"({"id":-3,"tags":["ab","c"],"when":"2024-01-31"})");
  check_mask_exact(make("json", R"({"type":"object","properties":{"a":{"type":"integer"},"bb":{"type":"string"},
      "c":{"type":"boolean"}},"required":["a","c"]})", v), R"({"c":true,"x":1,"a":12,"bb":"s"})");
  // Counted lengths: near both bounds (minLength 6, maxLength 9) and in an array of them.
  check_mask_exact(make("json", R"({"type":"string","minLength":6,"maxLength":9})", v), R"("abcdefgh")");
  check_mask_exact(make("json", R"({"type":"array","items":{"type":"string","pattern":"^[a-z ]*$","maxLength":3}})", v),
                   R"(["ab","c d","x"])");
  // Inside numbers and strings of an object with many members (the uncertain tokens' rests are
  // shared past a first byte whose set repeats: digits after the first fractional one).
  std::string props;
  for (int i = 0; i < 30; ++i) props += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\":{\"type\":\"number\"}";
  check_mask_exact_after(make("json", R"({"type":"object","properties":{)" + props + R"(,"s":{"type":"string"}}})", v),
                         {R"({"k1":12)", R"({"k1":12.)", R"({"k1":12.5)", R"({"k1":1.5,"k2":300)", R"({"k1":1.5,"k2":3.)",
                          R"({"k1":1.5,"s":"ab)", R"({"k1":1.5,"k3":-)", R"({"k1":1.5,"k3":-0.0)", R"({"k1":2e)", R"({"k1":2e1)"});
  check_mask_exact(make("ebnf", "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= factor ((\"*\" | \"/\") factor)*\n"
                                "factor ::= [0-9]+ | \"(\" expr \")\"", v), "(12+3)*45-6");
}

// The matcher reuses the verdicts on uncertain tokens when a frontier repeats (inside a string);
// after rollbacks the older sets they depend on may differ. Masks must equal a fresh matcher's.
std::vector<uint32_t> fresh_mask(const std::shared_ptr<const CompiledGrammar>& g, const std::vector<int32_t>& ids) {
  Matcher f(g);
  for (int32_t id : ids) EXPECT_TRUE(f.accept_token(id));
  std::vector<uint32_t> w((g->vocab().size() + 31) / 32);
  f.fill_next_token_bitmask(w.data());
  return w;
}

TEST(StructuredV3, MaskCacheAgreesAfterRollback) {
  TokenVocab v = load_vocab();
  std::vector<uint32_t> w((v.size() + 31) / 32);
  {  // A value string and a key string both opened at byte 7: same item, different context.
    auto g = make("json_object", "", v);
    Matcher m(g), fresh(g);
    ASSERT_TRUE(m.accept_bytes("{") && m.accept_bytes("\"abc\":") && m.accept_bytes("\"x"));
    m.fill_next_token_bitmask(w.data());
    m.rollback(2);
    ASSERT_TRUE(m.accept_bytes("\"a\":1,") && m.accept_bytes("\"x"));
    ASSERT_TRUE(fresh.accept_bytes("{\"a\":1,\"x"));
    std::vector<uint32_t> f(w.size());
    m.fill_next_token_bitmask(w.data());
    fresh.fill_next_token_bitmask(f.data());
    EXPECT_EQ(w, f);
  }
  const char* person = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,
      "maximum":150},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["name"]})";
  // Draw from structural tokens and short words so strings open and close in many contexts.
  std::vector<int32_t> pool;
  for (int32_t id = 0; id < v.size(); ++id)
    for (const char* t : {"{", "}", "[", "]", ",", ":", "\"", "\":", "\",", "1", "a", "ab", "name", "age", "tags"})
      if (v.bytes(id) == t) pool.push_back(id);
  for (auto g : {make("json_object", "", v), make("json", person, v)}) {
    std::mt19937_64 rng(7);
    Matcher m(g);
    std::vector<int32_t> ids;
    for (int step = 0; step < 300 && !m.is_terminated(); ++step) {
      if (!ids.empty() && rng() % 4 == 0) {  // roll back 1..8 tokens
        int n = std::min<int>(ids.size(), 1 + rng() % 8);
        m.rollback(n);
        ids.resize(ids.size() - n);
      }
      m.fill_next_token_bitmask(w.data());
      ASSERT_EQ(w, fresh_mask(g, ids)) << "step " << step;
      std::vector<int32_t> allowed;
      for (int32_t id : pool)
        if ((w[id >> 5] >> (id & 31)) & 1) allowed.push_back(id);
      if (allowed.empty()) {  // only the stop token is left: go back and take another way
        int n = std::min<int>(ids.size(), 3);
        m.rollback(n);
        ids.resize(ids.size() - n);
        continue;
      }
      int32_t id = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(id));
      ids.push_back(id);
    }
  }
}

}  // namespace
