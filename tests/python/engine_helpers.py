"""Shared fixtures data for the Python tests: the golden tiny models and their greedy outputs."""
import os
import pathlib

import safetensors.numpy

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDENS = ROOT / "tests" / "data" / "goldens" / "v4"
TOKENIZER = ROOT / "tests" / "data" / "tokenizer" / "deepseek-v3"
CLI = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tools" / "deepinfer"


def golden(case: str):
    g = safetensors.numpy.load_file(str(GOLDENS / case / "goldens.safetensors"))
    return g["greedy.prompt_ids"].tolist(), g["greedy.output_ids"].tolist()
