"""The server's chat layer without a server: the forced tool-call regex matches what the chat
encoding renders for a call, parses back to the same call, and streamed splitting holds markup back."""
import json
import re

import pytest

from deepinfer import _core
from deepinfer.server import chat

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city", "days", "metric", "unit"],
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
                   "unit": {"enum": ["c", "f"]}}}}}
ARGS = {"city": "Paris", "days": 3, "metric": True, "unit": "c"}


@pytest.mark.parametrize("fmt", ["v4", "v41"])
def test_forced_regex_matches_the_rendered_call_and_parses_back(fmt):
    messages = [{"role": "system", "content": "", "tools": [TOOL]}, {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(ARGS)}}]}]
    text = _core.render_chat(json.dumps(messages), fmt, False, "", False)
    call = text[text.rindex(chat.calls_marker(fmt)):].removesuffix("<｜end▁of▁sentence｜>")
    assert re.fullmatch(chat.tool_call_regex([TOOL], fmt), call)
    req = chat.ChatRequest(prompt_token_ids=[], thinking=False, tools=[TOOL], parse_tools=True)
    parsed = chat.parse(call, req, fmt)
    assert parsed["content"] == "" and [c["function"]["name"] for c in parsed["tool_calls"]] == ["get_weather"]
    assert json.loads(parsed["tool_calls"][0]["function"]["arguments"]) == ARGS


def test_stream_splitter_holds_back_markup():
    req = chat.ChatRequest(prompt_token_ids=[], thinking=True, tools=[TOOL], parse_tools=True)
    sp = chat.StreamSplitter(req, "v41")
    assert sp.deltas("let me think</thi") == ("let me think", "")
    assert sp.deltas("let me think</think>Sure\n\n<｜DS") == ("", "Sure")
    assert sp.deltas("let me think</think>Sure\n\n<｜DSML｜ calls>\n") == ("", "")


def no_encoder(*args):
    raise AssertionError("a refused request is not encoded")


def test_bad_tool_choice_is_a_clear_error():
    with pytest.raises(Exception, match="not in 'tools'"):
        chat.build({"messages": [{"role": "user", "content": "x"}], "tools": [TOOL],
                    "tool_choice": {"type": "function", "function": {"name": "other"}}}, "v41", no_encoder)


@pytest.mark.parametrize("kwargs, needle", [({"thinking": "false"}, "thinking must be a boolean"),  # bool() made it True
                                            ({"enable_thinking": 1}, "thinking must be a boolean"),
                                            ({"reasoning_effort": 3}, "reasoning_effort must be a string")])
def test_chat_template_kwargs_are_checked_not_converted(kwargs, needle):
    with pytest.raises(Exception, match=needle):
        chat.build({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": kwargs}, "v41",
                   no_encoder)
