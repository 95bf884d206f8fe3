"""Chat requests: OpenAI messages (text and image_url parts) and tools → the DeepSeek prompt's token ids
and images; model text → content, reasoning and DSML tool calls; tool_choice "required"/named → a regex
that makes the model write a DSML call."""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .. import _core
from .protocol import bad, get

# (messages JSON, tools JSON, thinking, reasoning effort) → (prompt token ids, image files): the engine's
# chat encoding (special-token strings in messages stay text), e.g. Engine.chat_prompt.
Encoder = Callable[[str, str, bool, str], tuple]

THINK_END = "</think>"
DSML = "｜DSML｜"
# The DSML tag names of each chat format (src/tokenizer/chat_encoding.cpp: V4.1 puts a space after the token).
TAGS = {"v4": ("tool_calls", "invoke", "parameter"), "v41": (" calls", " invoke", " parameter")}


def calls_marker(fmt: str) -> str:
    return f"\n\n<{DSML}{TAGS[fmt][0]}"


@dataclass
class ChatRequest:
    prompt_token_ids: list
    thinking: bool
    tools: list = field(default_factory=list)
    parse_tools: bool = False    # tool_choice is not "none"
    forced_regex: Optional[str] = None
    images: list = field(default_factory=list)  # the image files of image_url parts, in order


def build(body: dict, fmt: str, encode: Encoder) -> ChatRequest:
    messages = get(body, "messages", (list,))
    if not messages:
        raise bad("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}] must be an object with a string 'role'", "messages")
    kwargs = dict(get(body, "chat_template_kwargs", (dict,), {}))
    thinking = kwargs.pop("thinking", kwargs.pop("enable_thinking", None))
    if thinking is not None and not isinstance(thinking, bool):  # bool("false") is True
        raise bad(f"chat_template_kwargs.thinking must be a boolean, got {json.dumps(thinking)[:40]}",
                  "chat_template_kwargs")
    effort = kwargs.pop("reasoning_effort", None) or get(body, "reasoning_effort", (str,), "") or ""
    if not isinstance(effort, str):
        raise bad(f"chat_template_kwargs.reasoning_effort must be a string, got {json.dumps(effort)[:40]}",
                  "chat_template_kwargs")
    thinking = bool(thinking)
    if kwargs:
        raise bad(f"chat_template_kwargs: unknown keys {sorted(kwargs)} (thinking, reasoning_effort)",
                  "chat_template_kwargs")
    tools = get(body, "tools", (list,), [])
    for i, t in enumerate(tools):
        if not (isinstance(t, dict) and t.get("type", "function") == "function" and isinstance(t.get("function"), dict)
                and isinstance(t["function"].get("name"), str)):
            raise bad(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., 'parameters': ...}}}}", "tools")
    choice = body.get("tool_choice", "auto" if tools else "none")
    named = None
    if isinstance(choice, dict):
        named = (choice.get("function") or {}).get("name")
        if choice.get("type") != "function" or not isinstance(named, str):
            raise bad("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}",
                      "tool_choice")
        if named not in [t["function"]["name"] for t in tools]:
            raise bad(f"tool_choice names '{named}', which is not in 'tools'", "tool_choice")
    elif choice not in ("none", "auto", "required"):
        raise bad("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name': ...}}",
                  "tool_choice")
    if choice != "none" and not tools:
        raise bad("tool_choice needs 'tools'", "tool_choice")
    tools_json = json.dumps(tools, ensure_ascii=False) if tools and choice != "none" else ""
    try:
        ids, images = encode(json.dumps(messages, ensure_ascii=False), tools_json, thinking, str(effort))
    except ValueError as e:  # bad messages or images: what is wrong, and where
        raise bad(f"messages: {e}", "messages") from None
    req = ChatRequest(list(ids), thinking, tools, parse_tools=bool(tools) and choice != "none", images=list(images))
    if choice == "required" or named:
        chosen = [t for t in tools if named is None or t["function"]["name"] == named]
        req.forced_regex = tool_call_regex(chosen, fmt)
    return req


# -- forced tool calls ------------------------------------------------------------------------------

