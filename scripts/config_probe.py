#!/usr/bin/env python3
"""Hostile config.json values against a model folder (issue 17): every field of the config gets each of
a set of hostile values (zero, negative, huge, fractional, wrong type, null, missing), one at a time; the
engine must either refuse the folder at load with a ValueError naming the field, or load it and serve a
request. A crash of the process (signal, abort) is a failure; so is an error that does not name the field.
Values that load and serve are listed as "accepted", to be read: a field that changes semantics must not
accept nonsense silently.

    scripts/config_probe.py MODEL_DIR [--fields a,b] [--out report.json]

The cases run in a worker process that is restarted after a crash, so one crash does not hide the next.
"""
import argparse
import copy
import json
import os
import pathlib
import subprocess
import sys
import tempfile

MISSING = object()
HOSTILE = [0, -1, 2 ** 31, 2.5, "x", None, MISSING]


def worker():
    """Reads {"dir": ...} lines; prints one result line each: loaded (+ generated ids) or the error."""
    from deepinfer import LLM, SamplingParams
    for line in sys.stdin:
        case = json.loads(line)
        try:
            llm = LLM(case["dir"], max_model_len=256, allow_long_max_model_len=True)
            out = llm.generate([{"prompt_token_ids": list(range(5, 45))}, "Hello"],
                               SamplingParams(max_tokens=3, temperature=0), use_tqdm=False)
            res = {"status": "accepted", "detail": [o.outputs[0].token_ids for o in out]}
            del llm
        except ValueError as e:
            res = {"status": "refused", "detail": str(e)[:400]}
        except Exception as e:  # noqa: BLE001  (any other type is a finding: the API promises ValueError)
            res = {"status": type(e).__name__, "detail": str(e)[:400]}
        print(json.dumps(res), flush=True)


def cases(cfg, only):
    """(path of keys, value) for every scalar or list field of the config, and each hostile value."""
    def walk(node, path):
        for k, v in node.items():
            p = path + [k]
            if isinstance(v, dict) and k in ("text_config", "quantization_config", "rope_scaling", "vision_config"):
                yield from walk(v, p)
                continue
            if only and k not in only:
                continue
            if not path and "text_config" in cfg and k != "model_type":
                continue  # the root's scalars of a V4.1 folder: text_config holds the model's fields
            for h in HOSTILE:
                yield p, h
            if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
                for i in range(len(v)):
                    for h in (-1, 10 ** 6):
                        yield p + [i], h
    yield from walk(cfg, [])


def edited(cfg, path, value):
    out = copy.deepcopy(cfg)
    node = out
    for k in path[:-1]:
        node = node[k]
    if value is MISSING:
        node.pop(path[-1]) if isinstance(node, dict) else node.pop(path[-1])
    else:
        node[path[-1]] = value
    return out


def name(path):
    return ".".join(str(p) for p in path)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker()
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--fields", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    src = pathlib.Path(a.model)
    cfg = json.loads((src / "config.json").read_text())
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="config_probe."))
    for f in src.iterdir():
        if f.name != "config.json":
            os.symlink(f.resolve(), tmp / f.name)
    todo = list(cases(cfg, set(filter(None, a.fields.split(",")))))
    results, proc = [], None
    for path, value in todo:
        (tmp / "config.json").write_text(json.dumps(edited(cfg, path, value)))
        if proc is None:
            proc = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        proc.stdin.write(json.dumps({"dir": str(tmp)}) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        shown = "<missing>" if value is MISSING else json.dumps(value)
        if not line:  # the worker died on this case
            proc.wait()
            res = {"status": "CRASH", "detail": f"exit {proc.returncode}: {proc.stderr.read()[-400:]}"}
            proc = None
        else:
            res = json.loads(line)
        res.update(field=name(path), value=shown)
        if res["status"] == "refused" and "not valid JSON" not in res["detail"] \
                and not any(str(p) in res["detail"] for p in path if not isinstance(p, int)):
            res["status"] = "UNNAMED"
        results.append(res)
        if res["status"] != "refused":
            print(f"{res['status']:>10}  {res['field']} = {shown}: {str(res['detail'])[:200]}", flush=True)
    if proc:
        proc.stdin.close()
        proc.wait()
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"config_probe: {len(results)} cases: {counts}")
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=1))
    return 1 if any(r["status"] not in ("refused", "accepted") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
