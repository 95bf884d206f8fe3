"""Exactness against `jsonschema` (the oracle): for each schema, every listed instance (compact JSON
through the V3 tokenizer) is accepted by the grammar iff `jsonschema` says it is valid under the
schema's own draft ($schema; 2020-12 when absent). Covers the keywords and draft rules real-world
schemas use (see docs/structured-output.md), written as json.dumps writes them (no escapes but
the needed ones: the form constrained output takes); the random walks of test_structured_sampling.py
check the other direction on the same kinds of schemas."""
import json

import pytest

jsonschema = pytest.importorskip("jsonschema")
referencing = pytest.importorskip("referencing")
import referencing.jsonschema  # noqa: E402
from structured_tool import assert_agrees_with  # noqa: E402

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"

CASES = [
    # Keywords that do not constrain are ignored: draft-04 id, Snowplow's self, vendor x-*, links...
    ({"$schema": D4, "id": "http://x/y#", "self": {"vendor": "v", "name": "n", "format": "jsonschema", "version": "1-0-0"},
      "type": "object", "properties": {"a": {"type": "string", "_format": "uri", "x-kubernetes-int-or-string": True}},
      "links": [{"rel": "self"}], "additionalProperties": False},
     [{"a": "x"}, {}, {"a": 1}, {"b": 1}]),
    # extra keys are exactly the names not declared (one key DFA): prefixes, extensions, escapes,
    # non-ASCII and the empty name, valued by additionalProperties
    ({"type": "object", "properties": {"ab": {"type": "integer"}, "a\"b": {"type": "integer"}, "é": {"type": "integer"},
                                       "": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
     [{"ab": 1}, {"ab": "x"}, {"a": "x"}, {"a": 1}, {"abc": "x"}, {"abc": 1}, {"a\"b": 1}, {"a\"b": "x"}, {"a\"": "x"},
      {"é": 1}, {"é": "x"}, {"éé": "x"}, {"è": "x"}, {"": 1}, {"": "x"}, {"b": "x"}, {"ab": 1, "abc": "y"}]),
    # draft-04: 1.0 is not an integer; boolean exclusiveMinimum; items array + additionalItems
    ({"$schema": D4, "type": "integer"}, [1, 1.0, 10.0, -3]),
    # ... nor in an enum/const of integers: each spelling of a literal (1, 1.0) only where its type fits
    ({"$schema": D4, "type": "integer", "enum": [0, 1]}, [0, 1, 1.0, 0.0, 2]),
    ({"$schema": D4, "type": "integer", "enum": [4.0]}, [4, 4.0, 5]),
    ({"$schema": D4, "type": "number", "enum": [0, 1]}, [0, 1, 1.0, 2]),
    ({"$schema": D4, "not": {"type": "integer"}, "enum": [4.0, 4, 5]}, [4, 4.0, 5, 5.0]),
    ({"type": "integer", "enum": [0, 1]}, [0, 1, 1.0, 2]),
    ({"$schema": D4, "type": "number", "minimum": 5, "exclusiveMinimum": True}, [5, 5.5, 6, 4]),
    ({"$schema": D4, "type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False},
     [[1, "a"], [1], [1, "a", 2], ["a"], []]),
    ({"$schema": D4, "type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "boolean"}},
     [[1, True, False], [1, 2], [True]]),
    # 2020-12 (no $schema): 1.0 is an integer
    ({"type": "integer"}, [1, 1.0, 1.5]),
    # draft-07: siblings of $ref are ignored
    ({"$schema": D7, "definitions": {"a": {"type": "object", "properties": {"x": {"type": "integer"}}}},
      "$ref": "#/definitions/a", "required": ["y"]},
     [{"x": 1}, {"y": 1}, {"x": "s"}]),
    # dependencies (draft-07 spelling): array form
    ({"$schema": D7, "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependencies": {"a": ["b"]}},
     [{"a": 1, "b": 2}, {"a": 1}, {"b": 2}, {}]),
    # string lengths are counted, not unrolled: any bound, with pattern / format too
    ({"type": "string", "minLength": 2, "maxLength": 4096}, ["", "a", "ab", "é" * 3, "x" * 4096, "x" * 4097, "\n\t", "\u00e9"]),
    ({"type": "string", "maxLength": 3}, ["", "abc", "abcd", "\"\\/", "ééé", "éééé", "\u0041bc", "a\u0041bc"]),
    ({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 5}, ["a", "ab", "abcde", "abcdef", "AB", "a1"]),
    ({"type": "string", "format": "date", "maxLength": 10}, ["2024-01-01", "2024-1-1", "x"]),
    ({"type": "object", "properties": {"k": {"type": "array", "items": {"type": "string", "maxLength": 2}}}, "additionalProperties": False},
     [{"k": ["ab", "a", ""]}, {"k": ["abc"]}, {"k": ["ab", "abc"]}]),
    # type (and other keywords) beside anyOf / oneOf apply to every branch
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
     [{"a": 1}, {"b": 1}, {"a": "x"}, {}, {"c": 1}, [1]]),
    ({"type": ["string", "null"], "oneOf": [{"type": "string", "maxLength": 2}, {"type": "null"}, {"type": "integer"}]},
     ["ab", "abc", None, 3]),
    ({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}], "additionalProperties": {"type": "integer"}},
     [{"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {}, {"a": "x"}]),
    # not: required, enum / const of strings, booleans and null, not not
    ({"type": "object", "properties": {"a": {}, "b": {}}, "not": {"required": ["a", "b"]}},
     [{}, {"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {"c": 1}]),
    ({"not": {"required": ["a"]}}, [{}, {"a": 1}, 1, "x", [1]]),
    ({"type": "string", "not": {"enum": ["a", "bc", "é"]}}, ["a", "b", "bc", "bcd", "", "é", "éé"]),
    ({"type": ["string", "boolean", "null"], "not": {"enum": [True, None, "x"]}}, [True, False, None, "x", "y"]),
    ({"enum": ["a", "b", 1], "not": {"const": "a"}}, ["a", "b", 1]),
    ({"type": "integer", "not": {"not": {"minimum": 3}}}, [2, 3, 4]),
    # patternProperties where no complement is needed: extra keys not allowed, or free patterns
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     [{"x-a": 1}, {"x-a": "s"}, {"y": 1}, {}, {"x-a": 1, "x-b": 2}]),
    ({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
      "patternProperties": {"^[0-9]+$": {"type": "boolean"}, "^n[0-9]$": {"type": "boolean"}}, "additionalProperties": False},
     [{"name": "a", "12": True}, {"12": True}, {"name": "a", "12": 1}, {"name": "a", "b": 1}, {"name": "a", "n1": False, "7": True}]),
    ({"patternProperties": {"^x-": {}}, "maxProperties": 1}, [{"x-a": 1}, {"b": 2}, {"a": 1, "b": 2}]),
    # patternProperties with extra keys allowed: keys by the patterns they match (declared keys too),
    # the others valued by additionalProperties
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}}, [{"x-a": 1}, {"x-a": "s"}, {"y": "s"}, {}, {"x": "s"}]),
    ({"type": "object", "properties": {"x-a": {"minimum": 5}}, "patternProperties": {"^x-": {"type": "integer"}}},
     [{"x-a": 6}, {"x-a": 3}, {"x-a": "s"}, {"x-b": "s"}, {"x-b": 7, "q": None}]),
    ({"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"minimum": 3}}, "additionalProperties": {"type": "string"}},
     [{"ab": 3}, {"ab": 2}, {"ab": "s"}, {"a": 1}, {"b": 1}, {"b": "s"}, {"c": "s"}, {"c": 1}, {"xb": 3.5}]),
    ({"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": {"type": "integer"}}, [{"xa": "s"}, {"y": "s"}, {"y": 1}]),
    ({"type": "object", "required": ["x1"], "patternProperties": {"^x": {"type": "integer"}}}, [{"x1": 1}, {"x1": "s"}, {}, {"x1": 1, "x2": "a"}]),
    ({"type": "object", "patternProperties": {"é": {"type": "null"}, "\"": {"type": "null"}}}, [{"aé": None}, {"aé": 1}, {"a\"": 1}, {"a\"": None}, {"\n": 1}]),
    # patterns combined: allOf of patterns, pattern with format, not of a pattern or format
    ({"type": "string", "pattern": "^[a-z]+$", "not": {"pattern": "^ab"}}, ["abc", "a", "b", "", "AB", "ba"]),
    ({"type": "string", "allOf": [{"pattern": "a"}, {"pattern": "b"}], "maxLength": 3}, ["ab", "ba", "a", "xaxb", "axb", "abab"]),
    ({"type": "string", "format": "date", "pattern": "^2024"}, ["2024-01-01", "2023-01-01", "2024-13-01"]),
    ({"not": {"pattern": "^x"}}, ["x", "xy", "y", 1, None, ""]),
    ({"type": "string", "not": {"format": "uuid"}}, ["x", "12345678-1234-1234-1234-123456789abc"]),
    ({"type": "string", "not": {"pattern": "\""}}, ["a\"b", "ab", "\\", "\n"]),
    # enum / const with other keywords: the values those keywords accept
    ({"enum": ["a", "bb", "ccc", 1, 2.5], "maxLength": 2, "minimum": 2}, ["a", "bb", "ccc", 1, 2.5]),
    ({"enum": ["a", "b", 3], "anyOf": [{"const": "a"}, {"type": "integer"}]}, ["a", "b", 3]),
    ({"enum": [{"k": 1}, {"k": "s"}], "properties": {"k": {"type": "integer"}}}, [{"k": 1}, {"k": "s"}]),
    ({"enum": ["x", "y"], "const": "x"}, ["x", "y"]),
    # allOf whose parts repeat not / anyOf / oneOf / if
    ({"type": "string", "allOf": [{"not": {"const": "a"}}, {"not": {"enum": ["b"]}}]}, ["a", "b", "c"]),
    ({"type": "integer", "allOf": [{"not": {"maximum": 2}}, {"not": {"minimum": 9}}]}, [1, 2, 3, 8, 9]),
    ({"allOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"anyOf": [{"maxLength": 2}, {"minimum": 5}]}]},
     ["a", "abc", 3, 6, None, []]),
    ({"allOf": [{"if": {"type": "string"}, "then": {"maxLength": 2}}, {"if": {"type": "integer"}, "then": {"minimum": 3}, "else": {"type": "string"}}]},
     ["a", "abc", 1, 4, None]),
    # allOf levels: additionalProperties sees only its own level's properties; patterns unite
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": False}, {"properties": {"b": {}}}]},
     [{"a": 1}, {"b": 1}, {}, {"a": "s"}, {"c": 1}]),
    ({"allOf": [{"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}, {"properties": {"b": {"minLength": 2}}}]},
     [{"a": 1}, {"b": "ab"}, {"b": "a"}, {"b": 1}, {"c": "x"}, {"c": 1}]),
    ({"allOf": [{"additionalProperties": {"type": "string"}}, {"additionalProperties": {"maxLength": 2}}]}, [{"a": "ab"}, {"a": "abc"}, {"a": 1}]),
    ({"allOf": [{"patternProperties": {"^a": {"type": "string"}}}, {"patternProperties": {"^a": {"maxLength": 2}, "b": {"type": "integer"}}}]},
     [{"a": "ab"}, {"a": "abc"}, {"ab": 1}, {"b": 1}, {"b": "x"}]),
    ({"$defs": {"x": {"type": "object", "properties": {"a": {"type": "integer"}}}}, "allOf": [{"$ref": "#/$defs/x", "required": ["a"]}]},
     [{"a": 1}, {}, {"a": "s"}]),
    # uniqueItems over enumerable items: each value at most once, any order (1 and 1.0 are one value)
    ({"type": "array", "items": {"enum": ["a", "b", "c", 1, 1.0]}, "uniqueItems": True},
     [[], ["a"], ["a", "b"], ["a", "a"], ["c", "b", "a"], [1], [1, 1.0], ["a", 1, "b"], ["d"]]),
    ({"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True, "minItems": 2, "maxItems": 2},
     [["a"], ["a", "b"], ["b", "a"], ["a", "a"], ["a", "b", "c"]]),
    ({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}, [[True, False], [True, True], [None], []]),
    ({"type": "array", "items": {"enum": [{"x": 1}, [1, 2]]}, "uniqueItems": True}, [[{"x": 1}, [1, 2]], [{"x": 1}, {"x": 1}], [[1, 2]]]),
    # allOf levels repeating one oneOf (through $refs): once is enough
    ({"$schema": D4, "definitions": {"r": {"oneOf": [{"type": "integer", "maximum": 2}, {"enum": ["off"]}]},
                                     "a": {"properties": {"x": {"$ref": "#/definitions/r", "description": "1"}}},
                                     "b": {"properties": {"x": {"$ref": "#/definitions/r", "description": "2"}}}},
      "allOf": [{"$ref": "#/definitions/a"}, {"$ref": "#/definitions/b"}]},
     [{"x": 1}, {"x": "off"}, {"x": 3}, {"x": "on"}, {}]),
    # multipleOf with bounds: the range's DFA times the remainder automaton
    ({"type": "integer", "multipleOf": 5, "minimum": 3, "maximum": 42}, [0, 5, 10, 40, 45, 3, 7, -5, 5.0]),
    ({"type": "integer", "multipleOf": 7, "exclusiveMinimum": -30, "exclusiveMaximum": 0}, [-28, -7, 0, -35, -30, 7, -14]),
    ({"type": "number", "multipleOf": 10, "minimum": 0.5, "maximum": 1000}, [0, 10, 1000, 1010, 5, 20.0, 15.5]),
    ({"type": "integer", "multipleOf": 0.5, "minimum": 1}, [0, 1, 2, 100]),
    # -0 is 0: inside a range that starts at 0 (spelled by the lower bound's magnitudes elsewhere)
    ({"type": "number", "minimum": 0, "maximum": 10}, [-0.0, 0.0, 0, -0.5, 10, 10.5]),
    ({"type": "number", "minimum": 0}, [-0.0, 0, 3.5, -1.0]),
    ({"type": "number", "exclusiveMinimum": 0}, [-0.0, 0.0, 0.5]),
    ({"type": "number", "minimum": -1, "maximum": 0}, [-0.0, 0.0, -1, 0.5]),
    ({"type": "number", "maximum": -1}, [-0.0, -1, -1.5]),
    # draft-04: 8000.0 is no integer, but a number and a multiple of 1 (o46322 of JSONSchemaBench)
    ({"$schema": D4, "type": "number", "minimum": 0, "maximum": 99999999, "multipleOf": 1}, [8000.0, 8000, 0.0, 8000.5, -1.0]),
    ({"$schema": D4, "type": "number", "multipleOf": 5}, [10.0, 10, 7.0, 10.5]),
    ({"$schema": D4, "type": "number", "not": {"multipleOf": 3}}, [4.0, 4, 3.0, 4.5]),
    ({"$schema": D4, "type": "integer", "multipleOf": 5}, [10, 10.0]),
    # a branch that matches nothing (allOf with false, disjoint types) is dropped
    ({"anyOf": [{"allOf": [{"type": "string"}, False]}, {"allOf": [{"type": "integer"}, {"type": "string"}]}, {"type": "null"}]},
     [None, "a", 1]),
    # overlapping oneOf: exactly one = a branch and not the others (anyOf beside it applies to each)
    ({"anyOf": [{"type": "string"}, {"type": "integer"}], "oneOf": [{"maxLength": 1}, {"minLength": 3}]}, ["", "a", "ab", "abc", 1, None]),
    ({"type": "integer", "oneOf": [{"minimum": 3}, {"maximum": 5}]}, [1, 3, 5, 6]),
    ({"type": "string", "oneOf": [{"pattern": "^a"}, {"pattern": "b$"}]}, ["a", "b", "ab", "c"]),
    # dependentSchemas (and draft-07 dependencies with a schema)
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
      "dependentSchemas": {"a": {"required": ["b"], "properties": {"b": {"maxLength": 2}}}}},
     [{}, {"b": "xyz"}, {"a": 1}, {"a": 1, "b": "xy"}, {"a": 1, "b": "xyz"}]),
    ({"$schema": D7, "dependencies": {"a": {"properties": {"c": {"const": 1}}}, "b": ["a"]}},
     [{}, {"a": 0}, {"a": 0, "c": 1}, {"a": 0, "c": 2}, {"b": 0}, {"b": 0, "a": 0, "c": 1}, {"c": 2}, 3]),
    # contains / minContains
    ({"type": "array", "contains": {"type": "integer", "minimum": 5}}, [[], [1], [5], [1, 6, "x"], ["a", 1]]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"const": 2}, "minContains": 2},
     [[2], [2, 2], [1, 2, 3, 2], [2, "2", 2], [1, 1]]),
    # if / then / else, and not of what negate() can spell
    ({"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
      "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]}, "then": {"required": ["n"]},
      "else": {"properties": {"n": {"maximum": 3}}}},
     [{"kind": "a", "n": 1}, {"kind": "a"}, {"kind": "b"}, {"kind": "b", "n": 5}, {"n": 2}, {"n": 9}]),
    ({"type": "integer", "if": {"minimum": 10}, "then": {"maximum": 20}}, [3, 10, 20, 21, 9]),
    ({"if": {"type": "string"}, "then": {"maxLength": 2}, "else": {"type": "integer"}}, ["ab", "abc", 1, 1.5, None]),
    ({"type": "integer", "not": {"minimum": 2, "maximum": 5}}, [1, 2, 5, 6]),
    ({"type": "string", "not": {"maxLength": 2}}, ["", "ab", "abc"]),
    ({"type": "object", "not": {"properties": {"a": {"type": "string"}}}}, [{}, {"a": "x"}, {"a": 1}, {"b": 1}]),
    ({"type": ["integer", "string"], "not": {"anyOf": [{"type": "string"}, {"minimum": 3}]}}, [1, 3, "x"]),
    # unknown format: an annotation
    ({"type": "string", "format": "color-hex"}, ["x", ""]),
    # overlapping oneOf: one branch and not the others that may overlap it (siblings factored out)
    ({"type": "object", "properties": {"m": {"type": ["array", "null"]}},
      "oneOf": [{"properties": {"m": {"maxItems": 0, "type": ["null", "array"]}}, "required": ["e"]},
                {"properties": {"m": {"minItems": 1, "type": "array", "items": {"type": "string"}}}, "required": ["m"]}]},
     [{"m": None, "e": "a"}, {"e": "a"}, {"m": ["x"]}, {"m": [], "e": "a"}, {"m": ["x"], "e": "a"}, {"m": [1]}, {}]),
    ({"oneOf": [{"properties": {"a": {"type": "string"}}, "additionalProperties": False},
                {"properties": {"b": {"type": "string"}}, "additionalProperties": False}]},
     [{}, {"a": "x"}, {"b": "y"}, {"a": "x", "b": "y"}, {"c": 1}, 3]),
    ({"type": "object", "additionalProperties": False, "properties": {"category": {"enum": ["a", "b"]}, "url": {"type": "string"}},
      "oneOf": [{"properties": {"category": {"enum": ["a"]}}, "required": ["url"]},
                {"properties": {"category": {"enum": ["b"]}}, "required": ["url"]}]},
     [{"url": "u"}, {"url": "u", "category": "a"}, {"url": "u", "category": "b"}, {"category": "a"}, {"url": "u", "x": 1}]),
    # disjoint by a key one branch requires and the other forbids (additionalProperties false)
    ({"oneOf": [{"type": "object", "properties": {"$date": {"type": "integer"}}, "required": ["$date"], "additionalProperties": False},
                {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
                {"type": "string"}]},
     [{"$date": 1}, {"a": 1}, {}, {"$date": 1, "a": 2}, {"a": "x"}, {"y": 1}, "s"]),
    ({"type": "integer", "oneOf": [{"multipleOf": 3}, {"multipleOf": 5}]}, [3, 5, 15, 7, 0, 30, 9]),
    ({"type": "array", "oneOf": [{"items": {"type": "integer"}}, {"items": {"type": "number", "minimum": 2}}]},
     [[], [1], [2], [2.5], [1, 2.5], ["x"]]),
    # not of items / additionalProperties / oneOf / dependencies / multipleOf
    ({"type": "array", "not": {"items": {"type": "integer"}}}, [[], [1], [1, "x"], ["x"]]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"additionalProperties": False, "properties": {"a": {}}}},
     [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {"a": "x", "b": 1}]),
    ({"type": "object", "not": {"additionalProperties": {"type": "string"}}}, [{}, {"a": "x"}, {"a": 1}, {"a": "x", "b": None}]),
    ({"type": "integer", "not": {"oneOf": [{"minimum": 3}, {"maximum": 5}]}}, [1, 3, 5, 6, 4]),
    ({"$schema": D7, "type": "object", "not": {"dependencies": {"a": ["b"], "c": {"required": ["d"]}}}},
     [{}, {"a": 1}, {"a": 1, "b": 1}, {"c": 1}, {"c": 1, "d": 1}, {"a": 1, "c": 1, "b": 1, "d": 1}]),
    ({"type": "integer", "minimum": 1, "not": {"multipleOf": 4}}, [0, 1, 4, 6, 8, 12, 13]),
    ({"type": "number", "maximum": 10, "not": {"multipleOf": 2}}, [1, 2, 2.5, 9, 10, 11, 10.5, -3]),
    ({"type": "integer", "allOf": [{"multipleOf": 4}, {"multipleOf": 6}]}, [12, 24, 6, 8, 0]),
    ({"type": "number", "minimum": 1.5, "not": {"type": "integer"}}, [1, 1.5, 2, 2.25, 0.5]),
    ({"type": "object", "allOf": [{"not": {"required": ["a"]}}, {"not": {"type": "array"}}, {"not": {"required": ["b"]}}]},
     [{}, {"a": 1}, {"b": 1}, {"c": 1}]),
    # a key forbidden at one allOf level stays forbidden (oneOf of requireds spelled by negation)
    ({"type": "object", "required": ["shape"], "properties": {"shape": {"enum": ["c", "r"]}, "r": {"type": "number"},
                                                                "l": {"type": "number"}, "w": {"type": "number"}},
      "oneOf": [{"required": ["r"]}, {"required": ["l", "w"]}]},
     [{"shape": "c", "r": 1}, {"shape": "c"}, {"shape": "c", "r": 1, "l": 1, "w": 2}, {"l": 1, "w": 2, "shape": "r"},
      {"shape": "r", "l": 1}, {"shape": "r", "r": 1, "l": 2}, {"r": 1}]),
    ({"allOf": [{"properties": {"a": False}}, {"properties": {"a": {"type": "integer"}}}]}, [{}, {"a": 1}, {"b": 1}, {"a": "x"}]),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "oneOf": [{"required": ["a"]}, {"required": ["a", "b"]}]},
     [{"a": 1}, {"a": 1, "b": 1}, {"b": 1}, {}]),
    # a type no value of which fits is dropped, not the schema: a required key that is forbidden
    # rules out objects only; a key whose schema matches nothing is forbidden
    ({"anyOf": [{"allOf": [{"properties": {"a": False}}, {"properties": {"a": {}}, "required": ["a"]}]}, {"type": "string"}]},
     [{"a": 1}, {}, "s", 1, None, []]),
    ({"properties": {"a": False}, "required": ["a"]}, [{"a": 1}, {}, "s", 1]),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}, "b": {}}}, [{}, {"a": "x"}, {"b": 1}, {"a": "abc"}]),
    ({"properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}, "required": ["a"]}, [{}, {"a": "x"}, "s", 2]),
    ({"properties": {"a": {"allOf": [False, {"type": "integer"}]}}}, [{}, {"a": 1}, {"b": 1}, 1]),
    ({"required": ["a"], "dependentSchemas": {"a": False}}, [{"a": 1}, {}, 1, "x", [1]]),
    ({"anyOf": [{"required": ["a"], "properties": {"a": {"enum": []}}}, {"type": "string"}]}, [{"a": 1}, {}, "s", 1]),
    # not of numeric enum/const: the open intervals between the values (2.0 is 2)
    ({"type": "integer", "minimum": 1024, "maximum": 65535, "not": {"enum": [6379, 6380, 43215]}},
     [1024, 6378, 6379, 6380, 6381, 43215, 43214, 43216, 65535, 65536, 1023, 6379.0, 2000.5]),
    ({"not": {"enum": [10500, 10920, 11760]}}, [10500, 10500.0, 10501, "x", None, [1], {"a": 1}, 10920, 11760, 11761, -5, 1.5]),
    ({"not": {"const": -837}}, [-837, -837.0, -836, -838, 0, "a"]),
    ({"type": "number", "not": {"enum": [-2.0, 1.5]}}, [-2, -2.0, -2.5, 1.5, 1.4, 1.6, 0, 3]),
    ({"not": {"enum": [6, None]}}, [6, 6.0, None, 7, "s", True]),
    ({"type": "integer", "not": {"enum": [2.5, 3]}}, [2, 3, 4, 2.5]),
    ({"$schema": D4, "type": "integer", "minimum": 0, "exclusiveMinimum": True, "not": {"enum": [5]}}, [0, 1, 5, 6, 5.0]),
    ({"anyOf": [{"type": "integer", "not": {"enum": [1]}}, {"type": "string"}]}, [1, 2, "a"]),
    # not of propertyNames: some key it rejects (false: any key; enum: a key none of them; not enum: one of them)
    ({"type": "object", "not": {"propertyNames": {"not": {"const": "0"}}}}, [{}, {"0": 1}, {"1": 1}, {"1": 1, "0": 2}]),
    ({"not": {"propertyNames": {"not": {"enum": ["a", "b", 3]}}}}, [{}, {"a": 1}, {"b": 1}, {"c": 1}, 1, "x", {"c": 1, "b": 2}]),
    ({"not": {"propertyNames": False}}, [{}, {"a": 1}, {"a": 1, "b": 2}, 1]),
    ({"type": "object", "not": {"propertyNames": {"enum": ["a", "b"]}}}, [{}, {"a": 1}, {"a": 1, "b": 1}, {"c": 1}, {"a": 1, "c": 2}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "c": {"type": "string"}}, "not": {"propertyNames": {"const": "a"}}},
     [{}, {"a": 1}, {"c": "x"}, {"c": 1}, {"a": 1, "d": None}]),
    ({"type": "object", "not": {"anyOf": [{"propertyNames": {"not": {"enum": ["1", "3"]}}}, {"propertyNames": {"not": {"enum": ["2", "3"]}}}]},
      "minProperties": 2},
     [{"1": 0, "2": 0}, {"3": 0}, {"3": 0, "4": 0}, {"1": 0}, {"1": 0, "4": 0}, {"2": 0, "1": 0, "5": 0}]),
    # anyOf branches that match nothing (false, through allOf products) are dropped, never the whole oneOf branch
    ({"type": "object", "oneOf": [{"required": ["c"]}, {"required": ["a"], "properties": {"a": {}}},
                                  {"required": ["m"], "properties": {"m": {"type": "object"}}}]},
     [{"c": 1}, {"a": 1}, {"m": {}}, {"m": 1}, {"c": 1, "m": 1}, {"c": 1, "m": {}}]),
    ({"type": "object", "allOf": [{"anyOf": [{"required": ["a"]}, False]}, {"anyOf": [{"required": ["b"]}, {"required": ["c"]}]},
                                  {"not": {"required": ["m"], "properties": {"m": {"type": "object"}}}}]},
     [{"c": 1}, {"a": 1}, {"a": 1, "c": 1}, {"a": 1, "b": 1, "m": {}}, {"a": 1, "b": 1, "m": 2}]),
    # not of contains: no item matches
    ({"not": {"contains": {"type": "integer"}}}, [[], [1], ["a"], ["a", 2], 1, "x", {}]),
    ({"type": "array", "not": {"contains": {"minimum": 5}}}, [[], [1], [5], [1, 6], ["a", 7], ["z"]]),
    ({"type": "array", "prefixItems": [{"type": "string"}], "not": {"contains": {"type": "string"}}}, [[], ["a"], [1], [1, "b"]]),
    # two contains (allOf): one item matching both, or one item for each in either order
    ({"type": "array", "allOf": [{"contains": {"type": "integer"}}, {"contains": {"type": "string"}}]},
     [[], [1], ["a"], [1, "a"], ["a", 1], [None, "a", True, 2, None], [1, 2]]),
    ({"allOf": [{"contains": {"minimum": 5}}, {"contains": {"maximum": 6}}]}, [[5], [7], [4], [7, 4], [4, 7], [3, 9, 5.5], "x", {}]),
    ({"type": "array", "items": {"type": "integer"}, "allOf": [{"contains": {"minimum": 5}}, {"contains": {"maximum": 1}}]},
     [[5, 1], [1, 5], [3], [5, "a", 1], [0, 2, 9]]),
    ({"type": "array", "oneOf": [{"allOf": [{"items": {"type": "integer"}}, {"contains": {"minimum": 3}}]},
                                 {"allOf": [{"items": {"minimum": 3}}, {"contains": {"type": "integer"}}]}]},
     [[], [3], [1, 3], [3.5], [3.5, 4], [1], [4, 5], [2, 3.5]]),
    # not of literals next to anyOf / oneOf: a sibling of each branch (was: the string branch any
    # string but the literals, other types refused as matching nothing)
    ({"anyOf": [{"const": "a"}, {"const": "c"}], "not": {"const": "b"}}, [None, "zzz", "a", "b", "c"]),
    ({"type": "string", "anyOf": [{"const": "a"}, {"const": "c"}], "not": {"const": "b"}}, [None, "zzz", "a", "b", "c"]),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}], "not": {"enum": ["b", 3]}}, [None, "zz", "a", "b", 3, 4, 3.5]),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}], "not": {"const": "y"}}, ["x", "y", 1, 1.5]),
    ({"allOf": [{"items": {"anyOf": [{"const": "a"}, {"const": "c"}]}}, {"not": {"contains": {"const": "b"}}}]},
     [["a", "a"], ["a", "b"], ["c"], [], ["d"]]),
    # three contains: an item for each, one item may serve several
    ({"allOf": [{"contains": {"multipleOf": 2}}, {"contains": {"multipleOf": 3}}, {"contains": {"const": "x"}}]},
     [[6, "x"], ["x", 2, 3], [2, 3], [2, "x"], ["x", 9, 4, 1], [], [5, 7, "x"], {}]),
    # maxProperties with required keys and extra keys allowed
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"], "maxProperties": 3},
     [{"a": 1, "b": 2}, {"x": 0, "a": 1, "b": 2}, {"x": 0, "y": 0, "a": 1}, {"a": 1, "b": 2, "x": 1, "y": 2}, {"x": 0, "b": 1, "a": 3}]),
    # multipleOf 10^-j on numbers: at most j fractional digits, no exponent (a safe subset); values
    # the float oracle divides exactly (it calls 100.3 no multiple of 0.1)
    ({"type": "number", "multipleOf": 0.01}, [1, 1.5, 1.25, 1.255, 0.01, -3.5, 100.5, 2.0, 0.001]),
    ({"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 10}, [0, 10, 10.01, 9.75, 5.555, -0.01, 3.5]),
    ({"type": "number", "multipleOf": 0.1, "exclusiveMinimum": 1.5}, [1.5, 1.6, 1.55, 2, 1.51]),
    ({"type": ["number", "string"], "multipleOf": 0.0001}, [1.0001, 1.00001, 3, "x"]),
    # an item no value matches ends the array before it
    ({"prefixItems": [True, False]}, [[1], [1, "x"], [], "s", 1]),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "minLength": 2, "maxLength": 1}], "items": {"type": "null"}},
     [[1], [1, "x"], [], [1, None], ["a"]]),
    ({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 1}}, [[], ["a"], [1]]),
    # uniqueItems over prefixItems alone (items false), each enumerable: the arrays of distinct values
    ({"prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "items": False, "uniqueItems": True},
     [[], [True], [True, False], [False, True], [True, True], [False, False], [None], [True, False, True], "x"]),
    ({"type": "array", "prefixItems": [{"enum": [1, 2]}, {"enum": [1, 2.0, 3]}], "maxItems": 2, "uniqueItems": True, "minItems": 1},
     [[], [1], [1, 2], [2, 2], [2, 2.0], [1, 1.0], [2, 3], [3], [1, 2, 3]]),
    # unevaluatedProperties by cases of which in-place subschemas hold: the level's own keys,
    # allOf / $ref (always), anyOf (any subset), oneOf, if/then/else, dependentSchemas; a
    # cousin's keys are not seen; before 2019-09 the keyword is unknown (ignored)
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^x": {"type": "string"}},
      "unevaluatedProperties": {"type": "boolean"}},
     [{"a": 1}, {"a": 1, "b": True}, {"b": 1}, {"xy": "s"}, {"xy": True}, {}, 3]),
    ({"$defs": {"b": {"properties": {"b": {"type": "string"}}}}, "properties": {"a": {}},
      "allOf": [{"$ref": "#/$defs/b"}, {"properties": {"c": {"const": 1}}}], "unevaluatedProperties": False},
     [{"a": 1, "b": "x", "c": 1}, {"b": "x"}, {"d": 1}, {"b": 1}, {"c": 2, "a": 0}]),
    ({"anyOf": [{"properties": {"a": {"const": 1}}, "required": ["a"]}, {"properties": {"b": {"const": 2}}, "required": ["b"]}],
      "unevaluatedProperties": False},
     [{"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {"a": 1, "b": 3}, {"a": 2, "b": 2}, {"a": 1, "c": 0}, {}]),
    ({"oneOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}],
      "unevaluatedProperties": {"type": "null"}},
     [{"a": 1}, {"b": "x"}, {"a": 1, "b": None}, {"a": 1, "b": "x"}, {"a": 1, "c": None}, {"a": 1, "c": 0}]),
    ({"if": {"properties": {"k": {"const": "t"}}, "required": ["k"]}, "then": {"properties": {"t": {}}},
      "else": {"properties": {"e": {}}}, "unevaluatedProperties": False},
     [{"k": "t", "t": 1}, {"k": "t", "e": 1}, {"e": 1}, {"t": 1}, {"k": "u", "e": 1}, {"k": "u"}, {}]),
    ({"if": {"patternProperties": {"^f": {"type": "string"}}}, "unevaluatedProperties": False}, [{"foo": "a"}, {"foo": 1}, {"g": 1}, {}]),
    ({"properties": {"a": {}}, "dependentSchemas": {"a": {"properties": {"b": {}}}}, "unevaluatedProperties": False},
     [{"a": 1, "b": 2}, {"b": 2}, {"a": 1}, {"a": 1, "c": 2}]),
    ({"allOf": [{"properties": {"a": {}}}, {"unevaluatedProperties": False}]}, [{}, {"a": 1}, 1]),
    ({"properties": {"a": {"properties": {"b": {}}, "unevaluatedProperties": False}}, "additionalProperties": False},
     [{"a": {"b": 1}}, {"a": {"c": 1}}, {"a": {}}, {"b": 1}]),
    ({"$schema": D7, "properties": {"a": {}}, "unevaluatedProperties": False}, [{"a": 1}, {"b": 1}]),
    # unevaluatedItems: prefixItems of every level that holds, contains' matches, items
    ({"prefixItems": [{"type": "integer"}], "allOf": [{"prefixItems": [True, {"type": "string"}]}], "unevaluatedItems": False},
     [[1], [1, "a"], [1, "a", 2], ["a"], []]),
    ({"contains": {"type": "string"}, "unevaluatedItems": {"type": "null"}},
     [["a"], ["a", None], [None, "a", 2], ["b", "c", None], [None], []]),
    ({"anyOf": [{"prefixItems": [{"const": 1}]}, {"prefixItems": [True, {"const": 2}]}], "unevaluatedItems": False},
     [[1], [1, 2], [0, 2], [1, 3], [1, 2, 3], []]),
    # maxContains: each item a match or a non-match, between minContains and maxContains matches
    ({"contains": {"const": 1}, "maxContains": 2}, [[], [1], [1, 1], [1, 1, 1], [2, 1, 3, 1], [1, 2, 1, 1], "x"]),
    ({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}, "minContains": 0, "maxContains": 1},
     [[], [1, 2], [5], [5, 6], [1, 7, 2], ["a"]]),
    ({"contains": {"type": "string"}, "minContains": 2, "maxContains": 3}, [["a"], ["a", "b"], [1, "a", 2, "b", "c"], ["a", "b", "c", "d"]]),
    # $ref by URI: $id bases (relative references), $anchor, a pointer inside an embedded resource
    ({"$id": "http://example.com/root.json", "$defs": {"a": {"$id": "a/b.json", "type": "integer"},
                                                      "c": {"$anchor": "cee", "type": "string"}},
      "properties": {"x": {"$ref": "a/b.json"}, "y": {"$ref": "#cee"}, "z": {"$ref": "http://example.com/a/b.json"}}},
     [{"x": 1, "y": "s", "z": 2}, {"x": "s"}, {"y": 1}, {"z": "s"}]),
    ({"$defs": {"r": {"$id": "http://e.com/r", "$defs": {"i": {"type": "integer"}}, "$ref": "#/$defs/i"}}, "$ref": "#/$defs/r"},
     [1, "a", 1.5]),
    # $dynamicRef: the outermost resource entered that has the $dynamicAnchor decides (a generic
    # list whose items the root binds to strings; the same list entered alone keeps its default)
    ({"$id": "https://e.com/root", "$ref": "list", "$defs": {
        "foo": {"$dynamicAnchor": "items", "type": "string"},
        "list": {"$id": "list", "type": "array", "items": {"$dynamicRef": "#items"}, "$defs": {"items": {"$dynamicAnchor": "items"}}}}},
     [["a", "b"], ["a", 1], [], 1]),
    ({"$id": "https://e.com/root2", "type": "object", "properties": {
        "strs": {"$ref": "strlist"}, "any": {"$ref": "list"}},
      "$defs": {"list": {"$id": "list", "type": "array", "items": {"$dynamicRef": "#items"}, "$defs": {"items": {"$dynamicAnchor": "items"}}},
                "strlist": {"$id": "strlist", "$ref": "list", "$defs": {"s": {"$dynamicAnchor": "items", "type": "string"}}}}},
     [{"strs": ["a"], "any": [1]}, {"strs": [1]}, {"any": [1, "a", None]}, {"strs": ["a", None]}]),
    # remote $refs resolve against the documents given with the request (a pointer, an $anchor, a
    # relative ref inside the remote document against its own URI, a document naming another)
    ({"type": "object", "properties": {"id": {"$ref": "https://docs.example/defs.json#/$defs/pos"},
                                       "item": {"$ref": "https://docs.example/nested/item.json"},
                                       "tag": {"$ref": "https://docs.example/defs.json#tag"}}},
     [{"id": 1}, {"id": 0}, {"item": {"n": "abc"}}, {"item": {"n": "abcd"}}, {"item": {}}, {"tag": True}, {"tag": 1}],
     {"https://docs.example/defs.json": {"$defs": {"pos": {"type": "integer", "minimum": 1}, "str": {"type": "string", "maxLength": 3},
                                                   "tag": {"$anchor": "tag", "type": "boolean"}}},
      "https://docs.example/nested/item.json": {"type": "object", "properties": {"n": {"$ref": "../defs.json#/$defs/str"}}, "required": ["n"]}}),
    # multipleOf a / 10^j on numbers: at most j fractional digits, x * 10^j divisible by a
    ({"type": "number", "multipleOf": 1.5}, [0, 1.5, 3, 4.5, -4.5, 35, 2.25, 0.75, 7.5, 1.05]),
    ({"multipleOf": 0.25, "minimum": -1, "maximum": 1}, [-1, -0.75, 0.5, 0.3, 1.25, 1, 0.125, "x"]),
    # oneOf sees through nested applicators: non-objects match every object-only branch
    ({"oneOf": [{"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"required": ["c"]}]},
     [{"a": 1}, {"b": 1}, {"c": 1}, {"a": 1, "c": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1, "c": 1}, {}, 1, "x"]),
    ({"not": {"patternProperties": {"x": True}, "required": ["xx"]}}, [{"xx": 1}, {"a": 1}, 1]),
    # not of if/then/else: (if and not then) or (not if and not else), or a sibling rejected
    ({"not": {"if": {"type": "object"}, "then": {"required": ["b"]}, "else": {"minimum": 2}}}, [{}, {"b": 1}, 1, 2, 0, "x"]),
    ({"not": {"type": "integer", "if": {"minimum": 5}, "then": {"maximum": 7}}}, [1, 6, 8, "x", 4.5, 5]),
    # minProperties above what the object can hold: objects match nothing, other types stay
    ({"type": ["object", "string"], "minProperties": 2, "maxProperties": 1}, [{}, {"a": 1}, "x", 1]),
    ({"properties": {"o": {"type": "object", "minProperties": 1, "additionalProperties": False}}}, [{}, {"o": {}}, {"o": 1}, {"p": 1}]),
    # a branch matching every value of a type excludes the values another matches (main accepted 1)
    ({"oneOf": [{"const": 1}, {"type": "integer"}]}, [1, 2, 1.5, "x"]),
    ({"oneOf": [{"const": 1}, {"maxLength": 1}]}, [1, 2, "x", "xy", None]),
    ({"oneOf": [{"const": 1}, {"type": "integer"}, {"allOf": [True, {"items": {"type": "integer"}}, {"not": {"required": ["b"]}}]}]},
     [1, 2, {}, {"b": 1}, [1]]),
    # contains with prefixItems: the hit is an entry, or an item after them
    ({"prefixItems": [{"type": "integer"}, {"type": "string"}], "contains": {"const": "x"}},
     [[1, "x"], ["x"], [1, "a"], [1, "a", "x"], [1, "a", 2], [], "x", [1], ["x", "x"]]),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "string"}, "contains": {"type": "integer", "minimum": 5},
      "minItems": 2}, [[5], [1], [1, "a"], [7, "a"], [], [7, "a", "b"]]),
    ({"prefixItems": [True], "contains": {"type": "string"}, "unevaluatedItems": False}, [[1, "foo"], [1, 2], [1, 2, "foo"], ["a"], []]),
    ({"not": {"anyOf": [True, {"properties": {"foo": True}}], "unevaluatedProperties": False}}, [{"bar": 1}, {"foo": 1}, {}, 1]),
]


@pytest.mark.parametrize("idx", range(len(CASES)))
def test_matches_jsonschema(grammar_tool, v3_tokenizer, idx):
    schema, instances, documents = (CASES[idx] + ({},))[:3]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    registry = referencing.Registry().with_resources(
        (uri, referencing.Resource.from_contents(doc, default_specification=referencing.jsonschema.DRAFT202012))
        for uri, doc in documents.items())
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER, registry=registry)
    assert_agrees_with(validator, grammar_tool, v3_tokenizer, schema, instances, documents=documents)


