"""Files written by the PyPI safetensors package (numpy API) read back through the C++ reader."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

st_numpy = pytest.importorskip("safetensors.numpy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / os.environ.get("DEEPINFER_BUILD_DIR", "build") / "tests" / "io" / "safetensors_dump"


def test_reads_file_written_by_pypi_safetensors(tmp_path):
    if not TOOL.exists():
        pytest.skip(f"{TOOL} is not built")
    tensors = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
        "f16": np.array([1.5, -0.25, 65504.0, 2.0**-24], dtype=np.float16),
        "i32": np.array([[1, -2]], dtype=np.int32),
        "u8": np.arange(3, dtype=np.uint8),
        "scalar": np.array(3.0, dtype=np.float32),
    }
    path = tmp_path / "model.safetensors"
    st_numpy.save_file(tensors, str(path), metadata={"format": "np"})

    out = json.loads(subprocess.run([str(TOOL), str(path)], check=True, capture_output=True, text=True).stdout)
    assert out["metadata"] == {"format": "np"}
    assert set(out["tensors"]) == set(tensors)
    dtypes = {"f32": "F32", "f16": "F16", "i32": "I32", "u8": "U8", "scalar": "F32"}
    for name, array in tensors.items():
        got = out["tensors"][name]
        assert got["dtype"] == dtypes[name]
        assert got["shape"] == list(array.shape)
        if "values" in got:
            assert got["values"] == array.astype(np.float32).ravel().tolist()


def test_rejects_truncated_file(tmp_path):
    if not TOOL.exists():
        pytest.skip(f"{TOOL} is not built")
    path = tmp_path / "cut.safetensors"
    st_numpy.save_file({"w": np.ones(16, dtype=np.float32)}, str(path))
    path.write_bytes(path.read_bytes()[:-1])
    result = subprocess.run([str(TOOL), str(path)], capture_output=True, text=True)
    assert result.returncode == 1
    assert "cut.safetensors" in result.stderr and "'w'" in result.stderr
