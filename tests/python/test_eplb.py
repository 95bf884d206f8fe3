# deepinfer.eplb.rebalance_experts against DeepSeek's eplb.py outputs (tests/data/eplb/), through the
# C++ implementation, with the reference's signature.
import json
import pathlib

import numpy as np
import pytest

from deepinfer.eplb import rebalance_experts

GOLDENS = json.loads((pathlib.Path(__file__).resolve().parents[1] / "data/eplb/eplb_goldens.json").read_text())["cases"]


@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_every_golden_case_exactly(case):
    args = (case["num_replicas"], case["num_groups"], case["num_nodes"], case["num_gpus"])
    phy2log, log2phy, logcnt = rebalance_experts(case["weight"], *args)
    assert phy2log == case["phy2log"]
    assert log2phy == case["log2phy"]
    assert logcnt == case["logcnt"]


def test_numpy_in_numpy_out():
    case = GOLDENS[0]  # the README example
    phy2log, log2phy, logcnt = rebalance_experts(np.array(case["weight"], dtype=np.float64), 16, 4, 2, 8)
    assert all(isinstance(x, np.ndarray) and x.dtype == np.int64 for x in (phy2log, log2phy, logcnt))
    assert phy2log[0].tolist() == [5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1]
    assert log2phy.shape == (2, 12, 2) and logcnt.tolist() == case["logcnt"]


def test_keyword_arguments_as_the_reference():
    out = rebalance_experts(weight=[[1.0, 2.0, 3.0, 4.0]], num_replicas=6, num_groups=1, num_nodes=1, num_gpus=2)
    assert sum(out[2][0]) == 6


@pytest.mark.parametrize("weight, args, error", [
    ([[1.0] * 12], (8, 4, 2, 8), ValueError),        # fewer replicas than experts
    ([[1.0] * 12], (18, 4, 2, 8), ValueError),       # replicas not a multiple of the GPUs
    ([[1.0] * 12, [1.0] * 11], (16, 4, 2, 8), ValueError),  # ragged
    ([[1.0] * 11 + [-2.0]], (16, 4, 2, 8), ValueError),     # a negative load
    ([[1.0] * 11 + [float("nan")]], (16, 4, 2, 8), ValueError),
    ([[1.0] * 11 + ["x"]], (16, 4, 2, 8), TypeError),
    ([1.0] * 12, (16, 4, 2, 8), TypeError),          # 1-D
    ([[1.0] * 12], (16.0, 4, 2, 8), TypeError),      # a float count
    ([[1.0] * 12], (16, True, 2, 8), TypeError),
    (np.ones(12), (16, 4, 2, 8), ValueError),        # 1-D array
])
def test_bad_input_gets_a_clear_error(weight, args, error):
    with pytest.raises(error):
        rebalance_experts(weight, *args)
