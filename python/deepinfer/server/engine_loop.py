"""AsyncEngine: one thread steps the C++ engine; asyncio handlers add requests and read their outputs.

step() releases the GIL, so the event loop parses, streams and serializes while the engine computes;
every request joins the engine's continuous batch as soon as it is added.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import threading
from typing import Optional

from ..llm import LLM
from ..sampling_params import SamplingParams

log = logging.getLogger("deepinfer.server")


class AsyncEngine:
    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self._core = llm._engine
        self._streams: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = {}
        self._lock = threading.Lock()  # guards _streams and _aborting
        self._add_lock = threading.Lock()  # add_off_loop: one vision-tower run at a time
        self._aborting: set[str] = set()  # aborted, not yet reported finished
        self._wake = threading.Event()
        self._stop = False
        self.stats: dict = dict(self._core.stats())  # snapshot taken by the engine thread after each step
        self.aborted = 0
        # Totals of finished requests (counted here: a request whose client left finishes unread).
        self.prompt_tokens = self.generation_tokens = 0
        self.finish_reasons: collections.Counter = collections.Counter()
        self._thread = threading.Thread(target=self._loop, name="deepinfer-engine", daemon=True)
        self._thread.start()

    async def add_off_loop(self, request_id: str, prompt: dict, params: SamplingParams,
                           queue: asyncio.Queue) -> None:
        """add() on a worker thread, for prompts with images: the vision tower runs inside the engine's
        add_request, and the event loop keeps streaming the other requests meanwhile. One at a time; a
        cancelled caller still waits for the add, then aborts it, so no request is left unread."""
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(None, self._add_serialized, request_id, prompt, params, queue, loop)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            try:
                await task
            except ValueError:
                raise asyncio.CancelledError from None
            self.abort(request_id)
            raise

    def _add_serialized(self, *args) -> None:
        with self._add_lock:
            self.add(*args)

    def add(self, request_id: str, prompt: dict, params: SamplingParams,
            queue: Optional[asyncio.Queue] = None, loop: Optional[asyncio.AbstractEventLoop] = None) -> asyncio.Queue:
        """Queues a request (prompt: {"prompt": text} or {"prompt_token_ids": [...]}, with "images": the
        image files of its placeholders); its raw outputs (cumulative dicts) arrive on the queue (a new one, or
        the one given, shared by several requests), the last one with finished=True. Raises
        ValueError for a request the engine refuses."""
        queue = queue if queue is not None else asyncio.Queue()
        with self._lock:
            if request_id in self._streams:
                raise ValueError(f"request id '{request_id}' is already running")
            self._streams[request_id] = (loop or asyncio.get_running_loop(), queue)
        try:
            text = prompt.get("prompt", "") or ""
            ids = [int(t) for t in prompt.get("prompt_token_ids", [])]
            self._core.add_request(text, ids, params._to_core(), request_id, prompt.get("images", []))
        except BaseException:
            with self._lock:
                self._streams.pop(request_id, None)
            raise
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        """The request finishes with "abort" at the next step (its queue gets that last output)."""
        with self._lock:
            first = request_id in self._streams and request_id not in self._aborting
            if first:
                self._aborting.add(request_id)
        if first:
            self.aborted += 1
            self._core.abort(request_id)
            self._wake.set()

    def num_running(self) -> int:
        with self._lock:
            return len(self._streams)

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop:
            if not self._core.has_unfinished():
                self._wake.wait(timeout=0.5)
                self._wake.clear()
                continue
            try:
                outs = self._core.step(True)
            except Exception as e:  # the engine reports request failures as outputs; this is a bug
                log.exception("engine step failed")
                self._fail_all(str(e))
                continue
            self.stats = dict(self._core.stats())
            for d in outs:
                self._deliver(d["request_id"], d, d["finished"])

    def _deliver(self, request_id: str, item: dict, finished: bool) -> None:
        with self._lock:
            target: Optional[tuple] = self._streams.pop(request_id, None) if finished else self._streams.get(request_id)
            if finished:
                self._aborting.discard(request_id)
                if target is not None:
                    self._count(item)
        if target is None:
            return
        loop, queue = target
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed (shutdown)
            pass

    def _count(self, d: dict) -> None:
        self.prompt_tokens += len(d["prompt_token_ids"])
        for c in d["outputs"]:
            self.generation_tokens += len(c["token_ids"])
            self.finish_reasons[c["finish_reason"] or "error"] += 1
        if not d["outputs"]:
            self.finish_reasons["error"] += 1

    def _fail_all(self, message: str) -> None:
        with self._lock:
            ids = list(self._streams)
        for rid in ids:
            self._core.abort(rid)
            self._deliver(rid, {"request_id": rid, "finished": True, "error": message, "outputs": [],
                                "prompt_token_ids": [], "prompt": ""}, True)
