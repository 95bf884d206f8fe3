"""Random walks through the token mask (seeded): every finished output must be valid according to
an independent checker — jsonschema for JSON schemas, re.fullmatch for regexes, Python's own
parsers for the EBNF grammars (arithmetic, JSON, a small C-like language)."""
import ast
import json
import re

import pytest

jsonschema = pytest.importorskip("jsonschema")

RUNS, MAX_TOKENS = 12, 160

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
                                      "email": {"type": "string", "format": "email"}}, "required": ["name", "age"],
     "additionalProperties": False},  # keys come in any order: random extra keys would rarely let a walk end
    {"type": "array", "items": {"type": "number", "exclusiveMinimum": -2, "maximum": 1000}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"kind": {"enum": ["a", "b", 3, None]}, "id": {"type": "string", "format": "uuid"},
                                      "ip": {"type": "string", "format": "ipv4"}}, "required": ["kind", "id"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                        "required": ["v", "next"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}, "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
                                      "tags": {"type": "array", "prefixItems": [{"const": "x"}], "items": {"type": "boolean"}}},
     "required": ["code"], "additionalProperties": False},
    {"type": ["string", "null", "integer"], "minLength": 2, "maxLength": 5, "maximum": -7},
    {"properties": {"a": {"type": "integer"}}, "required": ["a"]},  # additional properties allowed, before "a" too
    {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 40}, "maxItems": 3},  # counted lengths
    {"type": "string", "pattern": "^[a-zé]*$", "minLength": 1, "maxLength": 6},
    {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$", "maxLength": 7},  # never walks into a dead end
    {"type": "object", "patternProperties": {"^[a-c]{1,2}$": {"type": "integer"}}, "additionalProperties": False, "maxProperties": 2},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"required": ["a"]}, "additionalProperties": False},
    {"type": ["string", "null"], "not": {"enum": ["x", None]}, "oneOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": "object", "patternProperties": {"^x-": {"type": "integer"}, "y$": {"type": "null"}}, "maxProperties": 2,
     "additionalProperties": {"type": "boolean"}},  # keys by pattern, the rest valued by additionalProperties
    {"type": "string", "pattern": "^[a-z]+$", "not": {"pattern": "q"}, "maxLength": 5},  # pattern minus pattern
    {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "uniqueItems": True, "minItems": 1},  # each value once
    {"type": "integer", "multipleOf": 7, "minimum": -50, "maximum": 300},  # range times remainders
    {"type": "number", "multipleOf": 1.5, "minimum": -10, "maximum": 100},  # places and remainders: never a dead end
    {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 3, "not": {"enum": [0, 1, 2.5]}}, "minItems": 2,
     "maxItems": 4},  # numbers between the excluded values
    {"type": "array", "items": {"type": ["integer", "string"], "maxLength": 3, "maximum": 99},
     "allOf": [{"contains": {"type": "integer"}}, {"contains": {"type": "string"}}]},  # two contains
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"],
     "maxProperties": 3},  # extra keys only while the required ones still fit: never a dead end
    {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdefghij"}, "required": ["a", "j"],
     "additionalProperties": False},  # any order, each key at most once
]


def check_outputs(outputs, validate, min_finished=RUNS // 4):
    finished = [o["text"] for o in outputs if o["finished"]]
    assert len(finished) >= min_finished, f"too few random walks ended: {outputs[:3]}"
    for text in finished:
        validate(text)


@pytest.mark.parametrize("idx", range(len(SCHEMAS)))
@pytest.mark.parametrize("whitespace", ["compact", "flexible"])
def test_json_schema_sampling(grammar_tool, idx, whitespace):
    schema = SCHEMAS[idx]
    resp = grammar_tool.request(cmd="sample", schema_type="json", schema=schema, seed=idx, runs=RUNS,
                                max_tokens=2 * MAX_TOKENS, whitespace=whitespace)  # keys in any order: longer walks
    assert "error" not in resp, resp
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)

    def validate(text):
        errors = list(checker.iter_errors(json.loads(text)))
        assert not errors, f"{text!r}: {errors[0].message}"
    check_outputs(resp["outputs"], validate)


def test_json_object_sampling(grammar_tool):
    resp = grammar_tool.request(cmd="sample", schema_type="json_object", seed=7, runs=RUNS, max_tokens=MAX_TOKENS)
    check_outputs(resp["outputs"], lambda t: isinstance(json.loads(t), dict) or pytest.fail(t))


