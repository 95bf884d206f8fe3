"""`deepinfer serve` on loopback with the demo model, driven by the official openai client."""
import asyncio
import http.client
import json
import re
import time
import urllib.parse

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from conftest import API_KEY as KEY, SERVED_NAME as NAME  # noqa: E402


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0, timeout=120)


def raw(base: str, method: str, path: str, body=None, key=KEY, content: bytes = None):
    """(status, parsed JSON or text) of one plain HTTP request."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    conn.request(method, path, body=content if content is not None else None if body is None else json.dumps(body),
                 headers=headers)
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def metric(base: str, name: str, labels: str = "") -> float:
    text = raw(base, "GET", "/metrics")[1]
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_health_models_metrics(server, client):
    assert raw(server, "GET", "/health", key=None)[0] == 200
    models = client.models.list()
    assert [m.id for m in models.data] == [NAME]
    text = raw(server, "GET", "/metrics", key=None)[1]
    for name in ("deepinfer_requests_total", "deepinfer_time_to_first_token_seconds_bucket",
                 "deepinfer_num_requests_running", "deepinfer_num_requests_waiting",
                 "deepinfer_state_memory_budget_bytes", "deepinfer_state_memory_used_bytes",
                 "deepinfer_engine_waiting_seqs", "deepinfer_engine_steps_total"):
        assert name in text, name


def test_completion_usage_and_seed(client):
    r = client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=6, temperature=0.8,
                                  seed=7, extra_body={"ignore_eos": True})
    c = r.choices[0]
    assert isinstance(c.text, str) and c.finish_reason == "length"
    assert r.usage.completion_tokens == 6 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 6
    again = client.completions.create(model=NAME, prompt="The capital of France is", max_tokens=6,
                                      temperature=0.8, seed=7, extra_body={"ignore_eos": True})
    assert again.choices[0].text == c.text  # seed → seq_seed: same tokens
    two = client.completions.create(model=NAME, prompt=["a", "b"], max_tokens=3, n=2, logprobs=2,
                                    extra_body={"ignore_eos": True})
    assert sorted(ch.index for ch in two.choices) == [0, 1, 2, 3]
    for ch in two.choices:
        assert len(ch.logprobs.tokens) == 3 and len(ch.logprobs.top_logprobs[0]) == 2
        assert all(lp <= 0 for lp in ch.logprobs.token_logprobs)


def test_stop_and_chat_logprobs(client):
    full = client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=12, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    stop = full[len(full) // 2:len(full) // 2 + 2]
    if not stop.strip():
        pytest.skip(f"no stop string in the middle of {full!r}")
    cut = client.completions.create(model=NAME, prompt="Once upon a time", max_tokens=12, temperature=0, stop=[stop],
                                    extra_body={"ignore_eos": True}).choices[0]
    assert cut.finish_reason == "stop" and cut.text == full[:full.index(stop)]
    r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                       temperature=0, logprobs=True, top_logprobs=2, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 5
    for entry in content:
        assert len(entry.top_logprobs) == 2 and entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)  # greedy: the top token


def test_streamed_chat_matches_unstreamed(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    full = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0)
    stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    text, finish, usage, roles = "", None, None, []
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            roles += [ch.delta.role] if ch.delta.role else []
            text += ch.delta.content or ""
            finish = ch.finish_reason or finish
    assert roles == ["assistant"]
    assert text == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens > 0


def test_streamed_usage_counts_cached_tokens(client):
    """stream_options.include_usage: a last chunk with usage, cached_tokens from the prefix cache."""
    system = "You answer in one word. " * 80  # > 2 prefix blocks of 64 tokens before n - 140 (SWA bounded replay)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Colour of the sky?"}]
    usages = []
    for _ in range(2):
        stream = client.chat.completions.create(model=NAME, messages=messages, max_tokens=3, stream=True,
                                                stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        chunks = list(stream)
        assert chunks[-1].choices == [] and all(c.usage is None for c in chunks[:-1])
        usages.append(chunks[-1].usage)
    assert [u.completion_tokens for u in usages] == [3, 3] and usages[0].prompt_tokens == usages[1].prompt_tokens
    assert usages[1].prompt_tokens_details.cached_tokens >= 128 > usages[0].prompt_tokens_details.cached_tokens
    cached = []
    for _ in range(2):
        stream = client.completions.create(model=NAME, prompt=system + "Go.", max_tokens=2, stream=True,
                                           stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        last = list(stream)[-1]
        assert last.choices == [] and last.usage.completion_tokens == 2
        cached.append(last.usage.prompt_tokens_details.cached_tokens)
    assert cached[1] >= 128 > cached[0]


def test_json_schema_output(client):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
              "required": ["color", "ok"], "additionalProperties": False}
    r = client.chat.completions.create(
        model=NAME, messages=[{"role": "user", "content": "Pick a color."}], max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "pick", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    r = client.completions.create(model=NAME, prompt="x", max_tokens=16, extra_body={"guided_choice": ["yes", "no"]})
    assert r.choices[0].text in ("yes", "no")


SMALL = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"type": "boolean"}}, "required": ["a", "b"],
         "additionalProperties": False}
GRAMMAR = 'root ::= ("yes" | "no") " " [0-9] [0-9]'
REGEX = "[0-9]{3}-[a-z]{2}"


@pytest.mark.parametrize("extra, check", [
    ({"guided_json": SMALL}, lambda t: jsonschema.validate(json.loads(t), SMALL)),
    ({"guided_json": json.dumps(SMALL)}, lambda t: jsonschema.validate(json.loads(t), SMALL)),  # a JSON string
    ({"guided_regex": REGEX}, lambda t: re.fullmatch(REGEX, t) or pytest.fail(t)),
    ({"guided_choice": ["left", "right"]}, lambda t: t in ("left", "right") or pytest.fail(t)),
    ({"guided_grammar": GRAMMAR}, lambda t: re.fullmatch("(yes|no) [0-9]{2}", t) or pytest.fail(t)),
    ({"structured_outputs": {"json": SMALL}}, lambda t: jsonschema.validate(json.loads(t), SMALL)),
    ({"structured_outputs": {"regex": REGEX}}, lambda t: re.fullmatch(REGEX, t) or pytest.fail(t)),
    ({"structured_outputs": {"choice": ["left", "right"]}}, lambda t: t in ("left", "right") or pytest.fail(t)),
    ({"structured_outputs": {"grammar": GRAMMAR}}, lambda t: re.fullmatch("(yes|no) [0-9]{2}", t) or pytest.fail(t)),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": SMALL, "strict": True}}},
     lambda t: jsonschema.validate(json.loads(t), SMALL)),
])
def test_vllm_structured_output_spellings(client, extra, check):
    r = client.completions.create(model=NAME, prompt="Answer:", max_tokens=48, temperature=0.7, seed=1, extra_body=extra)
    assert r.choices[0].finish_reason == "stop", r.choices[0].text  # the constraint ended the answer
    check(r.choices[0].text)


def test_json_object_spellings(client):
    """json_object (response_format, or vLLM's structured_outputs.json_object): any JSON object."""
    for extra in ({"response_format": {"type": "json_object"}}, {"structured_outputs": {"json_object": True}}):
        r = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "JSON please"}],
                                           max_tokens=200, temperature=0, extra_body=extra)
        text = r.choices[0].message.content
        assert text.lstrip().startswith("{"), text
        if r.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(text), dict)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                     "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "days", "unit"]}}}


