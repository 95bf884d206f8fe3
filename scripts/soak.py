#!/usr/bin/env python3
"""Soak with hostile traffic (issue 17): N requests from several client threads into one engine while the
main thread steps it. The mix: good requests (token-id and text prompts, long prompts that prefill in
chunks, prompts behind one shared 200-token prefix (prefix-cache hits), seeded sampling, logprobs,
penalties, stops, n=2, structured output), malformed ones (each must be refused at submission with its error type), good ones aborted at a random moment, and requests with a
schema no other request has (the grammar cache must stay bounded).

Checked: every good request's output (token ids, text, finish reason, of each of its n sequences)
equals the output of the same request run alone in a quiet engine; an aborted one ends "abort" with a
prefix of that output (or finished first, with all of it); a malformed one raises its error and never
shows up in any output; at the end the engine holds no request, no sequence state and no state block,
and its resident memory is back near its value after a warm-up (the growth is printed and bounded).

    scripts/soak.py [--model DIR] [--requests 10000] [--threads 4] [--seed 0] [--num-state-blocks N]

Without --model it builds the demo model (deepinfer make-demo-model). Exit 0 when everything held;
prints one summary line of measured numbers (and --report FILE writes them as JSON).
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if "deepinfer" not in sys.modules and (ROOT / "python" / "deepinfer").is_dir() and not os.environ.get("DEEPINFER_TEST_INSTALLED"):
    sys.path.insert(0, str(ROOT / "python"))
from deepinfer import LLM, SamplingParams  # noqa: E402

MAX_MODEL_LEN = 1024
WORDS = "the a cat dog runs fast slow red blue one two three and or if then sky sea tree house".split()
SHARED_PREFIX = random.Random(17).choices(range(3, 120000), k=200)  # the "shared" requests' system prompt
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"enum": ["x", "y"]}}, "required": ["a", "b"]}


def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def good_template(r, i):
    """One good request (prompt, SamplingParams); seeded whenever it samples, so it is reproducible."""
    kind = r.choices(["ids", "text", "long", "structured", "n2", "shared"], [35, 15, 10, 15, 10, 15])[0]
    kw = dict(temperature=r.choice([0.0, 0.7, 1.0]), top_k=r.choice([0, 5, 50]), top_p=r.choice([1.0, 0.9]),
              seed=i, max_tokens=r.randint(1, 8), ignore_eos=r.random() < 0.7)
    if r.random() < 0.3:
        kw["logprobs"] = r.choice([0, 3])
    if r.random() < 0.2:
        kw.update(presence_penalty=0.5, repetition_penalty=1.2)
    if r.random() < 0.2:
        kw["stop_token_ids"] = [r.randrange(3, 1000) for _ in range(3)]
    if r.random() < 0.1:
        kw["min_tokens"] = 1
    if kind == "text":
        prompt = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 30)))
        kw["stop"] = [r.choice(WORDS)]
    elif kind == "shared":  # one long system prompt in front of its own question: prefix-cache hits
        prompt = {"prompt_token_ids": SHARED_PREFIX + [r.randrange(3, 120000) for _ in range(r.randint(1, 60))]}
    elif kind == "long":
        prompt = {"prompt_token_ids": [r.randrange(3, 120000) for _ in range(r.randint(400, MAX_MODEL_LEN - 16))]}
    else:
        prompt = {"prompt_token_ids": [r.randrange(3, 120000) for _ in range(r.randint(1, 48))]}
    if kind == "structured":
        kw["max_tokens"] = r.randint(4, 24)
        kw["so_args"] = r.choice([{"schema_type": "json_schema", "schema": SCHEMA},
                                  {"schema_type": "regex", "schema": "[a-z]{1,6}( [a-z]{1,6})?"},
                                  {"schema_type": "choice", "schema": ["yes", "no", "maybe"]}])
    if kind == "n2":
        kw.update(n=2, temperature=0.8)
    return kind, prompt, SamplingParams(**kw)


# A malformed request: (prompt, params given as a dict so add_request validates them, expected error type).
MALFORMED = [
    ("token id outside the vocabulary", {"prompt_token_ids": [5, 10 ** 6]}, {"max_tokens": 2}, ValueError),
    ("token id that is a float", {"prompt_token_ids": [5, 2.5]}, {"max_tokens": 2}, TypeError),
    ("empty prompt", {"prompt_token_ids": []}, {"max_tokens": 2}, ValueError),
    ("prompt above max_model_len", {"prompt_token_ids": [5] * (MAX_MODEL_LEN + 50)}, {"max_tokens": 2}, ValueError),
    ("logprobs above max_logprobs", {"prompt_token_ids": [5]}, {"logprobs": 500}, ValueError),
    ("n above max_num_seqs", {"prompt_token_ids": [5]}, {"n": 10 ** 5}, ValueError),
    ("negative temperature", "hello", {"temperature": -1.0}, ValueError),
    ("top_p above 1", "hello", {"top_p": 2.0}, ValueError),
    ("unknown sampling field", "hello", {"max_tokenz": 3}, TypeError),
    ("seed below 0", "hello", {"seed": -1}, ValueError),
    ("max_tokens past int64", "hello", {"max_tokens": 10 ** 30}, ValueError),
    ("schema $ref cycle", "hello", {"so_args": {"schema_type": "json_schema", "schema": {"$ref": "#"}}}, ValueError),
    ("invalid regex", "hello", {"so_args": {"schema_type": "regex", "schema": "(ab"}}, ValueError),
    ("unknown schema type", "hello", {"so_args": {"schema_type": "xml", "schema": "<a/>"}}, ValueError),
    ("lone surrogate", "bad \ud800 text", {"max_tokens": 2}, ValueError),
    ("prompt of the wrong type", 12, {"max_tokens": 2}, TypeError),
]


def outcome(o):
    return [(c.token_ids, c.text, c.finish_reason) for c in o.outputs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--templates", type=int, default=256, help="distinct good requests (each runs alone once)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num-state-blocks", type=int, default=0, help="a tight budget makes the scheduler preempt")
    ap.add_argument("--max-num-batched-tokens", type=int, default=256)
    ap.add_argument("--batch-invariant", type=int, default=1, help="0: the default kernels (outputs may depend on the batch)")
    ap.add_argument("--prefix-caching", type=int, default=1, help="0: the soaked engine runs without prefix caching")
    ap.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    ap.add_argument("--report", default="")
    a = ap.parse_args()
    t0 = time.time()
    model = a.model
    if not model:
        model = str(pathlib.Path(tempfile.mkdtemp(prefix="soak.")) / "demo")
        cli = [sys.executable, "-m", "deepinfer"]
        subprocess.run(cli + ["make-demo-model", model], check=True, capture_output=True)
    opts = dict(max_model_len=MAX_MODEL_LEN, max_num_seqs=16, max_num_batched_tokens=a.max_num_batched_tokens,
                batch_invariant=bool(a.batch_invariant))
    r = random.Random(a.seed)
    templates = [good_template(r, i) for i in range(a.templates)]

    # The expected output of each template: run alone in a quiet engine.
    quiet = LLM(model, async_scheduling=False, **opts)
    solo = [outcome(quiet.generate(p, sp, use_tqdm=False)[0]) for _, p, sp in templates]
    del quiet
    t_solo = time.time() - t0

    llm = LLM(model, num_state_blocks=a.num_state_blocks or None, enable_prefix_caching=bool(a.prefix_caching), **opts)
    eng = llm.llm_engine
    # The request stream: (id, kind, template or malformed index); kinds: good, abort, bad.
    plan = []
    for k in range(a.requests):
        x = r.random()
        kind = "bad" if x < 0.2 else "abort" if x < 0.3 else "fresh" if x < 0.35 else "good"
        plan.append((f"r{k}", kind, r.randrange(len(MALFORMED) if kind == "bad" else len(templates))))
    warm = min(200, a.requests // 10)
    good, aborted, fresh, failures = {}, set(), set(), []
    refused = {}
    lock = threading.Lock()

    def client(t, items):
        cr = random.Random(a.seed * 1000 + t)
        pending_aborts = []
        for rid, kind, idx in items:
            try:
                if kind == "bad":
                    what, prompt, params, err = MALFORMED[idx]
                    try:
                        eng.add_request(rid, prompt, params)
                    except err as e:
                        with lock:
                            refused[what] = refused.get(what, 0) + 1
                        if not str(e):
                            failures.append(f"{rid} ({what}): empty error message")
                        continue
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"{rid} ({what}): raised {type(e).__name__} ({e}), not {err.__name__}")
                        continue
                    failures.append(f"{rid} ({what}): accepted")
                    continue
                if kind == "fresh":  # a schema no other request has: compiled, then evicted from the cache
                    schema = {"type": "object", "properties": {rid: {"type": "string"}}, "required": [rid]}
                    with lock:
                        fresh.add(rid)
                    eng.add_request(rid, "x", SamplingParams(max_tokens=2, so_args={"schema_type": "json_schema",
                                                                                   "schema": schema}))
                    continue
                _, prompt, params = templates[idx]
                with lock:
                    good[rid] = idx
                    if kind == "abort":
                        aborted.add(rid)
                eng.add_request(rid, prompt, params)
                if kind == "abort":
                    pending_aborts.append((rid, cr.randint(0, 6)))
            except Exception as e:  # noqa: BLE001
                failures.append(f"{rid}: client error {type(e).__name__}: {e}")
            # Aborts land a few submissions later, so some requests have run some steps by then.
            keep = []
            for rid2, wait in pending_aborts:
                if wait == 0:
                    eng.abort_request(rid2)
                else:
                    keep.append((rid2, wait - 1))
            pending_aborts = keep
            time.sleep(cr.random() * 0.004)
        for rid2, _ in pending_aborts:
            eng.abort_request(rid2)

    def run(items_all):
        """Clients add items_all while this thread steps; returns the finished outputs by id."""
        chunks = [items_all[t::a.threads] for t in range(a.threads)]
        threads = [threading.Thread(target=client, args=(t, chunks[t])) for t in range(a.threads)]
        for th in threads:
            th.start()
        finished = {}
        while True:
            for o in eng.step():
                if o.finished:
                    if o.request_id in finished:
                        failures.append(f"{o.request_id}: finished twice")
                    finished[o.request_id] = o
            if not any(th.is_alive() for th in threads) and not eng.has_unfinished_requests():
                break
        for th in threads:
            th.join()
        return finished

    finished = run(plan[:warm])
    rss_start = rss_mib()
    t1 = time.time()
    finished.update(run(plan[warm:]))
    t_soak = time.time() - t1
    rss_end = rss_mib()
    stats = llm.stats()

    mismatched, n_aborted_early = [], 0
    for rid, idx in good.items():
        o = finished.get(rid)
        if o is None:
            failures.append(f"{rid}: never finished")
            continue
        if o.error:
            failures.append(f"{rid}: failed with {o.error}")
            continue
        got, want = outcome(o), solo[idx]
        if rid in aborted and any(c[2] == "abort" for c in got):
            n_aborted_early += 1
            if any(g[0] != w[0][:len(g[0])] for g, w in zip(got, want)):
                mismatched.append((rid, templates[idx][0], got, want))
        elif got != want:
            mismatched.append((rid, templates[idx][0], got, want))
    for rid in fresh:
        o = finished.get(rid)
        if o is None or o.error or o.outputs[0].finish_reason not in ("length", "stop"):
            failures.append(f"{rid} (fresh schema): {'never finished' if o is None else o.error or o.outputs[0].finish_reason}")
    bad_ids = {rid for rid, kind, _ in plan if kind == "bad"}
    if bad_ids & set(finished):
        failures.append(f"{len(bad_ids & set(finished))} refused requests produced outputs")
    for key in ("state_blocks_reserved", "live_states"):
        if stats[key] != 0:
            failures.append(f"engine idle but {key} = {stats[key]}")
    # An idle engine's pool holds only what prefix-cache snapshots keep (bounded by the budget).
    if stats["state_blocks_allocated"] > stats.get("prefix_cached_blocks", 0):
        failures.append(f"engine idle but {stats['state_blocks_allocated']} state blocks allocated, "
                        f"{stats.get('prefix_cached_blocks', 0)} of them held by prefix snapshots")
    if llm._engine.has_unfinished():
        failures.append("engine idle but has unfinished requests")
    if rss_end - rss_start > a.max_rss_growth_mib:
        failures.append(f"resident memory grew by {rss_end - rss_start:.1f} MiB (limit {a.max_rss_growth_mib})")
    for rid, kind, got, want in mismatched[:10]:
        print(f"MISMATCH {rid} ({kind}): got {got} want {want}")
    for f in failures[:20]:
        print("FAIL", f)

    kinds = {}
    for rid, idx in good.items():
        k = templates[idx][0]
        kinds[k] = kinds.get(k, 0) + 1
    report = dict(requests=a.requests, threads=a.threads, templates=a.templates, seed=a.seed,
                  num_state_blocks=a.num_state_blocks, batch_invariant=a.batch_invariant, good=len(good) - len(aborted), aborted=len(aborted),
                  aborted_before_the_end=n_aborted_early, fresh_schemas=len(fresh), refused=sum(refused.values()),
                  refused_kinds=len(refused), good_kinds=kinds, mismatched=len(mismatched), failures=len(failures),
                  preemptions=stats["preemptions"], steps=stats["steps"], forward_tokens=stats["forward_tokens"],
                  rss_start_mib=round(rss_start, 1), rss_end_mib=round(rss_end, 1),
                  state_blocks_end=stats["state_blocks_allocated"], prefix_cached_blocks=stats.get("prefix_cached_blocks", 0),
                  prefix_hits=stats.get("prefix_hits", 0), prefix_snapshots=stats.get("prefix_snapshots", 0),
                  prefix_evictions=stats.get("prefix_evictions", 0), solo_s=round(t_solo, 1), soak_s=round(t_soak, 1))
    print("soak:", json.dumps(report))
    if a.report:
        pathlib.Path(a.report).write_text(json.dumps(report, indent=1))
    return 1 if failures or mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
