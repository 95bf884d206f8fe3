"""The compiler's size limits, each on its documented side (docs/structured-output.md): a rule whose
DFA explodes is refused as "grammar too complex" (a clear per-request error, the next request
compiles), and objects whose declared names pass 8,192 bytes get their extra keys from a trie of
rules instead of one DFA, as exact as the DFA (checked against `jsonschema`, and by random walks)."""
import json

import pytest

jsonschema = pytest.importorskip("jsonschema")
from structured_tool import assert_agrees_with  # noqa: E402


def check(grammar_tool, tokenizer, schema, instances):
    assert_agrees_with(jsonschema.Draft202012Validator(schema), grammar_tool, tokenizer, schema, instances)


@pytest.mark.parametrize("schema_type,schema", [
    ("regex", ".*a.{30}"),
    ("json", {"type": "object", "properties": {"id": {"type": "string", "pattern": "^.*a.{30}$"}}}),
])
def test_exponential_rule_is_refused_as_too_complex(grammar_tool, schema_type, schema):
    resp = grammar_tool.request(cmd="ebnf", schema_type=schema_type, schema=schema)
    assert "grammar too complex" in (resp.get("error") or ""), resp
    assert "simplify the pattern" in resp["error"]
    # The refusal is the request's alone: the same tool compiles the next one, and the linear
    # patterns of the same shape (no subset blow-up) are not refused.
    for ok in (".*a.{6}", "[a-z]{2000}", "a.{30}"):
        resp = grammar_tool.request(cmd="ebnf", schema_type="regex", schema=ok)
        assert not resp.get("error"), (ok, resp["error"])


@pytest.mark.parametrize("schema,matches_nothing", [
    (False, True),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, True),
    ({"type": "integer", "enum": ["a"]}, True),
    ({"anyOf": [{"not": {}}, False]}, True),
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, False),  # unsupported, not empty
])
def test_schema_matching_nothing_is_refused_as_such(grammar_tool, schema, matches_nothing):
    # every instance is invalid: the tool says so (the suite counts each one rejected), unlike an
    # unsupported keyword
    resp = grammar_tool.request(cmd="check", schema_type="json", schema=schema, inputs=[])
    assert resp.get("error"), resp
    assert bool(resp.get("matches_nothing")) == matches_nothing, resp
    if matches_nothing:
        assert "no instance matches" in resp["error"]
        validator = jsonschema.Draft202012Validator(schema)
        assert not any(validator.is_valid(x) for x in (None, 0, 1.5, "a", [], {}, [1], {"a": 1}))


def long_names_schema():
    # 300 declared names of 30 bytes (9,000 > 8,192 bytes): the trie fallback of key_not_in.
    names = [f"property_number_{i:04d}_padding" for i in range(300)]
    assert sum(map(len, names)) > 8192
    props = {n: {"type": "integer"} for n in names}
    return names, {"type": "object", "properties": props, "additionalProperties": {"type": "string"}}


def test_extra_keys_past_8192_bytes_of_names_use_the_trie_and_stay_exact(grammar_tool, v3_tokenizer):
    names, schema = long_names_schema()
    resp = grammar_tool.request(cmd="ebnf", schema_type="json", schema=schema)
    assert not resp.get("error"), resp["error"]
    assert "key_rest" in resp["ebnf"]  # the trie's shared tail rule: the fallback is the one compiled
    short = {"type": "object", "properties": {n: {"type": "integer"} for n in names[:10]},
             "additionalProperties": {"type": "string"}}
    assert "key_rest" not in grammar_tool.request(cmd="ebnf", schema_type="json", schema=short)["ebnf"]
    n = names[7]
    check(grammar_tool, v3_tokenizer, schema, [
        {n: 1}, {n: "x"},                                  # declared: its schema, never additionalProperties'
        {n[:-1]: "x"}, {n[:-1]: 1}, {n + "x": "x"}, {n + "x": 2},  # a prefix, an extension: extra keys
        {"property_number_": "x"}, {"": "x"}, {"é": "x"}, {"a\"b": "x"}, {"q": 3},
        {names[0]: 1, names[299]: 2, "other": "y"}, {names[299]: 2, names[0]: "z"},
        {"property_number_0300_padding": "x"}, {"property_number_0300_padding": 1},  # one past the last name
    ])


def test_trie_fallback_random_outputs_validate(grammar_tool):
    _, schema = long_names_schema()
    validator = jsonschema.Draft202012Validator(schema)
    resp = grammar_tool.request(cmd="sample", schema_type="json", schema=schema, seed=7, runs=12, max_tokens=120)
    finished = [o["text"] for o in resp["outputs"] if o["finished"]]
    assert finished, resp
    for text in finished:
        assert validator.is_valid(json.loads(text)), text


def test_trie_nodes_of_ascii_names_share_one_rule_for_escapes_and_non_ascii(grammar_tool, v3_tokenizer):
    # Trie nodes whose names go on with ASCII only leave the names through one shared rule
    # (key_off_names) on an escape or a non-ASCII character; nodes where a name goes on with
    # one (é, a quote, a newline) keep their own. Both kinds, exact against jsonschema.
    names, _ = long_names_schema()
    names += ["caf\u00e9_x", "caf\u00e8", "say_\"hi\"", "line\nbreak", "tab\tx"]
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names},
              "additionalProperties": {"type": "string"}}
    resp = grammar_tool.request(cmd="ebnf", schema_type="json", schema=schema)
    assert not resp.get("error"), resp["error"]
    assert "key_off_names" in resp["ebnf"]
    p = "property_number_"
    check(grammar_tool, v3_tokenizer, schema, [
        {names[3]: 1}, {names[3]: "x"}, {p + "\u00e9": "x"}, {p + "\u00e9": 1}, {p + "\n": "x"}, {p + "\"": 1},
        {p + "\\": "x"}, {p + "\u0001": "x"}, {p + "\u4e2d\u6587": "x"}, {"\u00e9": "x"}, {"\n": "x"}, {"\"": 1},
        {"caf\u00e9_x": 1}, {"caf\u00e9_x": "s"}, {"caf\u00e9": "s"}, {"caf\u00e9": 1}, {"caf\u00e8": 2}, {"caf\u00ea": "s"},
        {"cafe": "s"}, {"say_\"hi\"": 3}, {"say_\"hi\"": "s"}, {"say_\"h": "s"}, {"say_\n": "s"}, {"say_\u00e9": 1},
        {"line\nbreak": 1}, {"line\nbreak": "s"}, {"line\n": "s"}, {"line\t": "s"}, {"line\u00e9": 4},
        {"tab\tx": 5}, {"tab\t": "s"}, {"tab\ty": "s"}, {"tab\ty": 6},
    ])
    resp = grammar_tool.request(cmd="sample", schema_type="json", schema=schema, seed=11, runs=12, max_tokens=120)
    validator = jsonschema.Draft202012Validator(schema)
    for o in resp["outputs"]:
        if o["finished"]:
            assert validator.is_valid(json.loads(o["text"])), o["text"]
