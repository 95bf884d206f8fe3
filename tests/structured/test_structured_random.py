"""Random nested applicators (oneOf / anyOf / allOf / not / if) over small leaf schemas, checked
against `jsonschema` on a fixed set of instances: no instance the oracle rejects may be accepted
(the `oneOf` type analysis and the negations are where main accepted such instances), and at most
a few valid ones refused (the safe subset of overlapping `oneOf` object branches; main refused 74
of these, its `not` of `if`/`then`/`else` matching nothing)."""
import json
import random

import pytest

jsonschema = pytest.importorskip("jsonschema")

LEAVES = [{"required": ["a"]}, {"required": ["b"]}, {"type": "integer"}, {"type": "string"}, {"minimum": 2},
          {"maxLength": 1}, {"properties": {"a": {"type": "integer"}}}, {"type": "object"}, True, {"const": 1},
          {"enum": ["x", 2]}, {"multipleOf": 1.5}, {"prefixItems": [{"type": "integer"}], "contains": {"const": "x"}},
          {"items": {"type": "integer"}}, {"type": "array"}]
INSTANCES = [1, 2, 3, 4.5, "x", "xy", None, True, {}, {"a": 1}, {"b": 1}, {"a": "s"}, {"a": 1, "b": 2}, [], [1],
             [1, "x"], ["x"], [1, 2], 0]


def random_schema(rng, depth):
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(LEAVES)
    k = rng.choice(["oneOf", "anyOf", "allOf", "not", "if"])
    if k == "not":
        return {"not": random_schema(rng, depth - 1)}
    if k == "if":
        return {"if": random_schema(rng, depth - 1), "then": random_schema(rng, depth - 1), "else": random_schema(rng, depth - 1)}
    return {k: [random_schema(rng, depth - 1) for _ in range(rng.randint(2, 3))]}


def test_no_false_accepts_on_random_applicators(grammar_tool, v3_tokenizer):
    rng = random.Random(20261203)
    texts = [json.dumps(x, separators=(",", ":")) for x in INSTANCES]
    inputs = [v3_tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    accepted_wrongly, compiled, refused_wrongly = [], 0, 0
    for _ in range(200):
        schema = random_schema(rng, 3)
        resp = grammar_tool.request(cmd="check", schema_type="json", schema=schema, inputs=inputs)
        if resp.get("error"):
            continue
        compiled += 1
        validator = jsonschema.Draft202012Validator(schema)
        for x, text, got in zip(INSTANCES, texts, resp["results"]):
            want = validator.is_valid(x)
            if got and not want:
                accepted_wrongly.append((text, schema))
            refused_wrongly += want and not got
    print(f"\n{compiled} of 200 compiled, {refused_wrongly} valid instances refused")
    assert compiled >= 140
    assert not accepted_wrongly, accepted_wrongly[:5]
    assert refused_wrongly <= 10
