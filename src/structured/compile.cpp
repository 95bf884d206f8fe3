#include <nlohmann/json.hpp>

#include "core/error.h"
#include "structured/structured.h"

namespace deepinfer::structured {

Grammar choice_grammar(const std::string& json_array) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_array);
  } catch (const std::exception& e) {
    fail("choice: schema must be a JSON array of strings: ", e.what());
  }
  check(j.is_array() && !j.empty(), "choice: schema must be a non-empty JSON array of strings");
  Grammar g;
  std::vector<int> alts;
  for (const auto& s : j) {
    check(s.is_string(), "choice: every choice must be a string, got ", s.dump());
    alts.push_back(g.lit(s.get<std::string>()));
  }
  int r = g.declare_rule("root");
  g.define_rule(r, g.alt(alts));
  g.set_root(r);
  return g;
}

Grammar grammar_from_args(const SchemaArgs& a) {
  const std::string& t = a.schema_type;
  if (t == "regex") return regex_grammar(a.schema);
  if (t == "json") return json_schema_grammar(a.schema, a);
  if (t == "json_object") return json_object_grammar(a);
  if (t == "ebnf") return parse_ebnf(a.schema);
  if (t == "choice") return choice_grammar(a.schema);
  fail("structured output: unknown schema_type '", t, "' (expected regex, json, json_object, ebnf or choice)");
}

std::shared_ptr<const CompiledGrammar> compile(const SchemaArgs& args, const TokenVocab& vocab) {
  check(vocab.size() > 0, "structured output: empty vocabulary");
  return std::make_shared<const CompiledGrammar>(grammar_from_args(args), vocab);
}

}  // namespace deepinfer::structured
