"""JSON schemas people send: compile rate, exactness and speed of deepinfer, xgrammar and llguidance.

    pip install llguidance xgrammar jsonschema tokenizers   # measurement only, never CI
    python3 bench/structured/eval_schemas.py [--data DIR] [--engines ours,xgrammar,llguidance]
        [--strict] [--timeout 10] [--limit N] [--every K] [--sample 4] [--build build] [--out results.json]

DIR holds schemas with test instances: *.jsonl.gz / *.jsonl lines of {"id", "schema", "tests"} or
*.json files {"schema", "tests"} (JSONSchemaBench's maskbench layout); tests are
[{"valid": bool, "data": ...}]. Default DIR: ../shared/data/jsonschemabench-sample (third-party
data: measured from there, never copied into the repository).

Every engine gets the same V3 vocabulary (129,280 ids, EOS = 1), the same compact JSON text of each
instance (json.dumps with ',' ':') tokenized by the V3 tokenizer, and runs in its own worker
process, killed and restarted when one schema takes longer than --timeout (counted as a timeout).
Per engine it prints: schemas compiled, timeouts; on compiled schemas the valid instances refused
and invalid ones accepted, schemas fully exact; compile time median / p90 / p99 / max (compiled
schemas; the compile's CPU time too, which a loaded host inflates less: the compiling thread's
for ours, the worker process's for the others) and the mask time per token median / p99 along
the valid instances (wall, and the filling thread's CPU time: a preempted call inflates only the
first). One compile thread
each (DEEPINFER_CPU_THREADS=1, xgrammar max_threads=1; llguidance has one). --strict compiles
with no extra keys where additionalProperties is absent (ours: strict_additional_properties,
xgrammar: strict_mode); llguidance has no such switch and stays in its default mode.
--sample N also draws N random constrained outputs per schema compiled by ours and validates the
finished ones with `jsonschema` under the schema's own draft ($schema).
"""
import argparse
import collections
import decimal
import gzip
import json
import os
import pathlib
import select
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOKENIZER = ROOT / "tests/data/tokenizer/deepseek-v3/tokenizer.json"
DEFAULT_DATA = ROOT.parent / "shared/data/jsonschemabench-sample"
VOCAB = 129280
EOS = 1


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def load_schemas(folder):
    out = []
    for path in sorted(pathlib.Path(folder).iterdir()):
        if path.name.endswith((".jsonl.gz", ".jsonl")):
            opener = gzip.open if path.name.endswith(".gz") else open
            with opener(path, "rt") as f:
                for n, line in enumerate(f):
                    if line.strip():
                        rec = json.loads(line)
                        out.append({"id": rec.get("id", f"{path.name}:{n}"), "schema": rec["schema"], "tests": rec.get("tests", [])})
        elif path.suffix == ".json" and path.name != "MANIFEST.json":
            rec = json.loads(path.read_text())
            if isinstance(rec, dict) and "schema" in rec:
                out.append({"id": path.stem, "schema": rec["schema"], "tests": rec.get("tests", [])})
    return out


# ---- workers: one JSON request per line on stdin -> one JSON reply per line ----

def v3_vocab_bytes():
    data = json.loads(TOKENIZER.read_text())
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:] + [256 + n for n in range(256 - len(bs))]
    bs += [b for b in range(256) if b not in bs]
    inv = {chr(c): b for b, c in zip(bs, cs)}
    added = {a["id"] for a in data["added_tokens"]}
    vocab = [b""] * VOCAB
    for tok, i in data["model"]["vocab"].items():
        if i not in added:
            vocab[i] = bytes(inv[ch] for ch in tok)
    return vocab


