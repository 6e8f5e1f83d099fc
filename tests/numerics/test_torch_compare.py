"""compare_torch: the ONNX export against its nn.Module, module by module."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import onnx_lab

torch = pytest.importorskip("torch")

from models import decoder_export, tiny_decoder  # noqa: E402 - after the torch skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return decoder_export(tmp_path_factory.mktemp("torch_compare"))


@pytest.fixture
def ids():
    return torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))


def _planted(path, weight: str, tmp_path):
    m = onnx.load(path)
    for t in m.graph.initializer:
        if t.name == weight:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 3 + 0.5, weight))
    out = tmp_path / "planted.onnx"
    onnx.save(m, out)
    return out


@pytest.mark.slow
def test_a_faithful_export_passes_every_module(exported, ids):
    r = onnx_lab.compare_torch(tiny_decoder(), onnx_lab.open(exported), (ids,))
    assert r.passed and r.first_divergence is None and r.outputs.passed.all()
    mods = r.modules.set_index("module")
    # Every submodule that computes something is matched to an ONNX tensor of its shape.
    assert mods.tensor.notna().all(), mods.loc[mods.tensor.isna(), "match"]
    assert mods.loc["layers.0.attn.q_proj", "module_class"] == "torch.nn.modules.linear.Linear"
    assert mods.loc["head", "tensor"] == "logits"


def test_a_planted_export_difference_is_found_at_its_module(exported, ids, tmp_path):
    bad = _planted(exported, "layers.1.mlp.up.bias", tmp_path)
    r = onnx_lab.compare_torch(tiny_decoder(), onnx_lab.open(bad), (ids,))
    assert not r.passed
    fd = r.first_divergence
    assert fd["module"] == "layers.1.mlp.up"
    assert fd["module_class"] == "torch.nn.modules.linear.Linear"
    assert fd["file"].endswith("models.py") and fd["line"] > 0
    mods = r.modules.set_index("module")
    # Everything before it agrees; its parents fail too, but they are not the first.
    assert mods.loc["layers.1.norm2", "passed"] and mods.loc["layers.0.mlp.up", "passed"]
    assert not mods.loc["layers.1.mlp", "passed"] and not mods.loc["layers.1", "passed"]


def test_a_module_changed_after_export_is_named(exported, ids):
    m = tiny_decoder()
    with torch.no_grad():
        m.layers[0].norm2.weight.mul_(2.0)
    r = onnx_lab.compare_torch(m, exported, (ids,))
    assert r.first_divergence["module"] == "layers.0.norm2"
    assert "layers.0.norm2" in r.first_divergence["message"]


@pytest.mark.slow
def test_looser_preset_and_bad_input(exported, ids):
    r = onnx_lab.compare_torch(tiny_decoder(), exported, (ids.numpy(),), preset="fp16")
    assert r.passed and r.preset == "fp16"
    with pytest.raises(onnx_lab.errors.InputError, match="nn.Module"):
        onnx_lab.compare_torch(object(), exported, (ids,))
    with pytest.raises(onnx_lab.errors.InputError, match="input"):
        onnx_lab.compare_torch(tiny_decoder(), exported, (ids, ids))
    assert "TorchComparison(passed" in repr(r) and "<b>compare_torch" in r._repr_html_()
    assert np.isfinite(r.modules.max_abs.astype(float)).all()
    pytest.importorskip("matplotlib")
    assert r.plot().axes[0].get_title() == "ONNX against PyTorch, per module"
