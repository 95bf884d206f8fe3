"""Images in /v1/chat/completions (OpenAI image_url parts) on `deepinfer serve` of the demo model: the
image reaches the model, and bad images are 400s that leave the server and other requests running."""
import base64
import concurrent.futures
import pathlib
import shutil

import pytest

openai = pytest.importorskip("openai")

from conftest import API_KEY as KEY, SERVED_NAME as NAME, serve  # noqa: E402
from test_server import raw  # noqa: E402

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "data" / "vision"
GRAY, INTER = IMAGES / "gray8.png", IMAGES / "interlaced.png"


def data_url(path: pathlib.Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def ask(url, text="What is in this image?"):
    return [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0, timeout=120)


def first_logprob(client, messages) -> tuple:
    r = client.chat.completions.create(model=NAME, messages=messages, max_tokens=4, temperature=0, logprobs=True,
                                       extra_body={"ignore_eos": True})
    return r.choices[0].logprobs.content[0].logprob, r.choices[0].message.content, r.usage.prompt_tokens


def test_an_image_reaches_the_model(client):
    gray, gray_again, inter = (first_logprob(client, ask(data_url(p))) for p in (GRAY, GRAY, INTER))
    text_only = first_logprob(client, [{"role": "user", "content": "What is in this image?"}])
    assert gray == gray_again
    assert gray[2] > text_only[2] + 1  # the image span is in the prompt
    assert gray[0] != inter[0] and gray[0] != text_only[0]


def test_a_streamed_image_chat_matches_the_unstreamed(client):
    kw = dict(model=NAME, messages=ask(data_url(GRAY)), max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    full = client.chat.completions.create(**kw)
    text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw)
                   if c.choices)
    assert text == full.choices[0].message.content


BAD = [
    ("data:image/png;base64,iVBO@@@@", "invalid character"),
    ("data:image/png;base64," + base64.b64encode(b"GIF89a not really").decode(), "image 0"),
    ("data:image/png;base64," + "A" * (28 << 20), "larger than the limit"),  # 21 MiB
    ("http://example.com/cat.png", "not downloaded"),
    (str(GRAY), "image files are not allowed here"),  # no --allowed-local-media-path
]


@pytest.mark.parametrize("url, message", BAD, ids=["base64", "not-an-image", "too-large", "http", "file"])
def test_bad_images_are_400s(server, client, url, message):
    status, err = raw(server, "POST", "/v1/chat/completions", {"model": NAME, "messages": ask(url), "max_tokens": 2})
    assert status == 400 and err["error"]["type"] == "invalid_request_error", err
    assert message in err["error"]["message"]
    ok = client.chat.completions.create(model=NAME, messages=ask(data_url(GRAY)), max_tokens=2)
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_bad_images_leave_running_requests_alone(server, client):
    def good():
        return client.chat.completions.create(model=NAME, messages=ask(data_url(INTER)), max_tokens=24,
                                              temperature=0, extra_body={"ignore_eos": True})

    def bad(url):
        return raw(server, "POST", "/v1/chat/completions", {"model": NAME, "messages": ask(url), "max_tokens": 2})[0]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        goods = [pool.submit(good) for _ in range(3)]
        bads = [pool.submit(bad, url) for url, _ in BAD for _ in range(2)]
        assert [b.result() for b in bads] == [400] * len(bads)
        answers = [g.result() for g in goods]
    assert all(a.usage.completion_tokens == 24 for a in answers)
    assert len({a.choices[0].message.content for a in answers}) == 1


@pytest.fixture(scope="module")
def media_server(demo_model, tmp_path_factory):
    """A server that may read image files inside one folder: (base URL, the folder)."""
    media = tmp_path_factory.mktemp("media")
    shutil.copy(GRAY, media / "gray8.png")
    for base in serve(demo_model, tmp_path_factory.mktemp("media-server"), "--allowed-local-media-path", str(media)):
        yield base, media


def test_image_files_inside_the_allowed_folder(media_server, tmp_path):
    base, media = media_server
    c = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0, timeout=120)
    inline = first_logprob(c, ask(data_url(GRAY)))
    assert first_logprob(c, ask(str(media / "gray8.png"))) == inline
    assert first_logprob(c, ask((media / "gray8.png").as_uri())) == inline
    outside = tmp_path / "outside.png"
    shutil.copy(GRAY, outside)
    for path in (str(outside), str(media / ".." / outside.parent.name / "outside.png")):
        status, err = raw(base, "POST", "/v1/chat/completions", {"model": NAME, "messages": ask(path), "max_tokens": 2})
        assert status == 400 and "outside the allowed folder" in err["error"]["message"], err
