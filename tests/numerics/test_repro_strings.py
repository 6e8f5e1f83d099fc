"""The repro folder of a divergence on string tensors runs: its inputs and expected values were
object arrays, which ``np.load`` refuses without ``allow_pickle``, so ``python repro.py``
stopped with a traceback on any LabelEncoder / OneHotEncoder / string-label divergence."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from ml_models import string_pipeline

import onnx_lab


def test_repro_of_a_string_divergence_runs(tmp_path):
    ref = onnx_lab.open(string_pipeline(), dims={"N": 6})
    c = onnx_lab.compare(ref, onnx_lab.open(string_pipeline(swap=True), dims={"N": 6}))
    assert not c.passed
    r = ref.repro(c, tmp_path / "repro")
    # the files load without pickle, the strings as they were
    inputs = np.load(r.inputs)
    assert inputs["arr_0"].dtype.kind == "U"
    run = subprocess.run([sys.executable, "repro.py"], cwd=r.folder, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "strings differ" in run.stdout
    assert "0 of" not in run.stdout