def xgrammar_worker():
    import xgrammar as xgr
    info = xgr.TokenizerInfo(v3_vocab_bytes(), vocab_type=xgr.VocabType.RAW, vocab_size=VOCAB, stop_token_ids=[EOS])
    bitmask = xgr.allocate_token_bitmask(1, VOCAB)

    def handle(req):
        compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            g = compiler.compile_json_schema(req["schema"], any_whitespace=False, separators=(",", ":"), strict_mode=req["strict"])
        except Exception as e:  # noqa: BLE001  (any compile failure is a data point)
            return {"error": str(e)[:300]}
        out = {"compile_ms": (time.perf_counter() - t0) * 1e3, "compile_cpu_ms": (time.process_time() - c0) * 1e3,
               "results": [], "mask_us": [], "mask_cpu_us": []}
        for ids in req["inputs"]:
            m = xgr.GrammarMatcher(g)
            ok = True
            for i in ids:
                t, c = time.perf_counter(), time.thread_time()
                m.fill_next_token_bitmask(bitmask)
                out["mask_us"].append((time.perf_counter() - t) * 1e6)
                out["mask_cpu_us"].append((time.thread_time() - c) * 1e6)
                if not m.accept_token(i):
                    ok = False
                    break
            out["results"].append(ok and m.accept_token(EOS))
        return out
    return handle


def llguidance_worker():
    import llguidance as llg
    tok = llg.LLTokenizer(TOKENIZER.read_text(), n_vocab=VOCAB, eos_token=EOS)

    def handle(req):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            grammar = llg.LLMatcher.grammar_from_json_schema(req["schema"], defaults={"whitespace_flexible": False})
            m = llg.LLMatcher(tok, grammar, log_level=0)
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)[:300]}
        if m.is_error():
            return {"error": m.get_error()[:300]}
        out = {"compile_ms": (time.perf_counter() - t0) * 1e3, "compile_cpu_ms": (time.process_time() - c0) * 1e3,
               "results": [], "mask_us": [], "mask_cpu_us": []}
        for ids in req["inputs"]:
            m = llg.LLMatcher(tok, grammar, log_level=0)
            ok = True
            for i in ids:
                t, c = time.perf_counter(), time.thread_time()
                m.compute_bitmask()
                out["mask_us"].append((time.perf_counter() - t) * 1e6)
                out["mask_cpu_us"].append((time.thread_time() - c) * 1e6)
                if not m.consume_token(i):
                    ok = False
                    break
            out["results"].append(ok and not m.is_error() and m.is_accepting())
        return out
    return handle


def worker_main(engine):
    handle = {"xgrammar": xgrammar_worker, "llguidance": llguidance_worker}[engine]()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(handle(json.loads(line))), flush=True)


class Worker:
    """An engine in a child process; a request past the timeout kills and restarts it."""

    def __init__(self, engine, build, tool=None):
        if engine == "ours":
            exe = tool or ROOT / build / "tests/structured/grammar_tool"
            self.cmd, self.ready_line = [str(exe)], False
        else:
            self.cmd, self.ready_line = [sys.executable, __file__, "--worker", engine], True
        self.env = dict(os.environ, DEEPINFER_CPU_THREADS="1")
        self.proc = None

    def start(self):
        # Started outside the per-schema timeout: a restart after a timeout must not eat the next
        # schema's time (loading the vocabulary takes seconds on a loaded host).
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=self.env)
        if not self.ready_line:  # ours prints nothing until asked: a trivial request loads it
            self.proc.stdin.write(json.dumps({"cmd": "check", "schema_type": "json", "schema": "{}", "inputs": []}) + "\n")
            self.proc.stdin.flush()
        self.read(600)

    def read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"fatal": "worker died"}

    def request(self, req, timeout):
        if self.proc is None:
            self.start()
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        out = self.read(timeout)
        if out is None or "fatal" in out:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return {"timeout": True} if out is None else {"error": "crash: " + out["fatal"]}
        return out

    def close(self):
        if self.proc:
            self.proc.stdin.close()
            self.proc.wait()


def exact_numbers(text):
    """JSON with every non-integer number as an exact Decimal (floats lose digits past 2**53, and
    a float oracle then misjudges multipleOf or a bound on a long random number)."""
    ctx = decimal.getcontext()
    ctx.prec, ctx.Emax, ctx.Emin = 2000, decimal.MAX_EMAX, decimal.MIN_EMIN
    return json.loads(text, parse_float=decimal.Decimal)


