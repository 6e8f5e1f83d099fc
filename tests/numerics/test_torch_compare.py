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
    # a dict said "1 input(s) given"; a forward that fails raised torch's own error
    with pytest.raises(onnx_lab.errors.InputError, match="not a dict"):
        onnx_lab.compare_torch(tiny_decoder(), exported, {"input_ids": ids})
    with pytest.raises(onnx_lab.errors.InputError, match="forward failed"):
        onnx_lab.compare_torch(tiny_decoder(), exported, (ids.float(),))
    assert "TorchComparison(passed" in repr(r) and "<b>compare_torch" in r._repr_html_()
    assert np.isfinite(r.modules.max_abs.astype(float)).all()
    pytest.importorskip("matplotlib")
    assert r.plot().axes[0].get_title() == "ONNX against PyTorch, per module"


class _Reused(torch.nn.Module):
    """A Linear called twice, then Conv -> BatchNorm -> ReLU with dropout (training mode)."""

    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.shared(self.shared(x).relu()))


class _ConvBn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.act = torch.nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


def test_a_reused_module_is_compared_call_for_call(tmp_path):
    # PyTorch's first call was compared with the ONNX tensor of the last: a false FAILED
    torch.manual_seed(0)
    m, x = _Reused().eval(), torch.randn(2, 8)
    path = tmp_path / "reused.onnx"
    torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=17)
    r = onnx_lab.compare_torch(m, onnx_lab.open(path), (x,))
    assert r.passed and r.first_divergence is None, r.modules
    assert any("called more than once (shared)" in n for n in r.notes)


def test_a_module_in_training_mode_is_run_as_the_export_ran_it(tmp_path):
    # a freshly built module is in training mode: its Dropout failed the comparison
    torch.manual_seed(0)
    m, x = _Reused().eval(), torch.randn(2, 8)
    path = tmp_path / "reused.onnx"
    torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=17)
    m.train()
    r = onnx_lab.compare_torch(m, onnx_lab.open(path), (x,))
    assert r.passed and any("training mode" in n for n in r.notes)
    assert m.training and m.drop.training  # put back as it was


def test_a_batchnorm_the_exporter_folded_into_its_conv(tmp_path):
    # TorchScript folds the BatchNorm into the Conv node: PyTorch's conv-only output was
    # compared with conv + bn and "conv" was blamed on an exact export
    torch.manual_seed(0)
    m = _ConvBn().eval()
    m.bn.running_mean.uniform_(-1, 1)
    m.bn.running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "convbn.onnx"
    torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=17)
    r = onnx_lab.compare_torch(m, onnx_lab.open(path), (x,))
    assert r.passed and r.first_divergence is None, r.modules
    rows = r.modules.set_index("module")
    assert rows.loc["bn", "match"] == "folded into 'conv' by the exporter"
    assert "which the exporter folded in" in rows.loc["conv", "match"]


class _Residual(torch.nn.Module):
    """torchvision's BasicBlock without BatchNorm: one ReLU module called before conv2 and
    again after the residual Add."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return self.relu(x + self.conv2(self.relu(self.conv1(x))))


def test_a_reused_module_is_judged_where_its_last_call_finished(tmp_path):
    # the ReLU stood in PyTorch's order at its first call, before conv2, but was compared at
    # its last call, after the Add that carries conv2's error: a weight planted in conv2 was
    # blamed on 'relu'
    torch.manual_seed(0)
    m, x = _Residual().eval(), torch.randn(1, 4, 8, 8)
    path = tmp_path / "residual.onnx"
    torch.onnx.export(m, (x,), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    model = onnx.load(path)
    conv2 = next(n for n in model.graph.node if n.name == "/conv2/Conv")
    bad = _planted(path, conv2.input[1], tmp_path)
    r = onnx_lab.compare_torch(m, onnx_lab.open(bad), (x,))
    assert not r.passed
    assert r.first_divergence["module"] == "conv2", r.modules
    order = list(r.modules.module)
    assert order.index("conv2") < order.index("relu")
