"""Expert-parallel load balancing: DeepSeek's EPLB (github.com/deepseek-ai/EPLB) with the reference's
signature, computed by the engine's C++ implementation (src/parallel/eplb.cpp), which reproduces the
reference's placements exactly.

    from deepinfer.eplb import rebalance_experts
    phy2log, log2phy, logcnt = rebalance_experts(weight, num_replicas=16, num_groups=4, num_nodes=2, num_gpus=8)

weight is [layers][experts] (nested lists, a numpy array or a torch tensor) of expert loads, e.g.
token counts. The results come back as the input came: torch tensors for a tensor, numpy arrays for
an array, nested lists otherwise; int64, with log2phy padded by -1.
"""
from . import _core

__all__ = ["rebalance_experts"]


def rebalance_experts(weight, num_replicas: int, num_groups: int, num_nodes: int, num_gpus: int):
    """Returns (phy2log [layers][num_replicas], log2phy [layers][experts][max replicas], logcnt [layers][experts]).

    The hierarchical policy (expert groups packed to nodes first) when num_groups % num_nodes == 0,
    else the global one; physical slot p lives on GPU p // (num_replicas // num_gpus).
    """
    kind = type(weight).__module__.split(".")[0]
    rows = weight
    if kind == "torch":
        rows = weight.detach().float().cpu().tolist()
    elif kind == "numpy":
        rows = weight.astype("float32").tolist()
    if kind in ("torch", "numpy") and len(getattr(weight, "shape", ())) != 2:
        raise ValueError(f"weight must be 2-D [layers][experts], got shape {tuple(weight.shape)}")
    out = _core.eplb_rebalance(rows, num_replicas, num_groups, num_nodes, num_gpus)
    if kind == "torch":
        import torch
        return tuple(torch.tensor(x, dtype=torch.int64) for x in out)
    if kind == "numpy":
        import numpy
        return tuple(numpy.array(x, dtype=numpy.int64) for x in out)
    return out
