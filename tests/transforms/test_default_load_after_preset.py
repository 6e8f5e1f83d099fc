"""A preset whose steps each verify (with onnxruntime's optimizations off, as verification
runs) but whose result a default onnxruntime session refuses.

Found on ONNX's conformance case ``test_affine_grid_2d_expanded``: ``fold_shapes`` turns the
``Size`` of the size input into a constant; onnxruntime's default optimizer then folds the If
that reads it and inlines a branch whose Range it rejects ("Input to 'Range' op should be
scalars": the case feeds Range 1-element tensors, which the spec does not allow). The preset
used to end there (every step verified) and the save refused the result; now the preset
drops that step and runs the passes after it again. A lone ``apply`` of the pass is left to
the save, which names the step.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import onnx_lab
from onnx_lab.errors import SaveError

RANGE = "Input to 'Range' op should be scalars"


@pytest.fixture(scope="module")
def affine_grid():
    from onnx.backend.test.case import node

    case = next((t for t in node.collect_testcases() if t.name == "test_affine_grid_2d_expanded"),
                None)
    if case is None:
        pytest.skip("this onnx has no affine_grid case")
    inputs, outputs = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    return case.model, dict(zip(names, inputs)), outputs


def _fold_shapes_breaks_default_load(model, feeds) -> None:
    from onnx_lab.runtime.session import default_load_problem

    lab = onnx_lab.open(model)
    if default_load_problem(lab.model) is not None:
        pytest.skip("this onnxruntime does not load the case at its default options")
    lab.apply("fold_shapes", verify=False)
    if default_load_problem(lab.model) is None:
        pytest.skip("this onnxruntime loads the folded model at its default options")


def test_the_preset_drops_the_step_a_default_session_refuses(affine_grid, tmp_path):
    model, feeds, expected = affine_grid
    _fold_shapes_breaks_default_load(model, feeds)
    lab = onnx_lab.open(model)
    results = lab.apply_preset("safe", verify={"feeds": [feeds]})
    dropped = [r for r in results if r.dropped]
    assert [r.name for r in dropped] == ["fold_shapes"], [(r.name, r.dropped) for r in results]
    r = dropped[0]
    assert RANGE in r.dropped and r.verify_passed  # its numbers were right
    assert any(n.startswith("dropped: ") and "went on without it from step 0" in n
               for n in r.notes), r.notes
    # what the note says a lone apply does is what it does: it passes, the save refuses
    assert any("alone makes the same version, which lab.save() refuses" in n
               for n in r.notes), r.notes
    assert not any("alone would fail" in n for n in r.notes), r.notes
    assert "fold_shapes" not in list(lab.history["pass"])
    assert lab.history["current"].iloc[-1]  # nothing left to redo into the refused version
    assert any(x.modified for x in results if x is not r)  # the passes after it still ran
    # the independent check: the saved file in a fresh default session, the case's outputs
    saved = lab.save(tmp_path / "m.onnx")
    got = ort.InferenceSession(str(saved), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-3, atol=1e-7)


def test_a_lone_apply_is_left_to_the_save(affine_grid, tmp_path):
    # a pass's lone step is not loaded at default options (a session of the whole model per
    # click); its numbers are right, and the save names it
    model, feeds, _ = affine_grid
    _fold_shapes_breaks_default_load(model, feeds)
    lab = onnx_lab.open(model)
    r = lab.apply("fold_shapes", verify={"feeds": [feeds]})
    assert r.modified and r.verify_passed
    with pytest.raises(SaveError, match="as a deployment loads it") as e:
        lab.save(tmp_path / "m.onnx")
    assert "fold_shapes" in str(e.value) and "lab.checkout(0)" in str(e.value)
    assert not (tmp_path / "m.onnx").exists()


def test_the_save_names_the_step_a_default_session_refuses(affine_grid, tmp_path):
    # without verification no load is asked during the preset: the save still refuses it
    model, feeds, _ = affine_grid
    _fold_shapes_breaks_default_load(model, feeds)
    lab = onnx_lab.open(model)
    lab.apply_preset("safe", verify=False)
    steps = {r: s for s, r in zip(lab.history["step"], lab.history["pass"])}
    assert "fold_shapes" in steps
    with pytest.raises(SaveError) as e:
        lab.save(tmp_path / "m.onnx")
    step = steps["fold_shapes"]
    assert f"Step {step} (fold_shapes) is the first version that does not load so: " \
           f"lab.checkout({step - 1})" in e.value.problem, e.value.problem
    assert "lab.check() names" not in str(e.value)
    assert not (tmp_path / "m.onnx").exists()
    lab.checkout(step - 1)
    assert lab.save(tmp_path / "m.onnx").exists()


def test_optimize_json_says_the_dropped_step_is_not_in_the_output(affine_grid, tmp_path, capsys):
    import json

    import onnx

    from onnx_lab.cli import main

    model, feeds, expected = affine_grid
    _fold_shapes_breaks_default_load(model, feeds)
    src, out, npz = tmp_path / "case.onnx", tmp_path / "out.onnx", tmp_path / "feeds.npz"
    onnx.save(model, src)
    np.savez(npz, **feeds)
    assert main(["optimize", str(src), str(out), "--feeds", str(npz), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {p["name"]: p for p in doc["passes"]}
    fold = rows["fold_shapes"]
    assert RANGE in fold["dropped"]
    # it made a version (its node counts say so) that the written model does not hold
    assert fold["modified"] is False and fold["verify_passed"] is True
    assert all(p["dropped"] is None for n, p in rows.items() if n != "fold_shapes")
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-3, atol=1e-7)