def test_tool_call(client):
    messages = [{"role": "user", "content": "Weather in Paris for 3 days?"}]
    r = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER], max_tokens=400,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, WEATHER["function"]["parameters"])
    # The call goes back into the conversation with its result; the server renders both.
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    follow = client.chat.completions.create(model=NAME, messages=messages, tools=[WEATHER], max_tokens=4)
    assert follow.usage.prompt_tokens > r.usage.prompt_tokens
    # Streamed: the call arrives whole, parsed, in one delta.
    stream = client.chat.completions.create(model=NAME, messages=messages[:1], tools=[WEATHER], max_tokens=400,
                                            tool_choice="required", stream=True)
    calls = [tc for chunk in stream for ch in chunk.choices for tc in (ch.delta.tool_calls or [])]
    assert [c.function.name for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])


def test_64_concurrent_streams(server):
    async def one(c, i):
        stream = await c.completions.create(model=NAME, prompt=f"request {i}", max_tokens=4, stream=True,
                                            extra_body={"ignore_eos": True})
        text, finish = "", None
        async for chunk in stream:
            text += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
        return finish

    async def run():
        c = openai.AsyncOpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0, timeout=300)
        try:
            return await asyncio.gather(*[one(c, i) for i in range(64)])
        finally:
            await c.close()

    assert asyncio.run(run()) == ["length"] * 64
    assert metric(server, "deepinfer_engine_max_seqs_in_step") > 1  # the clients shared engine steps