def validator_for(schema, exact=True):
    """jsonschema under the schema's own draft, on exact numbers (schema and instances) or floats."""
    import jsonschema
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if not exact:
        return cls(schema, format_checker=cls.FORMAT_CHECKER)
    if cls not in (jsonschema.Draft3Validator, jsonschema.Draft4Validator):  # from draft 06 on, 1.0 is an integer
        base = cls.TYPE_CHECKER
        checker = base.redefine("integer", lambda c, x: base.is_type(x, "integer")
                                or (isinstance(x, decimal.Decimal) and x.is_finite() and x == x.to_integral_value()))
        cls = jsonschema.validators.extend(cls, type_checker=checker)
    schema = exact_numbers(json.dumps(schema))
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--engines", default="ours,xgrammar,llguidance")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per schema (compile + checks)")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--every", type=int, default=1, help="every K-th schema only (a spread subsample, all subsets)")
    ap.add_argument("--sample", type=int, default=0, help="random constrained outputs per schema (ours)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--tool", help="grammar_tool binary for 'ours' (default: BUILD/tests/structured/grammar_tool)")
    ap.add_argument("--out", help="write per-schema results here (JSON)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args.worker)

    import tokenizers
    tok = tokenizers.Tokenizer.from_file(str(TOKENIZER))
    schemas = load_schemas(args.data)
    schemas = schemas[:: args.every]
    if args.limit:
        schemas = schemas[: args.limit]
    for s in schemas:
        texts = [json.dumps(t["data"], ensure_ascii=False, separators=(",", ":")) for t in s["tests"]]
        s["inputs"] = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        s["text"] = json.dumps(s["schema"], ensure_ascii=False)
    print(f"{len(schemas)} schemas, {sum(len(s['tests']) for s in schemas)} test instances from {args.data};"
          f" mode: {'strict (no extra keys by default)' if args.strict else 'default (extra keys allowed)'}")
    per_schema = collections.defaultdict(dict)
    rows = []
    for engine in args.engines.split(","):
        w = Worker(engine, args.build, args.tool)
        st = collections.Counter()
        compile_ms, cpu_ms, mask_us, mask_cpu, errors = [], [], [], [], collections.Counter()
        t_engine = time.perf_counter()
        for n_done, s in enumerate(schemas):
            if n_done and n_done % 200 == 0:
                print(f"  {engine}: {n_done} schemas, {st['compiled']} compiled", file=sys.stderr, flush=True)
            req = {"cmd": "eval", "schema_type": "json", "schema": s["text"], "inputs": s["inputs"], "strict": args.strict}
            r = w.request(req, args.timeout)
            if r.get("timeout"):
                st["timeout"] += 1
                per_schema[s["id"]][engine] = "timeout"
                continue
            if r.get("error"):
                st["error"] += 1
                errors[r["error"].split(" at ")[0][:90]] += 1
                per_schema[s["id"]][engine] = "error: " + r["error"]
                continue
            st["compiled"] += 1
            compile_ms.append(r["compile_ms"])
            cpu_ms.append(r.get("compile_cpu_ms", float("nan")))
            mask_us += r["mask_us"]
            mask_cpu += r.get("mask_cpu_us", [])
            exact = True
            for t, ok in zip(s["tests"], r["results"]):
                key = ("valid_" if t["valid"] else "invalid_") + ("accepted" if ok else "refused")
                st[key] += 1
                exact &= ok == t["valid"]
            st["exact"] += exact
            per_schema[s["id"]][engine] = "exact" if exact else "inexact"
            per_schema[s["id"]][engine + "_compile_ms"] = round(r["compile_ms"], 2)  # to find the slow ones
            per_schema[s["id"]][engine + "_compile_cpu_ms"] = round(cpu_ms[-1], 2)
            if r.get("mask_cpu_us"):  # the slowest mask of the schema, and how many it filled
                per_schema[s["id"]][engine + "_mask_cpu_us_max"] = round(max(r["mask_cpu_us"]), 1)
                per_schema[s["id"]][engine + "_masks"] = len(r["mask_cpu_us"])
            if engine == "ours" and args.sample:
                sample_check(w, s, args, st)
        w.close()
        rows.append((engine, st, compile_ms, cpu_ms, mask_us, mask_cpu, time.perf_counter() - t_engine))
        print(f"{engine}: {st['compiled']} of {len(schemas)} compiled, {st['timeout']} timeouts,"
              f" {st['valid_refused']} valid refused, {st['invalid_accepted']} invalid accepted", flush=True)
        print_rows(rows[-1:], len(schemas), args)  # at once: a later engine may not finish
        if args.out:  # likewise the per-schema results so far
            pathlib.Path(args.out).write_text(json.dumps(per_schema, indent=1))
        if engine == "ours" or os.environ.get("EVAL_PRINT_ERRORS"):
            print(f"\n{engine}: most common compile errors")
            for e, c in errors.most_common(25):
                print(f"  {c:5d}  {e}")
    print_rows(rows, len(schemas), args)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(per_schema, indent=1))


