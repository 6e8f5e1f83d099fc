"""A preset whose steps each verify (with onnxruntime's optimizations off, as verification
runs) but whose result a default onnxruntime session refuses: the save refusal names the
first step that made it so, and how to go back before it.

Found on ONNX's conformance case ``test_affine_grid_2d_expanded``: ``fold_shapes`` turns the
``Size`` of the size input into a constant; onnxruntime's default optimizer then folds the If
that reads it and inlines a branch whose Range it rejects ("Input to 'Range' op should be
scalars"). The save used to say "lab.check() names what onnxruntime refuses", which it did not.
"""

from __future__ import annotations

import pytest

import onnx_lab
from onnx_lab.errors import SaveError


@pytest.fixture(scope="module")
def affine_grid():
    from onnx.backend.test.case import node

    case = next((t for t in node.collect_testcases() if t.name == "test_affine_grid_2d_expanded"),
                None)
    if case is None:
        pytest.skip("this onnx has no affine_grid case")
    inputs, _ = case.data_sets[0]
    names = [i.name for i in case.model.graph.input]
    return case.model, dict(zip(names, inputs))


def test_the_save_names_the_step_a_default_session_refuses(affine_grid, tmp_path):
    model, feeds = affine_grid
    lab = onnx_lab.open(model)
    lab.apply_preset("safe", verify={"feeds": [feeds]})
    steps = {r: s for s, r in zip(lab.history["step"], lab.history["pass"])}
    if "fold_shapes" not in steps:
        pytest.skip("fold_shapes changed nothing here")
    from onnx_lab.runtime.session import default_load_problem

    if default_load_problem(lab.model) is None:
        pytest.skip("this onnxruntime loads the folded model at its default options")
    with pytest.raises(SaveError) as e:
        lab.save(tmp_path / "m.onnx")
    step = steps["fold_shapes"]
    assert f"Step {step} (fold_shapes) is the first version that does not load so: " \
           f"lab.checkout({step - 1})" in e.value.problem, e.value.problem
    assert "lab.check() names" not in str(e.value)
    assert not (tmp_path / "m.onnx").exists()
    lab.checkout(step - 1)
    assert lab.save(tmp_path / "m.onnx").exists()
