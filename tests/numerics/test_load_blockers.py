"""A conversion judged right that does not load as a deployment loads it: what to keep out.

onnxruntime 1.32 crashes (signal 11) loading, at its default options, the float16 conversion of
a dynamo-exported transformer block whose ``nn.GELU`` became an opset-20 ``Gelu``; with the
optimizations off (how trials and verification run) it loads and is right. Found by running the
docs' examples on a user's export: ``to_fp16`` refused with advice naming a Loop/LSTM the model
does not have, and ``find_precision("fp16")`` returned a passing plan that every save refused.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import onnx_lab
from onnx_lab.errors import PassError


@pytest.fixture(scope="module")
def block(tmp_path_factory):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.ln = nn.Embedding(100, 32), nn.LayerNorm(32)
            self.att = nn.MultiheadAttention(32, 4, batch_first=True)
            self.ff = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
            self.head = nn.Linear(32, 100)

        def forward(self, ids):
            h = self.emb(ids)
            a = self.ln(h)
            h = h + self.att(a, a, a, need_weights=False)[0]
            return self.head(h + self.ff(self.ln(h)))

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("block") / "model.onnx"
    dim = torch.export.Dim
    torch.onnx.export(Block().eval(), (torch.randint(0, 100, (1, 8)),), str(path), dynamo=True,
                      external_data=True, input_names=["input_ids"],
                      dynamic_shapes={"ids": {0: dim("batch"), 1: dim("seq")}})
    lab = onnx_lab.open(path, dims={"seq": 16})
    from onnx_lab.numerics.quantize import fp16_model
    from onnx_lab.runtime.session import default_load_regression

    if default_load_regression(fp16_model(lab), lab.model) is None:
        pytest.skip("this onnxruntime loads the float16 Gelu at its default options")
    return path


def _loads(path) -> bool:
    code = f"import onnxruntime as o; o.InferenceSession({str(path)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def test_to_fp16_names_the_op_type_to_keep_out_and_it_works(block, tmp_path):
    lab = onnx_lab.open(block, dims={"seq": 16})
    with pytest.raises(PassError) as e:
        onnx_lab.to_fp16(lab)
    assert "block_list=['Gelu'] (checked" in e.value.fix, e.value.fix
    half = onnx_lab.to_fp16(lab, block_list=["Gelu"])
    assert _loads(half.save(tmp_path / "half.onnx"))


def test_a_precision_plan_keeps_what_makes_it_load(block, tmp_path):
    lab = onnx_lab.open(block, dims={"seq": 16})
    plan = lab.find_precision("fp16", progress=False)
    gelu = list(lab.original.nodes.query("op_type == 'Gelu'")["node_id"])
    assert plan.passed and set(gelu) <= set(plan.kept)
    assert "load" in set(plan.trials["phase"])
    assert any("Gelu node(s) kept in higher precision so that the result loads" in n
               for n in plan.notes), plan.notes
    assert _loads(plan.save(tmp_path / "plan.onnx"))
