"""Test-local passes and models for the transforms machinery (history, verify, tools...)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
from onnx import helper, numpy_helper

import onnx_lab
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import LabPass, Match, Param, Rewrite, register_pass

CHAIN = """
chain (float[batch, 8] x) => (float[batch, 4] y) {
    h1 = MatMul(x, W1)
    i1 = Identity(h1)
    r1 = Relu(i1)
    i2 = Identity(r1)
    h2 = MatMul(i2, W2)
    y = Identity(h2)
}
"""


def chain_proto() -> onnx.ModelProto:
    """x -> MatMul -> Identity -> Relu -> Identity -> MatMul -> Identity -> y (batch dim)."""
    rng = np.random.default_rng(0)
    graph = onnx.parser.parse_graph(CHAIN)
    graph.initializer.extend([
        numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "W2")])
    for i, node in enumerate(graph.node):
        node.name = f"n{i}_{node.op_type}"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ir3_conv_bn_proto() -> onnx.ModelProto:
    """Conv + BatchNormalization at IR 3 / opset 9, its weights also listed as graph inputs
    (as IR < 4 requires)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", rng.standard_normal((4, 3, 1, 1)).astype(np.float32)),
        ("s", np.full(4, 2.0, np.float32)), ("b", np.full(4, 0.5, np.float32)),
        ("m", np.full(4, 0.1, np.float32)), ("v", np.full(4, 4.0, np.float32))]]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"], name="bn")],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])]
        + [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 3
    return m


def chain_lab(**kw) -> onnx_lab.Lab:
    return onnx_lab.open(chain_proto(), dims=kw.pop("dims", {"batch": 2}), **kw)


@register_pass("test_drop_identity", kind="test")
class DropIdentity(LabPass):
    """Test pass: remove Identity nodes, one match each."""

    no_match_reason = "no Identity node"

    def find(self, model: LabModel) -> list[Match]:
        return [Match(f"test_drop_identity:{nid}", "identity", self.name, [nid], nid,
                      f"remove {nid}", saving_nodes=1)
                for nid in model.index.topo_order("")
                if model.index.node(nid).op_type == "Identity"]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            rw.bypass(model.index.node(m.anchor))


@register_pass("test_perturb_weight", kind="test")
class PerturbWeight(LabPass):
    """Test pass (deliberately wrong): add `delta` to the weight of one MatMul."""

    params = (Param("node_id", str, "n4_MatMul", "the MatMul"),
              Param("delta", float, 0.5, "added to every weight"))

    def find(self, model: LabModel) -> list[Match]:
        nid = self.options["node_id"]
        return [Match(f"test_perturb_weight:{nid}", "perturb", self.name, [nid], nid, "bad")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = model.index.node(self.options["node_id"])
        w = const_array(node.inputs[1])
        new = rw.add_initializer(node.graph, "perturbed", w + self.options["delta"])
        node.replace_input_with(1, new)
        rw.record(node, [node])


def save_external(proto: onnx.ModelProto, path) -> None:
    """Write ``proto`` with every tensor in ``<name>.data`` next to it."""
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)


def scoped_layers(n: int) -> onnx.ModelProto:
    """A residual stack of ``n`` layers of 6 nodes each (MatMul, Add, Relu, Sigmoid, Mul and the
    residual Add), named by scope (/layers.i/fc, act, gate, res): the big graphs of the Editor's
    tests."""
    from onnx import TensorProto

    nodes, inits, x = [], [], "x"
    for i in range(n):
        s, t = f"/layers.{i}", [f"t{i}_{j}" for j in range(6)]
        inits += [numpy_helper.from_array(np.eye(4, dtype=np.float32) * 0.5, f"w{i}"),
                  numpy_helper.from_array(np.full(4, 0.01, np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [t[0]], name=f"{s}/fc/MatMul"),
                  helper.make_node("Add", [t[0], f"b{i}"], [t[1]], name=f"{s}/fc/Add"),
                  helper.make_node("Relu", [t[1]], [t[2]], name=f"{s}/act/Relu"),
                  helper.make_node("Sigmoid", [t[2]], [t[3]], name=f"{s}/gate/Sigmoid"),
                  helper.make_node("Mul", [t[2], t[3]], [t[4]], name=f"{s}/gate/Mul"),
                  helper.make_node("Add", [x, t[4]], [t[5]], name=f"{s}/res/Add")]
        x = t[5]
    g = helper.make_graph(nodes, "layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [1, 4])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def export_tiny_bert(path, *, dynamo: bool, opset: int = 17, vocab: int = 100, heads: int = 2,
                     positions: int = 64, pooled: bool = True, axes: tuple[str, str] = ("batch",
                                                                                      "seq"),
                     output_names: list[str] | None = None) -> None:
    """A transformers BertModel (2 layers, hidden 32, FFN 64, random weights, seed 0) exported
    to ``path`` in a fresh interpreter (after torch's dynamo exporter ran in this process,
    importing transformers' BertModel can fail on torchvision). ``pooled``: the pooler's
    output too; TorchScript exports get dynamic ``axes`` on the inputs (and outputs). Skips
    the test without torch or transformers."""
    import subprocess
    import sys
    import textwrap

    import pytest

    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    outs = "out.last_hidden_state, out.pooler_output" if pooled else "out.last_hidden_state"
    dyn = {"input_ids": {0: axes[0], 1: axes[1]}, "attention_mask": {0: axes[0], 1: axes[1]}}
    if output_names:
        dyn.update({n: {0: axes[0], 1: axes[1]} for n in output_names[:1]})
    how = ("dynamo=True, external_data=True" if dynamo else
           f"dynamo=False, opset_version={opset}, dynamic_axes={dyn!r}")
    script = textwrap.dedent(f"""
        import warnings, torch, transformers
        torch.manual_seed(0)
        cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads={heads}, intermediate_size=64,
                                      vocab_size={vocab}, max_position_embeddings={positions})
        bert = transformers.BertModel(cfg).eval()
        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = bert
            def forward(self, ids, am):
                out = self.m(input_ids=ids, attention_mask=am)
                return {outs}
        ids = torch.randint(0, {vocab}, (1, 8))
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(Wrapped().eval(), (ids, torch.ones_like(ids)), {str(path)!r},
                              {how}, input_names=["input_ids", "attention_mask"],
                              output_names={output_names!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
