"""Floors of the sweep: what the model's arithmetic and weight traffic allow on this machine.

The machine's rates are measured here with numpy (its BLAS is the library doing the same job): a
float32 GEMM for FLOP/s, a large copy for memory bandwidth. The model's per-token work comes from
its checkpoint: 2 FLOPs per weight of every matrix a token passes (routed experts weighted by
top-k / experts; embeddings, Engram tables and the DSpark draft stages excluded: lookups, or not run;
the output head counted once per prefill, for the position that samples, and per decoded token),
attention over the context left out (the prompts here are short beside the weights).
"""
from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import numpy as np


def machine_rates(seconds: float = 0.5) -> dict:
    n = 1024
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    a @ b
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    flops = 2 * n ** 3 * reps / (time.perf_counter() - t0)
    x = np.ones(64 << 20 >> 2, np.float32)  # 64 MiB
    y = np.empty_like(x)
    np.copyto(y, x)  # first touch of the pages
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        np.copyto(y, x)
        reps += 1
    bandwidth = 2 * x.nbytes * reps / (time.perf_counter() - t0)  # read + write
    return {"flops_per_s": flops, "bytes_per_s": bandwidth}


def _tensors(model_dir: Path):
    for f in sorted(model_dir.glob("*.safetensors")):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        for name, t in header.items():
            if name != "__metadata__":
                yield name, t["shape"], t["dtype"]


def model_work(model_dir: Path) -> dict:
    """{"dense": weights every token uses, "head": the output head's, "routed": all routed experts', "experts": E, "topk": k}."""
    cfg = json.loads((model_dir / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    E, k = text.get("n_routed_experts", 1) or 1, text.get("num_experts_per_tok", 1) or 1
    dense = routed = head = 0
    for name, shape, dtype in _tensors(model_dir):
        if len(shape) != 2 or not name.endswith(".weight") or any(s in name for s in ("embed", "engram", "dspark", "mtp")):
            continue
        rows, cols = shape
        params = rows * cols * (2 if dtype in ("I8", "U8") else 1)  # MXFP4: two weights a byte
        if name in ("head.weight", "lm_head.weight"):
            head += params
        elif ".experts." in name:
            routed += params
        else:
            dense += params
    return {"dense": dense, "head": head, "routed": routed, "experts": E, "topk": k}


def config_work(model_dir: Path) -> dict:
    """model_work for a V4.1 folder with no weights (load_format=dummy): the parameter counts from config.json,
    by the released tensor shapes (spec §7.2), with the bytes each takes in the released formats."""
    cfg = json.loads((model_dir / "config.json").read_text())
    t = cfg.get("text_config", cfg)
    D, H, hd, ql = t["hidden_size"], t["num_attention_heads"], t["head_dim"], t["q_lora_rank"]
    og, ol, I, E = t["o_groups"], t["o_lora_rank"], t["moe_intermediate_size"], t["n_routed_experts"]
    ih, idim, hc = t["index_n_heads"], t["index_head_dim"], t.get("hc_mult", 4)
    ratios, L = t["compress_ratios"], t["num_hidden_layers"]
    index_src, engram = set(t.get("index_source_layer_ids", [])), set(t.get("engram_layer_ids", []))
    dense = dense16 = 0  # FP8 and BF16 projections
    for l in range(L):
        dense += ql * D + H * hd * ql + hd * D + og * ol * (H * hd // og) + D * og * ol  # wq_a, wq_b, wkv, wo_a, wo_b
        if ratios[l] > 0:
            dense16 += hd * D * (2 if ratios[l] > 1 else 1)  # compressor wkv (+ wgate)
        if l in index_src:
            dense += ih * idim * ql  # indexer wq_b
            dense16 += ih * D + idim * hd  # weights_proj, wk
        dense += 3 * I * D  # shared expert
        if l in engram:
            dense += (hc + 1) * D * (t["engram_n_heads"] * (t["engram_max_ngram_size"] - 1)) * t["engram_head_dim"]
    return {"dense": dense, "dense16": dense16, "head": t["vocab_size"] * D, "routed": L * E * 3 * I * D, "experts": E,
            "topk": t["num_experts_per_tok"],
            # bytes as released: FP8 (1 byte), MXFP4 experts (half a byte), a bf16 head
            "bytes": {"dense": 1.0, "dense16": 2.0, "routed": 0.5, "head": 2.0}}


def gpu_rates() -> dict:
    """The H200's ceilings: dense FP8 tensor-core peak (datasheet, 1979 TFLOP/s) and the device copy bandwidth
    measured on these machines (4.3 TB/s counting reads and writes; /work/.library KINDS.md, 2026-11-04)."""
    return {"flops_per_s": 1979e12, "bytes_per_s": 4.3e12}


def flops_per_token(work: dict, with_head: bool = True) -> float:
    return 2.0 * (work["dense"] + work.get("dense16", 0) + (work["head"] if with_head else 0) + work["routed"] * work["topk"] / work["experts"])


def prefill_floor_s(work: dict, rates: dict, tokens: int) -> float:
    flops = tokens * flops_per_token(work, with_head=False) + 2.0 * work["head"]
    return flops / rates["flops_per_s"]


def decode_step_floor_s(work: dict, rates: dict, batch: int, bytes_per_weight: int = 4) -> float:
    """One decode step of `batch` sequences: weights read once (the CPU backend holds fp32; work["bytes"], where
    given, the released formats), or the arithmetic."""
    touched = min(1.0, batch * work["topk"] / work["experts"])
    b = work.get("bytes", {"dense": bytes_per_weight, "routed": bytes_per_weight, "head": bytes_per_weight})
    weight_bytes = b["dense"] * work["dense"] + b.get("dense16", 0) * work.get("dense16", 0) + b["head"] * work["head"] + b["routed"] * work["routed"] * touched
    return max(weight_bytes / rates["bytes_per_s"], batch * flops_per_token(work) / rates["flops_per_s"])