def test_remote_ref_without_its_document_is_an_error(grammar_tool):
    resp = grammar_tool.request(cmd="check", schema_type="json", schema={"$ref": "https://docs.example/missing.json"}, inputs=[])
    assert "https://docs.example/missing.json" in resp.get("error", "") and "none is fetched" in resp["error"]


@pytest.mark.parametrize("pattern,category", [("^\\p{L}+$", "L"), ("^\\p{Letter}+$", "L"), ("^[\\p{N}]+$", "N")])
def test_unicode_general_category(grammar_tool, v3_tokenizer, pattern, category):
    # Python's re has no \p; unicodedata is the oracle (letters and digits common to every version)
    import unicodedata
    strings = ["Hello", "π", "ľščťžýáíé", "日本", "123", "٣", "a1", "", "a b", "!"]
    texts = [json.dumps(x, ensure_ascii=False) for x in strings]
    resp = grammar_tool.request(cmd="check", schema_type="json", schema={"type": "string", "pattern": pattern},
                                inputs=[v3_tokenizer.encode(t, add_special_tokens=False).ids for t in texts])
    assert not resp.get("error"), resp["error"]
    for x, got in zip(strings, resp["results"]):
        assert got == (x != "" and all(unicodedata.category(c)[0] == category for c in x)), x