def print_rows(rows, n, args):
    print(f"\n{'engine':11} {'compiled':>15} {'timeout':>7} {'valid refused':>13} {'invalid accepted':>16} {'exact':>11}"
          f" {'compile ms med/p90/p99/max':>30} {'CPU ms med/p99':>15} {'mask us med/p99':>16} {'CPU us med/p99':>16} {'wall s':>7}")
    for engine, st, cms, cpu, mus, mcpu, wall in rows:
        vr = f"{st['valid_refused']}/{st['valid_refused'] + st['valid_accepted']}"
        ia = f"{st['invalid_accepted']}/{st['invalid_accepted'] + st['invalid_refused']}"
        timing = "/".join(f"{pct(cms, p):.1f}" for p in (0.5, 0.9, 0.99)) + f"/{max(cms, default=float('nan')):.0f}"
        print(f"{engine:11} {st['compiled']:5d} ({100 * st['compiled'] / n:5.1f}%) {st['timeout']:7d} {vr:>13} {ia:>16}"
              f" {st['exact']:5d} ({100 * st['exact'] / max(1, st['compiled']):3.0f}%) {timing:>30}"
              f" {pct(cpu, 0.5):7.1f}/{pct(cpu, 0.99):<7.1f}"
              f" {pct(mus, 0.5):7.1f}/{pct(mus, 0.99):<8.1f} {pct(mcpu, 0.5):7.1f}/{pct(mcpu, 0.99):<8.1f} {wall:7.0f}")
        if engine == "ours" and args.sample:
            print(f"{'':11} random outputs: {st['sample_valid']} finished valid, {st['sample_invalid']} finished invalid,"
                  f" {st['sample_unfinished']} unfinished (token limit), {st['sample_error']} sampling errors", flush=True)


def sample_check(w, s, args, st):
    """Random walks through our mask; every finished output must validate under the schema's draft."""
    r = w.request({"cmd": "sample", "schema_type": "json", "schema": s["text"], "strict": args.strict,
                   "seed": 7, "runs": args.sample, "max_tokens": 300}, args.timeout)
    if "outputs" not in r:
        st["sample_error"] += 1
        print(f"  sampling failed on {s['id']}: {r}")
        return
    try:
        exact, floats = validator_for(s["schema"]), validator_for(s["schema"], exact=False)
    except Exception:  # noqa: BLE001  (a schema jsonschema itself cannot load: not counted)
        return
    for o in r["outputs"]:
        if not o["finished"]:
            st["sample_unfinished"] += 1
            continue
        try:
            try:
                err = next(iter(exact.iter_errors(exact_numbers(o["text"]))), None)
            except decimal.DecimalException:  # a number past Decimal's reach (a huge exponent): floats
                err = next(iter(floats.iter_errors(json.loads(o["text"]))), None)
        except Exception as e:  # noqa: BLE001
            err = e
        if err is None:
            st["sample_valid"] += 1
        else:
            st["sample_invalid"] += 1
            print(f"  invalid output for {s['id']}: {o['text'][:200]!r}: {str(err)[:200]}")


if __name__ == "__main__":
    main()
