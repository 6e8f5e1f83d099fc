"""The repro folder of a divergence on string tensors runs: its inputs and expected values were
object arrays, which ``np.load`` refuses without ``allow_pickle``, so ``python repro.py``
stopped with a traceback on any LabelEncoder / OneHotEncoder / string-label divergence."""

from __future__ import annotations

import numpy as np
from ml_models import string_pipeline
from numerics_helpers import run_repro

import onnx_lab


def test_repro_of_a_string_divergence_runs(tmp_path):
    ref = onnx_lab.open(string_pipeline(), dims={"N": 6})
    c = onnx_lab.compare(ref, onnx_lab.open(string_pipeline(swap=True), dims={"N": 6}))
    assert not c.passed
    r = ref.repro(c, tmp_path / "repro")
    # the files load without pickle, the strings as they were
    inputs = np.load(r.inputs)
    assert inputs["arr_0"].dtype.kind == "U"
    out = run_repro(r.folder)
    assert "strings differ" in out
    assert "0 of" not in out


def test_repro_of_a_zipmap_divergence_runs(tmp_path):
    """A ZipMap's output is a sequence of maps: it goes to names.json as data (an object
    array in expected.npz stopped repro.py the same way) and is compared key by key."""
    import json

    from ml_models import linear_zipmap

    cand = linear_zipmap()
    zipmap = next(n for n in cand.graph.node if n.op_type == "ZipMap")
    next(a for a in zipmap.attribute if a.name == "classlabels_int64s").ints[2] = 7
    ref = onnx_lab.open(linear_zipmap(), dims={"N": 4})
    c = onnx_lab.compare(ref, onnx_lab.open(cand, dims={"N": 4}))
    assert not c.passed and c.first_divergence["node_id"] == "ZipMap"
    r = ref.repro(c, tmp_path / "repro")
    held = json.loads(r.names.read_text())["values"]["expected"]
    assert [k for k, _ in held["0"]["seq"][0]["map"]] == [0, 1, 2]
    out = run_repro(r.folder)
    # the node alone gives key 7 where the reference has 2: 4 rows, one key each side
    assert "8 keys or items on one side only" in out