REGEXES = [r"[a-z]{3,6}\d*", r"(foo|bar)+(\.baz)?", r"\w+@\w+\.(com|org)", r"[^a-c\n]{2,5}x?",
           r"(\+1 )?\(\d{3}\) \d{3}-\d{4}", r"[αβγ中文]+[0-9a-fA-F]{2}", r"a.{0,4}b|c*"]


@pytest.mark.parametrize("idx", range(len(REGEXES)))
def test_regex_sampling(grammar_tool, idx):
    pattern = REGEXES[idx]
    resp = grammar_tool.request(cmd="sample", schema_type="regex", schema=pattern, seed=idx, runs=RUNS, max_tokens=MAX_TOKENS)
    check_outputs(resp["outputs"], lambda t: re.fullmatch(pattern, t) or pytest.fail(f"{t!r} !~ {pattern}"))


def test_choice_sampling(grammar_tool):
    choices = ["red", "green", "blue", "dark red"]
    resp = grammar_tool.request(cmd="sample", schema_type="choice", schema=choices, seed=3, runs=RUNS, max_tokens=10)
    check_outputs(resp["outputs"], lambda t: t in choices or pytest.fail(t))


ARITHMETIC = r"""
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [1-9] [0-9]{0,3} | "(" expr ")" | "-" factor
"""

JSON_EBNF = r"""
root    ::= value
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ("," ws member)* )? "}"
member  ::= string ":" ws value ws
array   ::= "[" ws ( value ws ("," ws value ws)* )? "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws      ::= [ \t\n]{0,2}
"""

C_LIKE = r"""
root  ::= stmt+
stmt  ::= "int " ident " = " expr ";\n" | "if (" expr ") {\n" stmt* "}\n" | "while (" expr ") {\n" stmt* "}\n" | "return " expr ";\n"
expr  ::= term (" " op " " term)*
op    ::= "+" | "-" | "*" | "<" | "=="
term  ::= ident | [0-9]+ | "(" expr ")" | ident "(" (expr (", " expr)*)? ")"
ident ::= [a-z_] [a-z0-9_]{0,7}
"""

C_TOKEN = re.compile(r"\s*(int|if|while|return|==|[a-z_][a-z0-9_]*|[0-9]+|[-+*<=(){};,])")


def parse_c_like(text):
    """Recursive-descent recognizer of C_LIKE (independent of the grammar engine)."""
    toks = C_TOKEN.findall(text)
    assert "".join(toks).replace(" ", "") == re.sub(r"\s", "", text), text
    pos = 0

    def eat(t=None):
        nonlocal pos
        assert pos < len(toks) and (t is None or toks[pos] == t), (text, pos, t)
        pos += 1
        return toks[pos - 1]

    def term():
        tok = eat()
        if tok == "(":
            expr(); eat(")")
        elif re.fullmatch(r"[a-z_][a-z0-9_]*", tok) and tok not in ("int", "if", "while", "return"):
            if pos < len(toks) and toks[pos] == "(":
                eat("(")
                if toks[pos] != ")":
                    expr()
                    while toks[pos] == ",":
                        eat(","); expr()
                eat(")")
        else:
            assert tok.isdigit(), (text, tok)

    def expr():
        term()
        while pos < len(toks) and toks[pos] in ("+", "-", "*", "<", "=="):
            eat(); term()

    def stmt():
        tok = eat()
        if tok == "int":
            eat(); eat("="); expr(); eat(";")
        elif tok in ("if", "while"):
            eat("("); expr(); eat(")"); eat("{")
            while toks[pos] != "}":
                stmt()
            eat("}")
        else:
            assert tok == "return", (text, tok)
            expr(); eat(";")

    while pos < len(toks):
        stmt()


@pytest.mark.parametrize("name,grammar,validate", [
    ("arithmetic", ARITHMETIC, lambda t: ast.parse(t, mode="eval")),
    ("json", JSON_EBNF, json.loads),
    ("c_like", C_LIKE, parse_c_like),
])
def test_ebnf_sampling(grammar_tool, name, grammar, validate):
    resp = grammar_tool.request(cmd="sample", schema_type="ebnf", schema=grammar, seed=11, runs=RUNS, max_tokens=MAX_TOKENS)
    assert "error" not in resp, resp
    check_outputs(resp["outputs"], validate, min_finished=1)  # deep random programs rarely end
