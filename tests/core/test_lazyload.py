"""Large files are compared without loading their weights: references into the .onnx file."""

from __future__ import annotations

import numpy as np
import onnx
import pandas as pd
from numerics_helpers import convnet, scaled_copy

import onnx_lab
from onnx_lab.core import _lazyload
from onnx_lab.core._lazyload import open_lazy


def test_lazy_model_reads_weights_from_the_file(tmp_path, monkeypatch):
    path = tmp_path / "convnet.onnx"
    onnx.save(convnet(), path)
    assert open_lazy(path) is None  # small files load the ordinary way
    monkeypatch.setattr(_lazyload, "MIN_FILE_BYTES", 0)
    lazy = open_lazy(path)
    full = onnx_lab.open(path).model
    assert lazy.has_external_data and not full.has_external_data
    big = [n for n, v in full.graph.initializers.items() if v.const_value.nbytes >= 1024]
    assert {t.location for t in lazy.external_tensors()} == {"convnet.onnx"}
    for name in big:
        assert np.array_equal(lazy.graph.initializers[name].const_value.numpy(),
                              full.graph.initializers[name].const_value.numpy())
    assert open_lazy(tmp_path / "missing.onnx") is None
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 64)
    assert open_lazy(tmp_path / "junk.onnx") is None


def test_compare_of_paths_is_the_same_lazily(tmp_path, monkeypatch):
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(convnet(), ref)
    onnx.save(scaled_copy(convnet(), "block1.conv.weight", 1.5), cand)
    eager = onnx_lab.compare(str(ref), str(cand))
    monkeypatch.setattr(_lazyload, "MIN_FILE_BYTES", 0)
    lazy = onnx_lab.compare(str(ref), str(cand))
    assert lazy.reference.model.has_external_data
    pd.testing.assert_frame_equal(eager.layers, lazy.layers)
    assert lazy.first_divergence == eager.first_divergence
    r, c = lazy.values("/block1/conv/Conv_output_0")
    assert r.shape == (1, 16, 16, 16) and not np.array_equal(r, c)


def test_external_data_models_compare(tmp_path, monkeypatch):
    ref = tmp_path / "ext" / "ref.onnx"
    ref.parent.mkdir()
    onnx.save(convnet(), ref, save_as_external_data=True, location="ref.onnx.data",
              size_threshold=0)
    cand = tmp_path / "cand.onnx"
    onnx.save(scaled_copy(convnet(), "block2.conv.weight", 1.2), cand)
    for lazy in (False, True):
        if lazy:
            monkeypatch.setattr(_lazyload, "MIN_FILE_BYTES", 0)
        c = onnx_lab.compare(str(ref), str(cand))
        assert c.reference.model.has_external_data
        assert c.first_divergence["node_id"] == "/block2/conv/Conv"
