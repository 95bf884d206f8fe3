#!/usr/bin/env python3
"""Soak of the OpenAI server path (issue 17): N HTTP requests from several client threads into one
`deepinfer serve` (batch-invariant mode, a state budget that preempts). The mix: good requests
(/v1/completions and /v1/chat/completions, text and token-id prompts, long prompts that prefill in
chunks, prompts behind one shared prefix, seeded sampling, logprobs, n=2, stops, structured output,
streamed or not), malformed ones (each must get its 4xx with an OpenAI error body), and good ones whose
client goes away mid-stream or before the answer (the server must abort them).

Checked: every good answer (text, finish reason, logprobs of each choice) equals the same request's
answer on the quiet server before the soak; an abandoned stream saw a prefix of it; every malformed
request got its status and an error message; afterwards /metrics shows no request, no live state, no
reserved state memory and no block outside the prefix cache, the server still answers as before, and
its resident memory is back near its value after a warm-up (growth printed and bounded).

    scripts/soak_server.py [--model DIR] [--requests 2000] [--threads 8] [--seed 0] [--num-state-blocks N]

Without --model it builds the demo model (deepinfer make-demo-model). Exit 0 when everything held; one
summary line of measured numbers (and --report FILE writes them as JSON).
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
KEY, NAME, MAX_MODEL_LEN = "soak-key", "soak", 1024
WORDS = "the a cat dog runs fast slow red blue one two three and or if then sky sea tree house".split()
SHARED_PREFIX = random.Random(17).choices(range(3, 120000), k=200)
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a", "b"]}
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"


def call(port, path, body=None, key=KEY, raw=None, method="POST", timeout=300):
    """(status, parsed JSON or text) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    try:
        conn.request(method, path, body=raw if raw is not None else None if body is None else json.dumps(body),
                     headers=headers)
        r = conn.getresponse()
        data = r.read().decode()
    finally:
        conn.close()  # also when the timeout gave up waiting: the server sees the client gone
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def stream(port, path, body, leave_after=None):
    """(status, events) of a streamed request; leave_after=k closes the connection after k events."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    r = conn.getresponse()
    events = []
    if r.status != 200:
        data = r.read().decode()
        conn.close()
        return r.status, [data]
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        events.append(json.loads(line[6:]))
        if leave_after is not None and len(events) >= leave_after:
            break
    conn.close()  # mid-stream: the server sees the client gone at its next write
    return r.status, events


def answer(path, status, obj, streamed):
    """What must not change: per choice index, (text or content, reasoning, finish reason, token logprobs)."""
    if status != 200:
        return ("status", status, str(obj)[:200])
    out = {}
    for ev in (obj if streamed else [obj]):
        if "error" in ev:
            return ("error", ev["error"].get("message"))
        for ch in ev.get("choices", []):
            o = out.setdefault(ch["index"], {"text": "", "reasoning": "", "finish": None, "lp": []})
            part = ch.get("delta", ch.get("message")) if path == CHAT else ch
            o["text"] += (part.get("text") if path == CMPL else part.get("content")) or ""
            o["reasoning"] += (part.get("reasoning_content") or "") if path == CHAT else ""
            o["finish"] = ch.get("finish_reason") or o["finish"]
            lp = ch.get("logprobs")
            if lp:
                o["lp"] += lp.get("token_logprobs") or [t["logprob"] for t in lp.get("content") or []]
    return sorted((i, o["text"], o["reasoning"], o["finish"], o["lp"]) for i, o in out.items())


def good_template(r, i):
    """(kind, path, body, streamed): seeded whenever it samples, so it is reproducible."""
    kind = r.choices(["text", "ids", "long", "shared", "n2", "json", "chat", "chat_json"], [15, 20, 8, 10, 8, 9, 20, 10])[0]
    body = dict(model=NAME, temperature=r.choice([0.0, 0.7, 1.0]), top_p=r.choice([1.0, 0.9]), seed=i,
                max_tokens=r.randint(1, 8), ignore_eos=r.random() < 0.7, top_k=r.choice([0, 5, 50]))
    path = CMPL
    if kind == "text":
        body.update(prompt=" ".join(r.choice(WORDS) for _ in range(r.randint(1, 30))), stop=[r.choice(WORDS)])
    elif kind == "ids":
        body["prompt"] = [r.randrange(3, 120000) for _ in range(r.randint(1, 48))]
    elif kind == "long":
        body["prompt"] = [r.randrange(3, 120000) for _ in range(r.randint(400, MAX_MODEL_LEN - 16))]
    elif kind == "shared":
        body["prompt"] = SHARED_PREFIX + [r.randrange(3, 120000) for _ in range(r.randint(1, 60))]
    elif kind == "n2":
        body.update(prompt=" ".join(r.choices(WORDS, k=5)), n=2, temperature=0.8)
    elif kind == "json":
        body.update(prompt="json: ", max_tokens=r.randint(4, 24), response_format={
            "type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}})
    else:
        path = CHAT
        body["messages"] = [{"role": "user", "content": " ".join(r.choices(WORDS, k=r.randint(1, 20)))}]
        if kind == "chat_json":
            body.update(max_tokens=r.randint(4, 24), guided_regex="[a-z]{1,6}( [a-z]{1,6})?")
    if r.random() < 0.3:
        if path == CMPL:
            body["logprobs"] = r.choice([0, 2])
        else:
            body.update(logprobs=True, top_logprobs=r.choice([0, 2]))
    return kind, path, body, r.random() < 0.5


# (what, path, body, raw bytes, key, expected status)
MALFORMED = [
    ("not JSON", CMPL, None, b"{not json", KEY, 400),
    ("a JSON array", CMPL, None, b"[1, 2]", KEY, 400),
    ("invalid UTF-8", CMPL, None, b'{"prompt": "\xff\xfe"}', KEY, 400),
    ("no API key", CMPL, {"prompt": "hi"}, None, None, 401),
    ("a wrong API key", CMPL, {"prompt": "hi"}, None, "nope", 401),
    ("an unknown model", CMPL, {"model": "gpt-9", "prompt": "hi"}, None, KEY, 404),
    ("no prompt", CMPL, {"max_tokens": 2}, None, KEY, 400),
    ("a prompt of the wrong type", CMPL, {"prompt": 12}, None, KEY, 400),
    ("a token id outside the vocabulary", CMPL, {"prompt": [5, 10 ** 6]}, None, KEY, 400),
    ("a float token id", CMPL, {"prompt": [5, 2.5]}, None, KEY, 400),
    ("a prompt above max_model_len", CMPL, {"prompt": [5] * (MAX_MODEL_LEN + 50)}, None, KEY, 400),
    ("max_tokens -1", CMPL, {"prompt": "hi", "max_tokens": -1}, None, KEY, 400),
    ("max_tokens a string", CMPL, {"prompt": "hi", "max_tokens": "3"}, None, KEY, 400),
    ("max_tokens past int64", CMPL, {"prompt": "hi", "max_tokens": 10 ** 30}, None, KEY, 400),
    ("a negative temperature", CMPL, {"prompt": "hi", "temperature": -1}, None, KEY, 400),
    ("top_p above 1", CMPL, {"prompt": "hi", "top_p": 2}, None, KEY, 400),
    ("logprobs above max_logprobs", CMPL, {"prompt": "hi", "logprobs": 500}, None, KEY, 400),
    ("n above max_num_seqs", CMPL, {"prompt": "hi", "n": 10 ** 5}, None, KEY, 400),
    ("a seed past int64", CMPL, {"prompt": "hi", "seed": -(2 ** 70)}, None, KEY, 400),
    ("echo", CMPL, {"prompt": "hi", "echo": True}, None, KEY, 400),
    ("a $ref cycle", CMPL, {"prompt": "hi", "response_format": {"type": "json_schema", "json_schema": {
        "name": "c", "schema": {"$ref": "#"}}}}, None, KEY, 400),
    ("an invalid regex", CMPL, {"prompt": "hi", "guided_regex": "(ab"}, None, KEY, 400),
    ("a lone surrogate", CMPL, None, b'{"prompt": "bad \\ud800 text"}', KEY, 400),
    ("a non-numeric logit bias", CMPL, {"prompt": "hi", "logit_bias": {"5": "up"}}, None, KEY, 400),
    ("vllm_xargs", CMPL, {"prompt": "hi", "vllm_xargs": {"x": 1}}, None, KEY, 400),
    ("messages not a list", CHAT, {"messages": "hi"}, None, KEY, 400),
    ("an unknown content part", CHAT, {"messages": [{"role": "user", "content": [{"type": "audio", "x": 1}]}]}, None, KEY, 400),
    ("an http image URL", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}]}]}, None, KEY, 400),
]


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def metrics(port):
    text = call(port, "/metrics", method="GET", key=None)[1]
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(deepinfer_[a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)}


def package_env(**extra):
    """The environment of the server and the demo-model command: the source tree's package first, unless
    the package under test is an installed one (DEEPINFER_TEST_INSTALLED: test.sh's venv, the sanitized
    extension of scripts/sanitize.sh), which the source tree's copy, without its extension, would shadow."""
    env = {**os.environ, **extra}
    if not env.get("DEEPINFER_TEST_INSTALLED"):
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def start_server(model, a, log):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = package_env(DEEPINFER_BATCH_INVARIANT="1")
    cmd = [sys.executable, "-m", "deepinfer", "serve", model, "--port", str(port), "--api-key", KEY,
           "--served-model-name", NAME, "--log-level", "warning", "--max-model-len", str(MAX_MODEL_LEN),
           "--max-num-seqs", "16", "--max-num-batched-tokens", "256"]
    if a.num_state_blocks:
        cmd += ["--num-state-blocks", str(a.num_state_blocks)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode})")
        try:
            if call(port, "/health", method="GET", key=None, timeout=2)[0] == 200:
                return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("the server did not come up within 300 s")
        time.sleep(0.25)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--templates", type=int, default=128, help="distinct good requests (each answered alone once)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-state-blocks", type=int, default=80, help="the server's state budget (0: unlimited)")
    ap.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    ap.add_argument("--report", default="")
    a = ap.parse_args()
    t0 = time.time()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="soak_server."))
    model = a.model
    if not model:
        model = str(tmp / "demo")
        subprocess.run([sys.executable, "-m", "deepinfer", "make-demo-model", model], check=True, capture_output=True,
                       env=package_env())
    log = open(tmp / "server.log", "w")
    proc, port = start_server(model, a, log)
    r = random.Random(a.seed)
    templates = [good_template(r, i) for i in range(a.templates)]

    def ask(t):
        _, path, body, streamed = t
        if streamed:
            status, events = stream(port, path, body)
            return answer(path, status, events, True)
        status, obj = call(port, path, body)
        return answer(path, status, obj, False)

    solo = [ask(t) for t in templates]  # the quiet server, one request at a time
    failures = [f"template {i} ({t[0]}): {s}" for i, (t, s) in enumerate(zip(templates, solo)) if s and s[0] in ("status", "error")]
    t_solo = time.time() - t0

    plan = []
    for k in range(a.requests):
        x = r.random()
        kind = "bad" if x < 0.2 else "leave" if x < 0.3 else "good"
        plan.append((k, kind, r.randrange(len(MALFORMED) if kind == "bad" else len(templates))))
    counts = {"good": 0, "bad": 0, "leave": 0, "mismatched": 0, "left_streams": 0, "left_plain": 0}
    refused = {}
    lock = threading.Lock()

    def client(items):
        for k, kind, idx in items:
            try:
                if kind == "bad":
                    what, path, body, raw, key, want = MALFORMED[idx]
                    status, obj = call(port, path, body, key=key, raw=raw)
                    msg = obj.get("error", {}).get("message") if isinstance(obj, dict) else None
                    with lock:
                        counts["bad"] += 1
                        refused[what] = refused.get(what, 0) + 1
                        if status != want or not msg:
                            failures.append(f"r{k} ({what}): {status} {str(obj)[:200]}, want {want} with a message")
                    continue
                t = templates[idx]
                if kind == "leave":  # the client goes away: mid-stream, or before a plain answer
                    _, path, body, _ = t
                    cr = random.Random(k)
                    if cr.random() < 0.7:
                        status, events = stream(port, path, body, leave_after=cr.randint(0, 3))
                        got, want = answer(path, status, events, True), {c[0]: c for c in solo[idx]}
                        with lock:
                            counts["leave"] += 1
                            counts["left_streams"] += 1
                            for i, text, reasoning, _, lp in got:  # what it saw is the start of the whole answer
                                w = want.get(i)
                                if not (w and w[1].startswith(text) and w[2].startswith(reasoning) and w[4][:len(lp)] == lp):
                                    failures.append(f"r{k} ({t[0]}, left): saw {got}, not a prefix of {solo[idx]}")
                        continue
                    try:
                        call(port, path, body, timeout=0.05)
                    except (socket.timeout, TimeoutError):
                        pass
                    with lock:
                        counts["leave"] += 1
                        counts["left_plain"] += 1
                    continue
                got = ask(t)
                with lock:
                    counts["good"] += 1
                    if got != solo[idx]:
                        counts["mismatched"] += 1
                        failures.append(f"r{k} ({t[0]}): {got} != solo {solo[idx]}")
            except Exception as e:  # noqa: BLE001
                with lock:
                    failures.append(f"r{k} ({kind}): client error {type(e).__name__}: {e}")

    def run(items):
        threads = [threading.Thread(target=client, args=(items[t::a.threads],)) for t in range(a.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()

    def settle():
        """/metrics once the server has noticed every client that left (a plain answer's check is 1 s)."""
        deadline = time.monotonic() + 60
        while True:
            m = metrics(port)
            if (m.get("deepinfer_num_requests_running", 1) == 0 and m.get("deepinfer_engine_live_states", 1) == 0) \
                    or time.monotonic() > deadline:
                return m
            time.sleep(0.5)

    warm = min(200, a.requests // 10)
    run(plan[:warm])
    settle()
    rss_start = rss_mib(proc.pid)
    t1 = time.time()
    run(plan[warm:])
    t_soak = time.time() - t1
    m = settle()
    rss_end = rss_mib(proc.pid)
    for key, want in (("deepinfer_num_requests_running", 0), ("deepinfer_num_requests_waiting", 0),
                      ("deepinfer_engine_live_states", 0), ("deepinfer_state_memory_reserved_bytes", 0),
                      ("deepinfer_engine_waiting_seqs", 0), ("deepinfer_engine_running_seqs", 0)):
        if m.get(key) != want:
            failures.append(f"server idle but {key} = {m.get(key)}")
    used, budget = m.get("deepinfer_state_memory_used_bytes", 0), m.get("deepinfer_state_memory_budget_bytes", 0)
    if a.num_state_blocks:
        block = budget / a.num_state_blocks
        if used > m.get("deepinfer_prefix_cache_blocks", 0) * block:
            failures.append(f"server idle but {used} bytes of state in use, more than the prefix cache's blocks")
    after = [ask(t) for t in templates[:8]]  # still serving, still the same answers
    failures += [f"template {i} after the soak: {g} != {s}" for i, (g, s) in enumerate(zip(after, solo)) if g != s]
    if rss_end - rss_start > a.max_rss_growth_mib:
        failures.append(f"resident memory grew by {rss_end - rss_start:.1f} MiB (limit {a.max_rss_growth_mib})")
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    for f in failures[:20]:
        print("FAIL", f)
    if failures:
        print((tmp / "server.log").read_text()[-3000:])
    kinds = {}
    for _, kind, idx in plan:
        if kind == "good":
            kinds[templates[idx][0]] = kinds.get(templates[idx][0], 0) + 1
    report = dict(requests=a.requests, threads=a.threads, templates=a.templates, seed=a.seed,
                  num_state_blocks=a.num_state_blocks, **counts, refused_kinds=len(refused), good_kinds=kinds,
                  failures=len(failures), aborted=m.get("deepinfer_aborted_requests_total"),
                  finished_abort=m.get('deepinfer_request_finished_total{reason="abort"}'),
                  preemptions=m.get("deepinfer_engine_preemptions_total"), steps=m.get("deepinfer_engine_steps_total"),
                  prefix_hits=m.get("deepinfer_engine_prefix_hits_total"),
                  rss_start_mib=round(rss_start, 1), rss_end_mib=round(rss_end, 1),
                  state_budget_bytes=budget, state_used_end_bytes=used,
                  prefix_cache_blocks=m.get("deepinfer_prefix_cache_blocks"),
                  solo_s=round(t_solo, 1), soak_s=round(t_soak, 1))
    print("soak_server:", json.dumps(report))
    if a.report:
        pathlib.Path(a.report).write_text(json.dumps(report, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
