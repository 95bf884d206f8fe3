"""Chat messages with images (OpenAI image_url parts) through LLM.chat on the demo model, which has a small
random vision tower: where the placeholder goes, the forms of an image URL, that the image reaches the
model, DSpark after an image, and the errors for bad images."""
import base64
import json
import pathlib

import pytest

from deepinfer import LLM, SamplingParams

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "data" / "vision"
GRAY, INTER = IMAGES / "gray8.png", IMAGES / "interlaced.png"


def data_url(path: pathlib.Path, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


def ask(url, text="What is in this image?"):
    return [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]


GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, prompt_logprobs=0)


@pytest.fixture(scope="module")
def demo_vl(demo_model):
    return LLM(demo_model, max_num_seqs=4)


@pytest.fixture(scope="module")
def image_id(demo_model):
    return json.loads((pathlib.Path(demo_model) / "config.json").read_text())["image_token_id"]


def test_the_placeholder_goes_where_the_part_is(demo_vl, image_id):
    # V4.1 joins content parts with a blank line (DeepSeek's encoder), the image as its placeholder token.
    parts = [{"role": "user", "content": [{"type": "text", "text": "Before"}, {"type": "image_url", "image_url": {"url": data_url(GRAY)}},
                                          {"type": "text", "text": "after"}]}]
    ids, images = demo_vl._engine.chat_prompt(json.dumps(parts))
    assert images == [GRAY.read_bytes()] and ids.count(image_id) == 1
    placeholder = demo_vl.decode([image_id], skip_special_tokens=False)  # the demo's (V4) tokenizer names it so
    typed = [{"role": "user", "content": f"Before\n\n{placeholder}\n\nafter"}]
    assert ids == demo_vl._engine.encode_chat(json.dumps(typed), "", False, "", True, True)
    # typed by a user (untrusted content), the placeholder's string stays text: no image
    assert image_id not in demo_vl._engine.encode_chat(json.dumps(typed), "", False, "", True, False)
    text_parts = [{"role": "user", "content": [{"type": "text", "text": "Before"}, {"type": "text", "text": "after"}]}]
    assert demo_vl._engine.chat_prompt(json.dumps(text_parts))[0] == \
        demo_vl._engine.encode_chat(json.dumps([{"role": "user", "content": "Before\n\nafter"}]))


def test_the_image_changes_the_output(demo_vl):
    a, b, c, d = demo_vl.chat([ask(data_url(GRAY)), ask(data_url(GRAY)), ask(data_url(INTER)),
                               [{"role": "user", "content": "What is in this image?"}]], GREEDY, use_tqdm=False)
    assert len(a.prompt_token_ids) > len(d.prompt_token_ids) + 1  # the placeholder became an image span
    assert a.outputs[0].token_ids == b.outputs[0].token_ids
    last = lambda o: o.prompt_logprobs[-1][o.prompt_token_ids[-1]].logprob  # noqa: E731  (the same last token)
    assert a.prompt_token_ids[-1] == d.prompt_token_ids[-1]
    assert last(a) == last(b) and last(a) != last(c) and last(a) != last(d)


def test_every_form_of_an_image_gives_the_same_answer(demo_vl, tmp_path):
    Image = pytest.importorskip("PIL.Image")
    sp = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    pil = [{"role": "user", "content": [{"type": "text", "text": "What is in this image?"},
                                        {"type": "image_pil", "image_pil": Image.open(GRAY)}]}]
    responses_api = [{"role": "user", "content": [{"type": "text", "text": "What is in this image?"},
                                                  {"type": "input_image", "image_url": data_url(GRAY)}]}]
    forms = [ask(data_url(GRAY)), ask(str(GRAY)), ask(GRAY.as_uri()), pil, responses_api]
    outs = demo_vl.chat(forms, sp, use_tqdm=False)
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    assert len({tuple(o.prompt_token_ids) for o in outs}) == 1


def test_two_images_in_two_turns(demo_vl, image_id):
    conv = ask(data_url(GRAY)) + [{"role": "assistant", "content": "A gray square."}] + ask(data_url(INTER), "And this?")
    ids, images = demo_vl._engine.chat_prompt(json.dumps(conv))
    assert ids.count(image_id) == 2 and images == [GRAY.read_bytes(), INTER.read_bytes()]
    out = demo_vl.chat(conv, SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 2


@pytest.mark.parametrize("url, message", [
    ("data:image/png;base64,iVBORw0K!!!!", "invalid character"),
    ("data:image/png;base64,iVBORw0KG", "truncated"),
    ("data:image/png;base64," + base64.b64encode(b"hello, not an image").decode(), "image 0"),
    ("data:image/png,rawbytes", "only base64"),
    ("data:text/plain;base64,aGVsbG8=", "not an image type"),
    ("data:image/png;base64,", "empty"),
    ("https://example.com/cat.png", "not downloaded"),
    ("ftp://example.com/cat.png", "scheme 'ftp' is not supported"),
    ("/no/such/image.png", "does not exist"),
    ("file://relative.png", "absolute path"),
])
def test_bad_images_are_clear_errors_and_the_engine_carries_on(demo_vl, url, message):
    with pytest.raises(ValueError, match=message):
        demo_vl.chat(ask(url), SamplingParams(max_tokens=2), use_tqdm=False)
    assert demo_vl.chat([{"role": "user", "content": "carry on"}], SamplingParams(max_tokens=2, ignore_eos=True),
                        use_tqdm=False)[0].outputs[0].token_ids


def test_too_large_and_misplaced_images_are_refused(demo_vl, tmp_path):
    big = "data:image/png;base64," + "A" * (28 << 20)  # 21 MiB decoded, above the 20 MiB limit
    with pytest.raises(ValueError, match="larger than the limit"):
        demo_vl.chat(ask(big), use_tqdm=False)
    huge = tmp_path / "huge.png"
    huge.write_bytes(GRAY.read_bytes() + bytes(21 << 20))
    with pytest.raises(ValueError, match="larger than the limit"):
        demo_vl.chat(ask(str(huge)), use_tqdm=False)
    assistant = [{"role": "user", "content": "hi"},
                 {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": data_url(GRAY)}}]}]
    with pytest.raises(ValueError, match="only user messages"):
        demo_vl.chat(assistant, use_tqdm=False)
    with pytest.raises(ValueError, match="content part type 'audio_url' is not supported"):
        demo_vl.chat([{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": "x"}}]}], use_tqdm=False)
    # one bad conversation of a batch: nothing of the batch runs, and the engine carries on
    with pytest.raises(ValueError, match="conversation 1|message 0"):
        demo_vl.chat([ask(data_url(GRAY)), ask("https://x/y.png")], use_tqdm=False)
    assert demo_vl.chat(ask(data_url(GRAY)), SamplingParams(max_tokens=1), use_tqdm=False)[0].outputs[0].token_ids


def test_dspark_after_an_image_is_lossless(demo_model):
    """Greedy decoding with DSpark drafts after an image prompt gives the tokens plain decoding gives."""
    conv = [ask(data_url(GRAY)), ask(data_url(INTER), "Describe it in detail.")]
    sp = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    plain = LLM(demo_model, max_num_seqs=4).chat(conv, sp, use_tqdm=False)
    spec = LLM(demo_model, max_num_seqs=4, speculative={"num_draft_tokens": 3, "schedule": "fixed"})
    drafted = spec.chat(conv, sp, use_tqdm=False)
    for p, d in zip(plain, drafted):
        assert d.outputs[0].token_ids == p.outputs[0].token_ids
    assert spec.stats()["draft_tokens_verified"] > 0
