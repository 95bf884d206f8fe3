"""Images in prompts (vLLM's multi_modal_data) on the demo model, which has a small random vision tower."""
import json
import pathlib

import pytest

from deepinfer import LLM, SamplingParams

IMAGES = pathlib.Path(__file__).resolve().parents[1] / "data" / "vision"


@pytest.fixture(scope="module")
def demo_vl(demo_model):
    return LLM(demo_model, max_num_seqs=4)


def image_id(demo_model):
    return json.loads((pathlib.Path(demo_model) / "config.json").read_text())["image_token_id"]


def test_an_image_prompt_generates_and_the_image_matters(demo_vl, demo_model):
    ids = [100, image_id(demo_model), 200, 300]
    sp = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, prompt_logprobs=0)
    gray, inter = str(IMAGES / "gray8.png"), (IMAGES / "interlaced.png").read_bytes()
    a, b, c = demo_vl.generate([{"prompt_token_ids": ids, "multi_modal_data": {"image": gray}},
                                {"prompt_token_ids": ids, "multi_modal_data": {"image": gray}},
                                {"prompt_token_ids": ids, "multi_modal_data": {"image": [inter]}}], sp)
    assert len(a.outputs[0].token_ids) == 4
    assert len(a.prompt_token_ids) > len(ids)  # the placeholder became the image span
    assert a.outputs[0].token_ids == b.outputs[0].token_ids
    last = lambda o: o.prompt_logprobs[-1][ids[-1]].logprob  # the text after the span sees the image
    assert last(a) == last(b) and last(a) != last(c)


def test_pil_images_are_accepted(demo_vl, demo_model):
    Image = pytest.importorskip("PIL.Image")
    img = Image.open(IMAGES / "gray8.png")
    out = demo_vl.generate({"prompt_token_ids": [5, image_id(demo_model)], "multi_modal_data": {"image": img}},
                           SamplingParams(max_tokens=2, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 2


def test_image_misuse_is_a_clear_error(demo_vl, demo_model):
    sp = SamplingParams(max_tokens=2)
    with pytest.raises(ValueError, match="placeholder"):  # an image without its placeholder
        demo_vl.generate({"prompt_token_ids": [5, 6], "multi_modal_data": {"image": str(IMAGES / "gray8.png")}}, sp)
    with pytest.raises(ValueError, match="placeholder"):  # a placeholder without its image
        demo_vl.generate({"prompt_token_ids": [5, image_id(demo_model)]}, sp)
    with pytest.raises(ValueError, match="image 0"):  # not an image file
        demo_vl.generate({"prompt_token_ids": [5, image_id(demo_model)], "multi_modal_data": {"image": b"not a png"}}, sp)
    with pytest.raises(TypeError, match="image 0"):
        demo_vl.generate({"prompt_token_ids": [5, image_id(demo_model)], "multi_modal_data": {"image": 3}}, sp)
    assert demo_vl.generate("carry on", SamplingParams(max_tokens=2, ignore_eos=True))[0].outputs[0].token_ids


def test_cli_forward_and_generate_take_images(demo_model, tmp_path):
    import subprocess
    from engine_helpers import CLI
    from safetensors.numpy import load_file
    if not CLI.exists():
        pytest.skip("build/tools/deepinfer not built")
    deepinfer_command = lambda: [str(CLI)]  # noqa: E731
    ids, img = f"100,{image_id(demo_model)},200", str(IMAGES / "gray8.png")
    for chunk in ([], ["--chunk", "5"]):  # chunks cut through the span: the same logits
        out = tmp_path / f"f{len(chunk)}.safetensors"
        subprocess.run(deepinfer_command() + ["forward", "--model", demo_model, "--input-ids", ids, "--image", img,
                                              "--output", str(out), *chunk], check=True, capture_output=True)
    a, b = (load_file(str(tmp_path / f"f{n}.safetensors"))["logits"] for n in (0, 2))
    assert a.shape[0] > 3 and (a == b).all()  # the expanded sequence's positions
    r = subprocess.run(deepinfer_command() + ["generate", "--model", demo_model, "--prompt-ids", ids, "--image", img,
                                              "--max-tokens", "3", "--ignore-eos", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout.splitlines()[0])["token_ids"]) == 3
    r = subprocess.run(deepinfer_command() + ["forward", "--model", demo_model, "--input-ids", "100,200", "--image", img,
                                              "--output", str(tmp_path / "x.safetensors")], capture_output=True, text=True)
    assert r.returncode != 0 and "placeholder" in r.stderr
