// Known-answer tests of the DeepSeek V4 / V4.1 prompt formats and of output parsing.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/chat_encoding.h"

using namespace deepinfer::tokenizer;

namespace {

const std::string BOS = "<｜begin▁of▁sentence｜>", EOS = "<｜end▁of▁sentence｜>", U = "<｜User｜>",
                  A = "<｜Assistant｜>", SYS = "<｜System｜>";

Message msg(std::string role, std::string content = "") {
  Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

Message assistant(std::string content, std::string reasoning = "", std::vector<ToolCall> calls = {}) {
  Message m = msg("assistant", std::move(content));
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  return m;
}

Message tool(std::string id, std::string content) {
  Message m = msg("tool", std::move(content));
  m.tool_call_id = std::move(id);
  return m;
}

ChatOptions thinking() {
  ChatOptions o;
  o.thinking = true;
  return o;
}

const std::string kWeatherTool =
    R"([{"type": "function", "function": {"name": "get", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])";

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const deepinfer::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(ChatV4, ChatMode) {
  std::vector<Message> m = {msg("system", "S"), msg("user", "Hi")};
  EXPECT_EQ(render_v4(m), BOS + "S" + U + "Hi" + A + "</think>");
  ChatOptions no_bos;
  no_bos.add_bos = false;
  EXPECT_EQ(render_v4(m, no_bos), "S" + U + "Hi" + A + "</think>");
}

TEST(ChatV4, ThinkingDropsEarlierReasoning) {
  std::vector<Message> m = {msg("user", "A"), assistant("a1", "r1"), msg("user", "B")};
  EXPECT_EQ(render_v4(m, thinking()), BOS + U + "A" + A + "</think>a1" + EOS + U + "B" + A + "<think>");
  ChatOptions keep = thinking();
  keep.drop_thinking = false;
  EXPECT_EQ(render_v4(m, keep), BOS + U + "A" + A + "<think>r1</think>a1" + EOS + U + "B" + A + "<think>");
  // The last assistant turn (after the last user turn) keeps its reasoning.
  std::vector<Message> m2 = {msg("user", "A"), assistant("a1", "r1")};
  EXPECT_EQ(render_v4(m2, thinking()), BOS + U + "A" + A + "<think>r1</think>a1" + EOS);
}

TEST(ChatV4, ToolsKeepReasoningAndRenderDsml) {
  Message sys = msg("system", "");
  sys.tools = nlohmann::ordered_json::parse(kWeatherTool);
  std::vector<Message> m = {sys, msg("user", "Q"),
                            assistant("", "r", {{"c1", "get", R"({"city": "Paris", "n": 3, "x": [1, "é"]})"}}),
                            tool("c1", "sunny")};
  std::string out = render_v4(m, thinking());
  std::string calls =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"x\" string=\"false\">[1, \"é\"]</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  std::string tail = U + "Q" + A + "<think>r</think>" + calls + EOS + U + "<tool_result>sunny</tool_result>" + A + "<think>";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail);
  EXPECT_TRUE(out.starts_with(BOS + "\n\n## Tools\n\nYou have access to a set of tools"));
  EXPECT_NE(out.find("### Available Tool Schemas\n\n{\"name\": \"get\", \"description\": \"Weather\", \"parameters\": "
                     "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}\n\nYou MUST strictly"),
            std::string::npos);
  EXPECT_NE(out.find("<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">"), std::string::npos);
}

TEST(ChatV4, ToolResultsFollowCallOrder) {
  std::vector<Message> m = {msg("user", "Q"), assistant("", "", {{"c1", "f", "{}"}, {"c2", "g", "{}"}}),
                            tool("c2", "B"), tool("c1", "A"), msg("user", "more")};
  std::string out = render_v4(m);
  EXPECT_NE(out.find(U + "<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>\n\nmore" + A + "</think>"),
            std::string::npos);
}

TEST(ChatV4, ReasoningEffortMaxAndDeveloperAndReminder) {
  std::string out = render_v4(std::vector<Message>{msg("user", "x")}, [] {
    ChatOptions o = thinking();
    o.reasoning_effort = "max";
    return o;
  }());
  EXPECT_TRUE(out.starts_with(BOS + "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"));
  EXPECT_TRUE(out.ends_with("left unchecked.\n\n" + U + "x" + A + "<think>"));
  EXPECT_EQ(render_v4(std::vector<Message>{msg("developer", "D"), msg("latest_reminder", "R")}),
            BOS + U + "D" + A + "</think><｜latest_reminder｜>R");
  ChatOptions bad;
  bad.reasoning_effort = "low";
  EXPECT_NE(error_of([&] { render_v4(std::vector<Message>{msg("user", "x")}, bad); }).find("V4 reasoning effort"),
            std::string::npos);
  EXPECT_NE(error_of([] { render_v4(std::vector<Message>{msg("developer", "")}); }).find("needs content"),
            std::string::npos);
}

TEST(ChatV4, TasksAndOpenTurn) {
  Message q = msg("user", "q");
  q.task = "query";
  EXPECT_EQ(render_v4(std::vector<Message>{q}), BOS + U + "q<｜query｜>");
  q.task = "action";
  EXPECT_EQ(render_v4(std::vector<Message>{q}), BOS + U + "q" + A + "</think><｜action｜>");
  Message open = assistant("partial");
  open.wo_eos = true;
  EXPECT_EQ(render_v4(std::vector<Message>{msg("user", "q"), open}), BOS + U + "q" + A + "</think>partial");
}

TEST(ChatV41, SystemTokenAndEffort) {
  EXPECT_EQ(render_v41(std::vector<Message>{msg("system", "S"), msg("user", "Hi")}),
            BOS + SYS + "S" + U + "Hi" + A + "</think>");
  const std::string effort = " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
  EXPECT_EQ(render_v41(std::vector<Message>{msg("user", "Hi")}, thinking()),
            BOS + SYS + "Reasoning Effort: 50" + effort + U + "Hi" + A + "<think>");
  for (auto [name, n] : {std::pair{"low", 25}, {"high", 50}, {"xhigh", 75}, {"max", 100}, {"7", 7}}) {
    ChatOptions o = thinking();
    o.reasoning_effort = name;
    EXPECT_EQ(render_v41(std::vector<Message>{msg("system", "S"), msg("user", "Hi")}, o),
              BOS + SYS + "Reasoning Effort: " + std::to_string(n) + effort + "S" + U + "Hi" + A + "<think>");
  }
  ChatOptions bad = thinking();
  bad.reasoning_effort = "101";
  EXPECT_NE(error_of([&] { render_v41(std::vector<Message>{msg("user", "x")}, bad); }).find("reasoning effort"),
            std::string::npos);
  EXPECT_NE(error_of([] { render_v41(std::vector<Message>{msg("developer", "x")}); }).find("no 'developer'"),
            std::string::npos);
}

TEST(ChatV41, MidConversationSystemIsABoundary) {
  std::vector<Message> m = {msg("user", "A"), assistant("a", "r"), msg("system", "S2")};
  EXPECT_EQ(render_v41(m), BOS + U + "A" + A + "</think>a" + EOS + SYS + "S2" + A + "</think>");
  EXPECT_EQ(render_v41(m, thinking()).substr(0, BOS.size() + SYS.size()), BOS + SYS);  // effort prefix
  ChatOptions no_header;
  no_header.add_generation_prompt = false;
  EXPECT_EQ(render_v41(std::vector<Message>{msg("user", "A")}, no_header), BOS + U + "A");
}

TEST(ChatV41, DsmlTagsHaveLeadingSpace) {
  std::vector<Message> m = {msg("user", "Q"), assistant("ok", "", {{"", "f", R"({"a": "x", "b": true})"}})};
  EXPECT_EQ(render_v41(m), BOS + U + "Q" + A + "</think>ok\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n"
                               "<｜DSML｜ parameter name=\"a\" string=\"true\">x</｜DSML｜ parameter>\n"
                               "<｜DSML｜ parameter name=\"b\" string=\"false\">true</｜DSML｜ parameter>\n"
                               "</｜DSML｜ invoke>\n</｜DSML｜ calls>" + EOS);
}

TEST(ChatParse, ReasoningAndAnswer) {
  ParsedMessage p = parse_completion("let me think</think>The answer." + EOS, ChatFormat::kV4, true);
  EXPECT_EQ(p.reasoning_content, "let me think");
  EXPECT_EQ(p.content, "The answer.");
  EXPECT_TRUE(p.ended);
  EXPECT_TRUE(p.tool_calls.empty());
  ParsedMessage q = parse_completion("plain", ChatFormat::kV41, false);  // EOS already stripped
  EXPECT_EQ(q.content, "plain");
  EXPECT_FALSE(q.ended);
}

TEST(ChatParse, ToolCallsRoundTrip) {
  for (ChatFormat f : {ChatFormat::kV4, ChatFormat::kV41}) {
    std::vector<Message> m = {msg("user", "Q"),
                              assistant("Checking.", "r", {{"", "get", R"({"city": "Paris \"X\"", "n": 3})"},
                                                           {"", "put", R"({"obj": {"k": [1, 2]}})"}})};
    ChatOptions o = thinking();
    o.drop_thinking = false;
    std::string prompt = render_chat(f, m, o);
    std::string completion = prompt.substr(prompt.find("<think>") + 7);  // what the model wrote
    ParsedMessage p = parse_completion(completion, f, true);
    EXPECT_EQ(p.reasoning_content, "r");
    EXPECT_EQ(p.content, "Checking.");
    ASSERT_EQ(p.tool_calls.size(), 2u);
    EXPECT_EQ(p.tool_calls[0].name, "get");
    EXPECT_EQ(p.tool_calls[0].arguments, R"({"city": "Paris \"X\"", "n": 3})");
    EXPECT_EQ(p.tool_calls[1].arguments, R"({"obj": {"k": [1, 2]}})");
    EXPECT_TRUE(p.ended);
  }
}

TEST(ChatParse, MalformedMarkupErrors) {
  auto err = [](std::string text, bool think = false, ChatFormat f = ChatFormat::kV4) {
    return error_of([&] { parse_completion(text, f, think); });
  };
  const std::string open = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  const std::string close = "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS;
  EXPECT_NE(err("no end of thinking", true).find("missing </think>"), std::string::npos);
  EXPECT_NE(err(open + "<｜DSML｜parameter name=\"a\" string=\"maybe\">1</｜DSML｜parameter>\n" + close)
                .find("string=\"true\" or string=\"false\""),
            std::string::npos);
  EXPECT_NE(err(open + "<｜DSML｜parameter name=\"a\" string=\"false\">{oops</｜DSML｜parameter>\n" + close)
                .find("is not JSON"),
            std::string::npos);
  EXPECT_NE(err(open + "<｜DSML｜parameter name=\"a\" string=\"true\">1</｜DSML｜parameter>\n"
                       "<｜DSML｜parameter name=\"a\" string=\"true\">2</｜DSML｜parameter>\n" + close)
                .find("duplicate parameter"),
            std::string::npos);
  EXPECT_NE(err(open + "<｜DSML｜parameter name=\"a\" string=\"true\">1").find("not closed"), std::string::npos);
  EXPECT_NE(err("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke nam=\"f\">\n" + close).find("malformed invoke header"),
            std::string::npos);
  EXPECT_NE(err("answer" + EOS + "more").find("after <｜end▁of▁sentence｜>"), std::string::npos);
  EXPECT_NE(err("a<think>b" + EOS).find("unexpected special token <think>"), std::string::npos);
  // A V4 block is not V4.1 markup: it stays text, which then holds the DSML token.
  EXPECT_NE(err(open + close, false, ChatFormat::kV41).find("unexpected special token ｜DSML｜"), std::string::npos);
}

TEST(ChatJson, PythonDumpsSpacing) {
  auto j = nlohmann::ordered_json::parse(R"({"b": [1, 2.5, true, null], "a": "x\ny\u0001é", "e": {}})");
  EXPECT_EQ(python_json_dumps(j), R"({"b": [1, 2.5, true, null], "a": "x\ny\u0001é", "e": {}})");
}

TEST(ChatV41, ImagesAtTheirOffsets) {
  Message m = msg("user", "Before\n\n\n\nafter");
  m.image_offsets = {8};  // between the two blank lines: where the image part was
  std::vector<Message> msgs{m};
  EXPECT_EQ(render_v41(msgs), BOS + U + "Before\n\n<｜deepseek_image｜>\n\nafter" + A + "</think>");
  msgs[0].image_offsets = {0, 15};
  EXPECT_EQ(render_v41(msgs), BOS + U + "<｜deepseek_image｜>Before\n\n\n\nafter<｜deepseek_image｜>" + A + "</think>");
  EXPECT_NE(error_of([&] { render_v4(msgs); }).find("V4 chat format has no images"), std::string::npos);
  msgs[0].image_offsets = {9, 3};
  EXPECT_NE(error_of([&] { render_v41(msgs); }).find("out of order"), std::string::npos);
  msgs = {msg("user", "hi"), assistant("x")};
  msgs[1].image_offsets = {0};
  EXPECT_NE(error_of([&] { render_v41(msgs); }).find("only user messages"), std::string::npos);
}