def test_disconnect_frees_request(server):
    aborted = metric(server, "deepinfer_aborted_requests_total")
    body = {"model": NAME, "prompt": "tell me everything", "max_tokens": 100000, "stream": True, "ignore_eos": True}
    u = urllib.parse.urlsplit(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    r = conn.getresponse()
    assert r.status == 200
    while not r.fp.readline().startswith(b"data: "):  # the first streamed tokens
        pass
    conn.close()  # the client goes away mid-stream
    deadline = time.monotonic() + 60
    while metric(server, "deepinfer_num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric(server, "deepinfer_num_requests_running") == 0
    assert metric(server, "deepinfer_aborted_requests_total") == aborted + 1
    assert metric(server, "deepinfer_request_finished_total", '{reason="abort"}') >= 1


def test_disconnect_frees_unstreamed_request(server):
    """A plain (not streamed) request whose client leaves while its tokens flow is aborted too."""
    aborted = metric(server, "deepinfer_aborted_requests_total")
    body = {"model": NAME, "prompt": "tell me everything", "max_tokens": 100000, "ignore_eos": True}
    u = urllib.parse.urlsplit(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    deadline = time.monotonic() + 60
    while metric(server, "deepinfer_num_requests_running") == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    steps = metric(server, "deepinfer_engine_steps_total")
    while metric(server, "deepinfer_engine_steps_total") < steps + 3 and time.monotonic() < deadline:
        time.sleep(0.05)  # decoding
    conn.close()
    while metric(server, "deepinfer_num_requests_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric(server, "deepinfer_num_requests_running") == 0
    assert metric(server, "deepinfer_aborted_requests_total") == aborted + 1


@pytest.mark.parametrize("body, message", [
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": "x", "response_format": {"type": "xml"}}, "response_format"),
    ({"prompt": "x", "guided_json": {"type": "object", "$dynamicRef": "#meta"}}, "unsupported keyword"),
    ({"prompt": "x", "guided_regex": "a", "guided_choice": ["b"]}, "one structured-output"),
    ({"prompt": "x", "structured_outputs": {"structural_tag": "{}"}}, "structural_tag not supported"),
    ({"prompt": [1, 2, 10**9]}, "outside the vocabulary"),
    ({"prompt": "x", "vllm_xargs": {"my_arg": 67}}, "'vllm_xargs' has 'my_arg'"),
    ({"prompt": "x", "seed": -(2**63) - 1}, "'seed'"),  # used to wrap silently to another seed
    ({"prompt": "x", "seed": 2**64}, "'seed'"),
])
def test_bad_completion_requests(server, client, body, message):
    if "prompt" in body:
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=NAME, prompt=body["prompt"], max_tokens=body.get("max_tokens", 4),
                                      extra_body={k: v for k, v in body.items() if k not in ("prompt", "max_tokens")})
        status, err = e.value.status_code, e.value.body
    else:  # the openai client refuses to send it
        status, err = raw(server, "POST", "/v1/completions", {"model": NAME, **body})
        err = err["error"]
    assert status == 400 and err["type"] == "invalid_request_error" and err["message"]
    assert message in err["message"]
    ok = client.completions.create(model=NAME, prompt="still serving", max_tokens=2)  # the server keeps serving
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_bad_chat_and_body(server, client):
    with pytest.raises(openai.BadRequestError, match="not in 'tools'"):
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError, match="unknown role"):
        client.chat.completions.create(model=NAME, messages=[{"role": "wizard", "content": "x"}])
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other-model", prompt="x")
    status, err = raw(server, "POST", "/v1/completions", content=b"{not json")
    assert status == 400 and "not valid JSON" in err["error"]["message"]


def test_api_key(server):
    assert raw(server, "POST", "/v1/completions", {"prompt": "x"}, key=None)[0] == 401
    status, err = raw(server, "GET", "/v1/models", key="wrong")
    assert status == 401 and err["error"]["code"] == "invalid_api_key"
    assert raw(server, "GET", "/metrics", key=None)[0] == 200  # probes and scrapers need no key
    bad = openai.OpenAI(base_url=server + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
