"""fold_shapes: a Shape (or Size) of a tensor whose shape the model fixes becomes a constant."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass
from onnx_lab.transforms.passes._util import static_shape


def _shape_value(node: ir.Node, shape: tuple[int, ...]) -> np.ndarray:
    """What ``node`` (Shape with its start/end, or Size) returns for ``shape``."""
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    rank = len(shape)
    start = node.attributes.get_int("start", 0)
    end = node.attributes.get_int("end", rank)
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = max(0, min(rank, end + rank if end < 0 else end))
    return np.array(shape[start:end], dtype=np.int64)


@register_pass("fold_shapes")
class FoldShapes(PatternPass):
    r"""Turn a Shape (or Size) of a tensor whose shape the model fixes into a constant.

    ### Shapes the model fixes (`fold_shapes`)

    Exporters compute shapes at run time: `Shape → Gather → Unsqueeze → Concat → Reshape`
    (tf2onnx's attention and LayerNorm, TorchScript's `view(x.size(0), -1)`). When the model
    declares every input dim, ONNX shape inference knows each such tensor's shape, so its
    `Shape` is a constant:

    $$\mathrm{Shape}(x) = [d_0, \dots, d_{r-1}]\quad\text{(}d_i\text{ all known)}$$

    The Shape becomes an initializer holding those numbers (its `start`/`end` respected; a
    `Size` their product), and `fold_constants`, which runs after it in `safe`, folds the
    chain that computed from it. A dim that is symbolic (`batch`) stays computed: a size
    given to the Lab (`dims=`) is one run's, not the model's, and is never folded in; nor is
    a shape the file only declares (a `value_info` written at batch 1 into a model whose
    input says `batch`: onnxruntime's optimizer folds it in, and the model then fails at
    batch 2): the shape must follow from the inputs and weights.

    **Why it is safe.** The value is what the Shape computes for every input the model
    accepts; a shape inference the graph contradicts shows in the step's verification."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("static_shape",)
    presets = {"safe": (35,)}  # before fold_constants folds what reads it (presets.py)

    no_match_reason = "no Shape or Size of a tensor whose shape the model fixes"
    pattern = Pattern("static_shape", ("Shape", "Size"), main_only=True)

    def check(self, b: Binding) -> str | None:
        node = b.root
        out = node.outputs[0]
        if out.is_graph_output():
            return f"its output {out.name!r} is a graph output"
        if not node.inputs or node.inputs[0] is None:
            return "it has no input"
        if static_shape(b.model, node.inputs[0]) is None:
            return (f"the shape of {node.inputs[0].name!r} is not fixed by the model (a "
                    "symbolic or unknown dim)")
        return None

    def describe(self, b: Binding) -> Found:
        value = _shape_value(b.root, static_shape(b.model, b.root.inputs[0]))
        return Found(f"{b.root.op_type} {b.root_id} of {b.root.inputs[0].name!r} is "
                     f"{value.tolist()} for every input the model takes",
                     data={"value": value.tolist(), "scalar": value.ndim == 0})

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        node = nodes[0]
        if node.graph is None:
            return
        value = np.array(m.data["value"], dtype=np.int64)
        out = node.outputs[0]
        name = out.name
        const = rw.add_initializer(node.graph, f"{name}__shape", value)
        out.replace_all_uses_with(const)
        rw.remove(node)
        out.name = None
        const.name = name  # the constant keeps the tensor's name (onnx_ir renames the entry)
