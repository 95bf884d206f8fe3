"""Model resolution: DEEPINFER_HF_MODEL_DIR, the Hugging Face cache layout, and downloads from a
fake hub on a local HTTP server (resumable, size and hash checked, HF_HUB_OFFLINE honoured)."""
import hashlib
import http.server
import json
import os
import threading

import pytest

from deepinfer import LLM, SamplingParams, resolve_model
from engine_helpers import GOLDENS, golden

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "fake-org/tiny-a"


class FakeHub(http.server.BaseHTTPRequestHandler):
    files: dict = {}
    corrupt: set = set()
    log: list = []
    edit = None  # a function changing the answer's JSON (a hostile or changed hub)

    def log_message(self, *args):
        pass

    def do_GET(self):
        FakeHub.log.append((self.path, self.headers.get("Range")))
        api = f"/api/models/{REPO}/revision/main"
        if self.path.split("?")[0] == api:
            siblings = []
            for name, data in self.files.items():
                s = {"rfilename": name, "size": len(data),
                     "blobId": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
                if name.endswith(".safetensors"):
                    s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                siblings.append(s)
            answer = {"id": REPO, "sha": COMMIT, "siblings": siblings}
            if FakeHub.edit:
                answer = FakeHub.edit(answer)
            return self.reply(200, (answer if isinstance(answer, str) else json.dumps(answer)).encode())
        prefix = f"/{REPO}/resolve/{COMMIT}/"
        name = self.path[len(prefix):] if self.path.startswith(prefix) else None
        if name not in self.files:
            return self.reply(404, b"not found")
        data = self.files[name]
        if name in self.corrupt:
            data = data[:-1] + bytes([data[-1] ^ 1])
        rng = self.headers.get("Range")
        if rng:
            start = int(rng.split("=")[1].split("-")[0])
            return self.reply(206, data[start:])
        self.reply(200, data)

    def reply(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def hub(monkeypatch, tmp_path):
    FakeHub.files = {f: (GOLDENS / "tiny-a" / f).read_bytes() for f in ("config.json", "model.safetensors")}
    FakeHub.corrupt = set()
    FakeHub.log = []
    FakeHub.edit = None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DEEPINFER_HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("DEEPINFER_HF_MODEL_DIR", raising=False)
    yield tmp_path / "cache"
    server.shutdown()


def test_download_into_the_cache_layout_then_offline(hub, monkeypatch):
    path = resolve_model(REPO)
    root = hub / "models--fake-org--tiny-a"
    assert path == str(root / "snapshots" / COMMIT)
    assert (root / "refs" / "main").read_text().strip() == COMMIT
    link = root / "snapshots" / COMMIT / "model.safetensors"
    assert link.is_symlink() and link.resolve().parent == (root / "blobs").resolve()
    prompt, expect = golden("tiny-a")
    out = LLM(REPO).generate({"prompt_token_ids": prompt}, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True),
                             use_tqdm=False)
    assert out[0].outputs[0].token_ids == expect
    FakeHub.log.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model(REPO) == path  # from the cache, no request
    assert FakeHub.log == []


def test_download_resumes_a_partial_file(hub):
    data = FakeHub.files["model.safetensors"]
    blobs = hub / "models--fake-org--tiny-a" / "blobs"
    blobs.mkdir(parents=True)
    sha = hashlib.sha256(data).hexdigest()
    (blobs / (sha + ".incomplete")).write_bytes(data[:1000])
    resolve_model(REPO)
    assert (blobs / sha).read_bytes() == data
    assert any(r == "bytes=1000-" for _, r in FakeHub.log)


def test_corrupt_download_is_rejected(hub):
    FakeHub.corrupt = {"model.safetensors"}
    with pytest.raises(ValueError, match="corrupt"):
        resolve_model(REPO)


def test_offline_without_cache_and_unknown_repo_fail_clearly(hub, monkeypatch):
    with pytest.raises(ValueError, match="HTTP 404"):
        resolve_model("fake-org/unknown")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE"):
        resolve_model(REPO)


def test_model_dir_variable_and_local_folders(monkeypatch, tmp_path):
    monkeypatch.setenv("DEEPINFER_HF_MODEL_DIR", str(GOLDENS / "tiny-a"))
    assert resolve_model("deepseek-ai/DeepSeek-V4.1-Flash-1017") == str(GOLDENS / "tiny-a")
    monkeypatch.setenv("DEEPINFER_HF_MODEL_DIR", str(GOLDENS))  # a parent holding <name>/
    assert resolve_model("any-org/tiny-b") == str(GOLDENS / "tiny-b")
    assert resolve_model(str(GOLDENS / "tiny-a")) == str(GOLDENS / "tiny-a")
    with pytest.raises(ValueError, match="no config.json"):
        resolve_model(str(tmp_path))


def set_in(answer, path, value):
    *parents, last = path
    node = answer
    for key in parents:
        node = node[key]
    node[last] = value
    return answer


@pytest.mark.parametrize("path, value, needle", [
    (["sha"], 12, "sha = 12: must be a string of 40 lowercase hex digits"),
    (["sha"], "../../../outside", "sha = \"../../../outside\""),
    (["siblings"], {"config.json": 1}, "siblings = .*must be a list of files"),
    (["siblings", 0], "config.json", r"siblings\[0\] = \"config.json\": must be an object"),
    (["siblings", 0, "rfilename"], None, r"siblings\[0\].rfilename = null: must be a string"),
    (["siblings", 0, "rfilename"], "../../../outside.json", r"siblings\[0\].rfilename = \"../../../outside.json\""),
    (["siblings", 0, "rfilename"], "/tmp/outside.json", r"siblings\[0\].rfilename = \"/tmp/outside.json\""),
    (["siblings", 0, "blobId"], "../../../../outside", r"siblings\[0\].blobId"),
    (["siblings", 0, "size"], "12", r"siblings\[0\].size = \"12\": must be a byte count"),
    (["siblings", 1, "lfs"], {"sha256": 5, "size": 1}, r"siblings\[1\].lfs.sha256 = 5"),
    (["siblings", 1, "lfs"], {"sha256": "0" * 64}, r"siblings\[1\].lfs.size is missing"),
])
def test_a_hostile_hub_answer_is_an_error_naming_the_field(hub, tmp_path, path, value, needle):
    FakeHub.edit = lambda answer: set_in(answer, path, value)
    with pytest.raises(ValueError, match="the hub's answer for fake-org/tiny-a: " + needle):
        resolve_model(REPO)
    assert not any(p.name.startswith("outside") for p in tmp_path.rglob("*"))
    assert not any(url.startswith(f"/{REPO}/resolve/") for url, _ in FakeHub.log)  # refused before any download


@pytest.mark.parametrize("body, needle", [("<html>too many requests</html>", "is not JSON"),
                                          ('["a"]', "the answer = .*must be a JSON object")])
def test_an_answer_that_is_not_a_file_list_is_an_error(hub, body, needle):
    FakeHub.edit = lambda answer: body
    with pytest.raises(ValueError, match=needle):
        resolve_model(REPO)


@pytest.mark.parametrize("revision", ["../../x", "/abs", "a//b", "main?x=1"])
def test_revisions_that_leave_the_cache_are_refused(hub, revision):
    with pytest.raises(ValueError, match="is not a branch, tag or commit name"):
        resolve_model(REPO, revision)
    assert FakeHub.log == []