def _esc(s: str) -> str:
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", s)


# Bounded JSON values of non-string parameters (nested objects and arrays as empty ones).
_JSON_VALUE = {"integer": "-?(0|[1-9][0-9]{0,8})", "number": "-?(0|[1-9][0-9]{0,8})(\\.[0-9]{1,6})?",
               "boolean": "(true|false)", "array": "\\[\\]", "object": "\\{\\}"}


def _value_regex(schema: dict) -> tuple[bool, str]:
    """(is a DSML string parameter, regex of the value) for one parameter's JSON schema."""
    if "enum" in schema and schema["enum"]:
        strs = all(isinstance(v, str) for v in schema["enum"])
        alts = [_esc(v if strs else json.dumps(v)) for v in schema["enum"]]
        return strs, "(" + "|".join(alts) + ")"
    kind = schema.get("type", "string")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "string":
        return True, "[^<\\n]{1,16}"
    return False, _JSON_VALUE.get(kind, "null")


def tool_call_regex(tools: list, fmt: str) -> str:
    """A regex of one DSML tool call to one of tools, with the required parameters (in the
    schema's order) — the text render_chat writes for an assistant tool call."""
    calls, invoke, param = TAGS[fmt]
    alternatives = []
    for t in tools:
        f = t["function"]
        schema = f.get("parameters") or {}
        props = schema.get("properties") or {}
        required = [k for k in props if k in set(schema.get("required", []))]
        params = []
        for k in required:
            is_str, value = _value_regex(props[k] if isinstance(props[k], dict) else {})
            params.append(f'<{DSML}{param} name="{_esc(k)}" string="{"true" if is_str else "false"}">{value}</{DSML}{param}>')
        alternatives.append(f'<{DSML}{invoke} name="{_esc(f["name"])}">\\n' + "\\n".join(params) + f"\\n</{DSML}{invoke}>")
    body = alternatives[0] if len(alternatives) == 1 else "(" + "|".join(alternatives) + ")"
    return _esc(calls_marker(fmt)).replace("\n", "\\n") + ">\\n" + body + f"\\n</{DSML}{calls}>"


# -- the model's text -------------------------------------------------------------------------------

def parse(text: str, req: ChatRequest, fmt: str) -> dict:
    """{"content", "reasoning_content", "tool_calls"} of one finished answer. Markup the model got
    wrong stays in the content rather than failing the request."""
    if req.parse_tools or req.thinking:
        try:
            p = _core.parse_chat(text, fmt, req.thinking)
            calls = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": n, "arguments": a}} for n, a in p["tool_calls"]] if req.parse_tools else []
            return {"content": p["content"], "reasoning_content": p["reasoning_content"] or None, "tool_calls": calls}
        except ValueError:
            pass
    if req.thinking:
        reasoning, sep, rest = text.partition(THINK_END)
        return {"content": rest if sep else "", "reasoning_content": reasoning, "tool_calls": []}
    return {"content": text, "reasoning_content": None, "tool_calls": []}


def _hold(text: str, marker: str) -> str:
    """text without a tail that could still grow into marker."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return text[:-k]
    return text


class StreamSplitter:
    """Turns the growing text of one choice into reasoning and content deltas; a DSML tool-call
    block is held back and sent whole, parsed, when the answer ends."""

    def __init__(self, req: ChatRequest, fmt: str) -> None:
        self.req, self.fmt = req, fmt
        self.sent_reasoning = self.sent_content = 0

    def deltas(self, text: str) -> tuple[str, str]:
        reasoning, content = "", text
        if self.req.thinking:
            r, sep, rest = text.partition(THINK_END)
            reasoning, content = (r, rest) if sep else (_hold(r, THINK_END), "")
        if self.req.parse_tools:
            marker = calls_marker(self.fmt)
            i = content.find(marker)
            content = content[:i] if i >= 0 else _hold(content, marker)
        dr, dc = reasoning[self.sent_reasoning:], content[self.sent_content:]
        self.sent_reasoning, self.sent_content = len(reasoning), len(content)
        return dr, dc