# The strict mode (no extra keys where additionalProperties is absent) forbids keys the schema does
# not name; every key of an enum/const literal is named by it, so where a literal decides the
# instance the strict mode changes nothing and jsonschema stays the oracle (keywords beside the
# literal, also in allOf levels and under not, test it under JSON Schema's semantics).
STRICT_LITERAL_CASES = [
    ({"allOf": [{"enum": [{"bar": 2, "foo": 1}]}, {"not": {"properties": {"foo": {"not": {}}}}}]},
     [{"bar": 2, "foo": 1}, {"bar": 2, "foo": 1, "baz": 3}, {"bar": 2}, {}]),
    ({"allOf": [{"enum": [{"foo": 1}, {"foo": 1, "bar": True}, {"foo": 2, "bar": 3}]},
                {"not": {"additionalProperties": {"type": "boolean"}}}]},
     [{"foo": 1}, {"foo": 1, "bar": True}, {"foo": 2, "bar": 3}, {"foo": 2}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "const": {"a": 1, "b": [1, {"c": None}]}},
     [{"a": 1, "b": [1, {"c": None}]}, {"a": 1}, {"b": [1, {"c": None}], "a": 1}, {"a": 1, "b": [1, {}]}]),
]


@pytest.mark.parametrize("idx", range(len(STRICT_LITERAL_CASES)))
def test_strict_mode_keeps_literal_keys(grammar_tool, v3_tokenizer, idx):
    schema, instances = STRICT_LITERAL_CASES[idx]
    assert_agrees_with(jsonschema.Draft202012Validator(schema), grammar_tool, v3_tokenizer, schema, instances,
                       strict=True)


def test_strict_mode_forbids_undeclared_keys_beside_a_not(grammar_tool, v3_tokenizer):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "not": {"required": ["b"]}}
    instances = [{"a": 1}, {}, {"a": 1, "c": 2}, {"b": 1}]
    inputs = [v3_tokenizer.encode(json.dumps(x, separators=(",", ":")), add_special_tokens=False).ids for x in instances]
    assert grammar_tool.request(cmd="check", schema_type="json", schema=schema, inputs=inputs, strict=True)["results"] == \
        [True, True, False, False]
    assert grammar_tool.request(cmd="check", schema_type="json", schema=schema, inputs=inputs)["results"] == \
        [True, True, True, False]
