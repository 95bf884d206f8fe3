"""The two ways eval reaches a model: in process through deepinfer.LLM, or over HTTP through a
`deepinfer serve` (or any OpenAI-compatible server with vLLM's prompt_logprobs and /tokenize)."""
from __future__ import annotations

import json
import urllib.request
from typing import Optional


class LocalBackend:
    def __init__(self, model: str, **engine_args) -> None:
        from deepinfer import LLM
        self.llm = LLM(model, **engine_args)

    def generate(self, prompts: list[str], max_tokens: int, so_args: Optional[dict] = None) -> list[str]:
        from deepinfer import SamplingParams
        sp = SamplingParams(temperature=0, max_tokens=max_tokens, so_args=so_args)
        return [o.outputs[0].text for o in self.llm.generate(prompts, sp, use_tqdm=False)]

    def tokenize(self, text: str) -> list[int]:
        return self.llm.encode(text)

    def prompt_logprobs(self, ids: list[int]) -> list[float]:
        """log p(ids[i] | ids[:i]) for i >= 1."""
        from deepinfer import SamplingParams
        out = self.llm.generate({"prompt_token_ids": ids}, SamplingParams(max_tokens=1, prompt_logprobs=0),
                                use_tqdm=False)[0]
        return [pos[t].logprob for t, pos in zip(ids[1:], out.prompt_logprobs[1:])]


class ServerBackend:
    def __init__(self, url: str, api_key: Optional[str] = None, model: Optional[str] = None) -> None:
        self.url, self.api_key = url.rstrip("/"), api_key
        self.model = model or self._post_get("/v1/models")["data"][0]["id"]

    def _post_get(self, path: str, body: Optional[dict] = None) -> dict:
        req = urllib.request.Request(self.url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        with urllib.request.urlopen(req, timeout=600) as r:
            return json.loads(r.read())

    def generate(self, prompts: list[str], max_tokens: int, so_args: Optional[dict] = None) -> list[str]:
        body = {"model": self.model, "prompt": prompts, "max_tokens": max_tokens, "temperature": 0}
        if so_args:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "task", "schema": so_args["schema"]}}
        choices = sorted(self._post_get("/v1/completions", body)["choices"], key=lambda c: c["index"])
        return [c["text"] for c in choices]

    def tokenize(self, text: str) -> list[int]:
        return self._post_get("/tokenize", {"model": self.model, "prompt": text})["tokens"]

    def prompt_logprobs(self, ids: list[int]) -> list[float]:
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0}
        plp = self._post_get("/v1/completions", body)["choices"][0]["prompt_logprobs"]
        return [pos[str(t)]["logprob"] for t, pos in zip(ids[1:], plp[1:])]
