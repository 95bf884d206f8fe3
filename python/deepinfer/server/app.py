"""The FastAPI app: OpenAI's /v1/completions, /v1/chat/completions and /v1/models, plus /health and
/metrics. Handlers only translate; every request goes into the one AsyncEngine (continuous batching)."""
from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from typing import AsyncIterator, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from . import chat, responses
from .engine_loop import AsyncEngine
from .metrics import Metrics
from .protocol import APIError, bad, get, sampling_params, structured_args


def build_app(engine: AsyncEngine, model_name: str, chat_format: Optional[str],
              api_key: Optional[str] = None, allowed_local_media_path: Optional[str] = None) -> FastAPI:
    """allowed_local_media_path: a folder whose image files chat messages may name (file paths or
    file:// URLs in image_url parts); without it only data: URLs are accepted."""
    app = FastAPI(title="DeepInfer", docs_url=None, redoc_url=None)
    server = _Server(engine, model_name, chat_format, allowed_local_media_path)
    app.state.server = server

    if api_key:
        app.add_middleware(_APIKeyGuard, api_key=api_key)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError):
        server.metrics.requests.labels(request.url.path, str(e.status)).inc()
        return JSONResponse(e.body(), status_code=e.status)

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics():
        server.metrics.waiting.set(server.waiting)
        return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": server.created,
                                            "owned_by": "deepinfer", "root": engine.llm.model_dir,
                                            "max_model_len": engine.llm._engine.max_model_len()}]}

    @app.post("/tokenize")
    async def tokenize(request: Request):  # vLLM's: {"prompt"} → {"tokens", "count", "max_model_len"}
        body = await _body(request)
        prompt = get(body, "prompt", (str,))
        if prompt is None:
            raise bad("'prompt' must be a string", "prompt")
        try:
            tokens = engine.llm.encode(prompt)
        except ValueError as e:
            raise bad(str(e)) from None
        return {"tokens": tokens, "count": len(tokens), "max_model_len": engine.llm._engine.max_model_len()}

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await server.completions(await _body(request), request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await server.chat(await _body(request), request)

    return app


class _APIKeyGuard:
    """Refuses /v1 and /tokenize requests without 'Authorization: Bearer KEY'. Plain ASGI: Starlette's
    BaseHTTPMiddleware (@app.middleware) hides a client's disconnect from the handlers."""

    def __init__(self, app, api_key: str) -> None:
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path.startswith("/v1") or path == "/tokenize"):
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                err = APIError(401, "missing or incorrect API key (send 'Authorization: Bearer KEY')",
                               code="invalid_api_key")
                await JSONResponse(err.body(), status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _body(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad(f"the request body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    return body


def _sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class _Server:
    def __init__(self, engine: AsyncEngine, model_name: str, chat_format: Optional[str],
                 media_root: Optional[str] = None) -> None:
        self.engine, self.model_name, self.chat_format = engine, model_name, chat_format
        self.media_root = media_root
        self.metrics = Metrics(engine)
        self.created = int(time.time())
        self.waiting = 0
        core = engine.llm._engine
        self.decode = (lambda t: core.decode([t], False)) if core.has_tokenizer() else str

    # -- shared -----------------------------------------------------------------------------------

    def _check_model(self, body: dict) -> None:
        name = get(body, "model", (str,))
        if name is not None and name not in (self.model_name, self.engine.llm.model_dir):
            raise APIError(404, f"the model '{name}' does not exist (this server has '{self.model_name}')",
                           "model", code="model_not_found")

    async def _start(self, prompts: list[dict], params) -> tuple[list[str], asyncio.Queue]:
        """Adds one engine request per prompt (all or none: a refused one is a 400). Prompts with images
        are added off the event loop (the vision tower runs then)."""
        base = uuid.uuid4().hex
        queue: asyncio.Queue = asyncio.Queue()
        ids = [f"{base}-{i}" for i in range(len(prompts))]
        added: list[str] = []
        try:
            for rid, prompt in zip(ids, prompts):
                if prompt.get("images"):
                    await self.engine.add_off_loop(rid, prompt, params, queue)
                else:
                    self.engine.add(rid, prompt, params, queue)
                added.append(rid)
        except ValueError as e:
            for rid in added:
                self.engine.abort(rid)
            raise bad(str(e)) from None
        except asyncio.CancelledError:  # the client went away while an image was encoded
            for rid in added:
                self.engine.abort(rid)
            raise
        return ids, queue

    async def _outputs(self, ids: list[str], queue: asyncio.Queue, request: Request,
                       stream: bool) -> AsyncIterator[tuple[int, dict]]:
        """Yields (prompt index, raw output) until every request finished. A client that goes away
        (or a cancelled stream) aborts what is still running."""
        index = {rid: i for i, rid in enumerate(ids)}
        t0 = time.monotonic()
        last = {rid: t0 for rid in ids}
        first_seen: set[str] = set()
        finished: set[str] = set()
        self.waiting += len(ids)
        checked = t0
        try:
            while len(finished) < len(ids):
                try:
                    d = await asyncio.wait_for(queue.get(), timeout=1.0)
                except asyncio.TimeoutError:
                    d = None
                now = time.monotonic()
                # A stream notices a gone client when it writes; a plain response asks, even while outputs flow.
                if not stream and now - checked >= 1.0:
                    checked = now
                    if await request.is_disconnected():
                        return
                if d is None:
                    continue
                rid = d["request_id"]
                has_tokens = any(c["token_ids"] for c in d["outputs"])
                if rid not in first_seen and (has_tokens or d["finished"]):
                    first_seen.add(rid)
                    self.waiting -= 1
                    if has_tokens:
                        self.metrics.ttft.observe(now - t0)
                elif rid in first_seen:
                    self.metrics.itl.observe(now - last[rid])
                last[rid] = now
                if d["finished"]:
                    finished.add(rid)
                    self.metrics.e2e.observe(now - t0)
                yield index[rid], d
        finally:
            self.waiting -= len(ids) - len(first_seen)
            for rid in ids:
                if rid not in finished:
                    self.engine.abort(rid)

    @staticmethod
    def _raise_if_failed(d: dict) -> None:
        if d.get("error") or any(c["finish_reason"] == "error" for c in d["outputs"]):
            raise APIError(500, f"the engine failed this request: {d.get('error') or 'error'}", type_="server_error")

    def _streaming(self, events: AsyncIterator[str], endpoint: str, ids: list[str]) -> StreamingResponse:
        self.metrics.requests.labels(endpoint, "200").inc()

        async def body():
            try:
                async for e in events:
                    yield e
                yield "data: [DONE]\n\n"
            except APIError as e:
                yield _sse(e.body())
                yield "data: [DONE]\n\n"
            finally:  # also when the client left before the first event
                for rid in ids:
                    self.engine.abort(rid)

        return StreamingResponse(body(), media_type="text/event-stream")

    def _ok(self, obj: dict, endpoint: str) -> JSONResponse:
        self.metrics.requests.labels(endpoint, "200").inc()
        return JSONResponse(obj)

    # -- /v1/completions --------------------------------------------------------------------------

    def _completion_prompts(self, body: dict) -> list[dict]:
        p = body.get("prompt")
        if isinstance(p, str):
            return [{"prompt": p}]
        if isinstance(p, list) and p and all(isinstance(x, int) and not isinstance(x, bool) for x in p):
            return [{"prompt_token_ids": p}]
        if isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            return [{"prompt": x} for x in p]
        if isinstance(p, list) and p and all(isinstance(x, list) and x and all(isinstance(t, int) for t in x) for x in p):
            return [{"prompt_token_ids": x} for x in p]
        raise bad("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt")

    async def completions(self, body: dict, request: Request):
        endpoint = "/v1/completions"
        self._check_model(body)
        if body.get("suffix"):
            raise bad("'suffix' is not supported", "suffix")
        if body.get("echo"):
            raise bad("'echo' is not supported (use prompt_logprobs for the prompt's log-probabilities)", "echo")
        prompts = self._completion_prompts(body)
        k = get(body, "logprobs", (int,))
        params = sampling_params(body, max_tokens_default=16, logprobs=k, so_args=structured_args(body))
        plp = get(body, "prompt_logprobs", (int,))
        if plp is not None:
            params.prompt_logprobs = plp
        n = params.n
        stream = bool(get(body, "stream", (bool,), False))
        include_usage = bool((get(body, "stream_options", (dict,), {}) or {}).get("include_usage"))
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": cid, "object": "text_completion", "created": created, "model": self.model_name}
        ids, queue = await self._start(prompts, params)
        gen = self._outputs(ids, queue, request, stream)

        if not stream:
            final: dict[int, dict] = {}
            async for i, d in gen:
                if d["finished"]:
                    self._raise_if_failed(d)
                    final[i] = d
            if len(final) < len(prompts):
                return Response(status_code=499)  # the client went away
            choices = []
            for i in range(len(prompts)):
                for c in final[i]["outputs"]:
                    choice = {"index": i * n + c["index"], "text": c["text"], "finish_reason": _finish(c),
                              "logprobs": responses.completion_logprobs(c, 0, k, self.decode, 0) if k is not None else None}
                    if plp is not None:
                        choice["prompt_logprobs"] = responses.prompt_logprobs(final[i], self.decode)
                    choices.append(choice)
            p_tok = sum(len(final[i]["prompt_token_ids"]) for i in final)
            c_tok = sum(len(c["token_ids"]) for i in final for c in final[i]["outputs"])
            cached = sum(final[i]["num_cached_tokens"] for i in final)
            return self._ok({**head, "choices": choices, "usage": responses.usage(p_tok, c_tok, cached)}, endpoint)

        async def events():
            sent_text: dict[tuple, int] = {}
            sent_tok: dict[tuple, int] = {}
            p_tok = c_tok = cached = 0
            async for i, d in gen:
                self._raise_if_failed(d)
                for c in d["outputs"]:
                    key = (i, c["index"])
                    text = c["text"]
                    delta, s = text[sent_text.get(key, 0):], sent_tok.get(key, 0)
                    done = bool(c["finish_reason"])
                    if not delta and not done and len(c["token_ids"]) == s:
                        continue
                    lp = responses.completion_logprobs(c, s, k, self.decode, sent_text.get(key, 0)) if k is not None else None
                    sent_text[key], sent_tok[key] = len(text), len(c["token_ids"])
                    yield _sse({**head, "choices": [{"index": i * n + c["index"], "text": delta, "logprobs": lp,
                                                     "finish_reason": _finish(c) if done else None}]})
                if d["finished"]:
                    p_tok += len(d["prompt_token_ids"])
                    c_tok += sum(len(c["token_ids"]) for c in d["outputs"])
                    cached += d["num_cached_tokens"]
            if include_usage:
                yield _sse({**head, "choices": [], "usage": responses.usage(p_tok, c_tok, cached)})

        return self._streaming(events(), endpoint, ids)

    # -- /v1/chat/completions ---------------------------------------------------------------------

    async def chat(self, body: dict, request: Request):
        endpoint = "/v1/chat/completions"
        self._check_model(body)
        if self.chat_format is None:
            raise bad("this model has no DeepSeek chat format (no tokenizer): use /v1/completions")
        core = self.engine.llm._engine
        encode = lambda msgs, tools, thinking, effort: core.chat_prompt(  # noqa: E731
            msgs, tools, thinking, effort, True, False, self.media_root is not None, self.media_root or "")
        req = chat.build(body, self.chat_format, encode)
        so = structured_args(body)
        if req.forced_regex is not None:
            if so is not None:
                raise bad("tool_choice 'required' or a named tool cannot be combined with a structured-output "
                          "constraint", "tool_choice")
            so = {"schema_type": "regex", "schema": req.forced_regex}
        want_lp = bool(get(body, "logprobs", (bool,), False))
        k = get(body, "top_logprobs", (int,), 0) if want_lp else None
        if get(body, "top_logprobs", (int,)) is not None and not want_lp:
            raise bad("'top_logprobs' needs 'logprobs': true", "top_logprobs")
        params = sampling_params(body, max_tokens_default=None, logprobs=k, so_args=so)
        n = params.n
        stream = bool(get(body, "stream", (bool,), False))
        include_usage = bool((get(body, "stream_options", (dict,), {}) or {}).get("include_usage"))
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        head = {"id": cid, "object": "chat.completion", "created": created, "model": self.model_name}
        ids, queue = await self._start([{"prompt_token_ids": req.prompt_token_ids, "images": req.images}], params)
        gen = self._outputs(ids, queue, request, stream)

        def finish_reason(c: dict, parsed: dict) -> str:
            return "tool_calls" if parsed["tool_calls"] else _finish(c)

        if not stream:
            final = None
            async for _, d in gen:
                if d["finished"]:
                    self._raise_if_failed(d)
                    final = d
            if final is None:
                return Response(status_code=499)
            choices = []
            for c in final["outputs"]:
                parsed = chat.parse(c["text"], req, self.chat_format)
                message = {"role": "assistant", "content": parsed["content"] if parsed["content"] or not parsed["tool_calls"] else None}
                if parsed["reasoning_content"] is not None:
                    message["reasoning_content"] = parsed["reasoning_content"]
                if parsed["tool_calls"]:
                    message["tool_calls"] = parsed["tool_calls"]
                choices.append({"index": c["index"], "message": message, "finish_reason": finish_reason(c, parsed),
                                 "logprobs": responses.chat_logprobs(c, 0, k, self.decode) if k is not None else None})
            c_tok = sum(len(c["token_ids"]) for c in final["outputs"])
            return self._ok({**head, "choices": choices,
                             "usage": responses.usage(len(final["prompt_token_ids"]), c_tok,
                                                      final["num_cached_tokens"])}, endpoint)

        chunk_head = {**head, "object": "chat.completion.chunk"}

        def chunk(index: int, delta: dict, finish: Optional[str] = None, logprobs=None) -> str:
            return _sse({**chunk_head, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                                     "finish_reason": finish}]})

        async def events():
            splitters = [chat.StreamSplitter(req, self.chat_format) for _ in range(n)]
            sent_tok = [0] * n
            for j in range(n):
                yield chunk(j, {"role": "assistant", "content": ""})
            async for _, d in gen:
                self._raise_if_failed(d)
                for c in d["outputs"]:
                    j, sp = c["index"], splitters[c["index"]]
                    dr, dc = sp.deltas(c["text"])
                    lp = responses.chat_logprobs(c, sent_tok[j], k, self.decode) if k is not None else None
                    sent_tok[j] = len(c["token_ids"])
                    if dr:
                        yield chunk(j, {"reasoning_content": dr}, logprobs=lp)
                        lp = None
                    if dc or (lp and lp["content"]):
                        yield chunk(j, {"content": dc}, logprobs=lp)
                    if c["finish_reason"]:
                        parsed = chat.parse(c["text"], req, self.chat_format)
                        rest = parsed["content"][sp.sent_content:]
                        if rest:
                            yield chunk(j, {"content": rest})
                        if parsed["tool_calls"]:
                            calls = [{"index": m, **call} for m, call in enumerate(parsed["tool_calls"])]
                            yield chunk(j, {"tool_calls": calls})
                        yield chunk(j, {}, finish_reason(c, parsed))
                if d["finished"] and include_usage:
                    c_tok = sum(len(c["token_ids"]) for c in d["outputs"])
                    yield _sse({**chunk_head, "choices": [],
                                "usage": responses.usage(len(d["prompt_token_ids"]), c_tok, d["num_cached_tokens"])})

        return self._streaming(events(), endpoint, ids)


def _finish(c: dict) -> str:
    return c["finish_reason"] or "stop"  # the engine's: stop, length, abort
