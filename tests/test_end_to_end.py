"""End to end: the notebook 01/02/03 workflow on real architectures shipped with onnx.

The onnx package ships "light" versions of model-zoo networks (onnx-caffe2 exports, IR 3,
opset 9, every weight computed by ConstantOfShape from shape initializers listed as graph
inputs): old exports that stress opening, folding, fusing, verification and comparison.
Each model is skipped cleanly when its file is absent.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx_lab

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = ["squeezenet", "shufflenet", "inception_v1"]


def _path(name: str) -> Path:
    path = LIGHT / f"light_{name}.onnx"
    if not path.is_file():
        pytest.skip(f"{path} is not shipped with this onnx version")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_explore_optimize_debug(name, tmp_path):
    path = _path(name)
    source = path.read_bytes()

    # --- 01 explore: summary, tables, weights, renderings
    lab = onnx_lab.open(path)
    s = lab.summary()
    assert s["ir_version"] == 3 and s["num_nodes"] == len(lab.nodes) == len(lab.index)
    assert list(lab.inputs["shape"].iloc[0]) == [1, 3, 224, 224]  # weights are not inputs
    assert len(lab.outputs) == 1
    assert lab.tensors["name"].is_unique and set(lab.nodes["op_type"]) >= {"Conv", "Relu"}
    stats = lab.weight_stats()
    assert len(stats) == len(lab.initializers) and stats["nan_count"].eq(0).all()
    whole = lab.render(collapse="auto")
    assert whole.dot and len(whole.dot) < 200_000
    conv = lab.nodes.query("op_type == 'Conv'").node_id.iloc[3]
    near = lab.render(around=conv, radius=2)
    assert conv in near.nodes

    # --- 02 optimize: patterns, the safe preset verified step by step, history, undo/redo
    pats = lab.patterns()
    assert "fold_constants" in set(pats["pass"])  # IR 3 initializers are constants
    results = lab.apply_preset("safe")
    changed = [r for r in results if r.modified]
    assert changed and all(r.verify_passed for r in changed), \
        [(r.name, r.first_failure) for r in changed]
    n_opt = len(lab.index)
    assert n_opt < len(lab.original.index)
    if "BatchNormalization" in set(lab.original.nodes["op_type"]):
        assert "BatchNormalization" not in set(lab.nodes["op_type"])
    h = lab.history
    assert h["step"].tolist() == list(range(len(h))) and bool(h["current"].iloc[-1])
    lab.undo()
    assert len(lab.index) >= n_opt
    lab.redo()
    assert len(lab.index) == n_opt

    # save, reopen: provenance survives, the source file is untouched
    out = lab.save(tmp_path / "opt.onnx")
    again = onnx_lab.open(out)
    assert len(again.index) == n_opt
    fused = {k: v for k, v in lab.origins.items() if v != [k]}
    assert {k: again.origins[k] for k in fused} == fused
    assert path.read_bytes() == source
    onnx.checker.check_model(onnx.load(str(out)))

    # extract a Conv and its neighbours from the optimized model, verified against it
    convs = lab.nodes.query("op_type == 'Conv'").node_id.tolist()
    sub = lab.extract(nodes=convs[1:3])
    assert sub.results[0].verify_passed and len(sub.index) == 2

    # --- 03 debug: optimized vs original, fp16, diff
    c = onnx_lab.compare(lab.original, lab)
    assert c.passed and c.first_divergence is None
    assert c.layers["passed"].all()
    half = onnx_lab.to_fp16(lab)
    # the method form users wrote before the function existed: the same conversion
    assert half.model.to_proto().graph == lab.to_fp16().model.to_proto().graph
    c16 = onnx_lab.compare(lab, half)
    fd = c16.first_divergence
    if fd is not None:  # fp16 rounding: named at a node of the compared model
        assert fd["node_id"] in lab.index.entries and fd["max_abs"] > 0
        assert isinstance(fd["reaches_outputs"], bool)
    d = onnx_lab.diff(lab.original, lab)
    assert d.counts["removed"] > 0 and not d.empty

    # --- 04 cost and compatibility
    cost = lab.original.cost()
    assert cost.total["macs"] > 1e8 and cost.total["params"] > 0
    assert math.isfinite(cost.total["peak_activation_bytes"])
    findings = lab.check()
    assert list(findings.columns) == ["severity", "code", "node_id", "message", "fix"]
    assert not (findings["severity"] == "error").any()


def test_profile_a_light_model():
    lab = onnx_lab.open(_path("squeezenet"))
    p = onnx_lab.profile(lab, runs=2, warmup=1)
    assert np.isclose(p.ops["share"].sum(), 1.0)
    assert (p.latency.loc[~p.latency["warmup"], "wall_ms"] > 0).all()


def test_the_readme_quick_start_runs_as_written(tmp_path, monkeypatch):
    # a newcomer's first cell: it named `llm` without defining it (NameError)
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md (Quick start)", "exec"), {})  # noqa: S102 - our own README
    assert (tmp_path / "model.html").stat().st_size > 10_000
