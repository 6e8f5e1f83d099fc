"""remove_zipmap: give a classifier tensor outputs by removing its ZipMap nodes.

skl2onnx and onnxmltools end every classifier with an ai.onnx.ml ZipMap, whose output is a
sequence of maps (``seq(map(int64,float))``, one ``{label: probability}`` per sample); most
runtimes and serving stacks want the ``[N, classes]`` probabilities tensor the ZipMap reads.
This pass removes the ZipMap and makes that tensor the graph output, under the output's name:
the name stays, its type changes from the sequence of maps to a float tensor. That is an
interface change the user asks for by running the pass (it is in no preset); verification
compares the new tensor with the old maps' values row by row, in key order (onnxruntime
returns a map's keys sorted, so the pass requires the class labels in ascending order, as
scikit-learn, LightGBM and XGBoost write them).
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass
from onnx_lab.transforms.passes._shared import bypass_blocker


def _labels(node: ir.Node) -> list | None:
    for name in ("classlabels_int64s", "classlabels_strings"):
        a = node.attributes.get(name)
        if a is not None:
            return list(a.value)
    return None


@register_pass("remove_zipmap")
class RemoveZipMap(PatternPass):
    r"""Replace each ZipMap output by the probabilities tensor it reads (the output's type
    becomes a float tensor).

    ### ZipMap → the probabilities tensor (`remove_zipmap`)

    ZipMap(P, labels) turns the `[N, C]` probabilities P into N maps
    $\{\ell_j: P_{ij}\}_{j<C}$, a `seq(map(int64,float))` output (skl2onnx's and onnxmltools'
    default for every classifier). The pass removes the ZipMap and makes P the graph output under
    the output's name: the name stays, the **type changes** to a float tensor, which is an
    interface change you ask for by running the pass (it is in no preset). Verification compares
    row i of P with map i's values in key order. Kept when the maps are read by another node,
    when the labels are not in ascending order (the maps come back with sorted keys), or when P
    is itself a graph input or output."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("zipmap",)

    no_match_reason = "no ai.onnx.ml ZipMap node"
    pattern = Pattern("zipmap", "ZipMap", domains=("ai.onnx.ml",), main_only=True)

    def check(self, b: Binding) -> str | None:
        node = b.root
        out = node.outputs[0] if node.outputs else None
        if out is None or not out.is_graph_output():
            return "its maps are read by other nodes, which need maps, not a tensor"
        if out.uses():
            return f"its maps are also read by node {out.uses()[0].node.name!r}"
        labels = _labels(node)
        if labels is None:
            return "it has no class labels (classlabels_int64s or classlabels_strings)"
        if labels != sorted(labels):
            return ("its class labels are not in ascending order: the maps (keys sorted) "
                    "and the tensor (columns in label order) would not line up")
        return bypass_blocker(node, 0, 0)

    def describe(self, b: Binding) -> Found:
        src = b.root.inputs[0]
        return Found(f"ZipMap {b.root_id} turns {src.name!r} into a sequence of maps; the "
                     f"output {b.root.outputs[0].name!r} becomes that tensor")

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        node = nodes[0]
        if self.check_node(node) is not None:
            return
        src = node.inputs[0]
        info = rw.model.types().get(src.name)
        shape = src.shape
        if shape is None and info is not None and info.shape is not None:
            shape = ir.Shape([d if d is not None else None for d in info.shape])
        if shape is None:
            # ai.onnx.ml 1's TreeEnsembleClassifier (skl2onnx's RandomForest) infers no
            # shape: the ZipMap's input is [N, C], one column per label (its spec). A graph
            # output without a shape fails onnx's checker, and onnxsim after this pass.
            shape = ir.Shape([None, len(_labels(node) or ())])
        dtype = src.dtype or ir.DataType.FLOAT
        if rw.bypass(node):
            src.type = ir.TensorType(dtype)
            src.shape = shape
            rw.notes.append(f"output {src.name!r} is now a {ir.DataType(dtype).name.lower()} "
                            "tensor (it was a sequence of maps)")

    def check_node(self, node: ir.Node) -> str | None:
        """The blockers that an earlier rewrite may have changed (bypass's own)."""
        return bypass_blocker(node, 0, 0)
