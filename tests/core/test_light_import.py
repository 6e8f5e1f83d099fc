"""`import onnx_lab` and the core features load no heavy optional modules."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("onnxruntime", "matplotlib", "ipywidgets", "graphviz", "torch", "onnxsim",
         "onnxoptimizer")


def test_core_features_import_nothing_heavy():
    code = (
        "import sys, onnx_lab\n"
        f"heavy = {HEAVY!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "lab = onnx_lab.open('sample:transformer_block', dims={'batch': 1})\n"
        "lab.nodes, lab.initializers, lab.tensors, lab.inputs, lab.outputs\n"
        "lab.summary()._repr_html_(), lab.weight_stats()\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out == ["[]", "[]"]
