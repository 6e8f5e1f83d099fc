"""constants_to_initializers: Constant nodes become initializers of the same name.

The Constant's tensor is read with :func:`onnx_lab.core.values.constant_tensor`, which changes
nothing: the pass runs on a clone that shares its tensors with the version before it, and
``onnx_ir.convenience.get_const_tensor`` would name that shared tensor (changing the earlier
version's bytes). The initializer gets a copy of the data under the value's name.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from onnx_lab.core.values import constant_tensor
from onnx_lab.errors import LabError
from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass


@register_pass("constants_to_initializers")
class ConstantsToInitializers(PatternPass):
    r"""Turn Constant nodes of the main graph into initializers of the same name.

    ### Constant nodes → initializers (`constants_to_initializers`)

    A Constant node holds a tensor in an attribute; an initializer holds the same tensor in the
    graph's weight list. Turning one into the other (same tensor name) changes no value but lets
    every tool that looks at initializers (weight statistics, external data, deduplication) see
    it. PaddlePaddle exports keep all their weights in Constant nodes."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("constant_node",)

    no_match_reason = "no Constant node in the main graph"
    pattern = Pattern("constant_node", "Constant", main_only=True)

    def check(self, b: Binding) -> str | None:
        v = b.root.outputs[0]
        if v.is_graph_output():
            return f"its output {v.name!r} is a graph output"
        if "sparse_value" in b.root.attributes:
            return "it holds a sparse tensor"
        t = constant_tensor(v)
        if t is None:
            return "its value cannot be read"
        try:
            t.numpy()
        except LabError as e:  # data that disagrees with its dims, a missing data file
            return f"its value cannot be read ({e.problem})"
        return None

    def describe(self, b: Binding) -> Found:
        return Found(f"Constant {b.root_id} becomes initializer {b.root.outputs[0].name!r}")

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        node = nodes[0]
        v = node.outputs[0]
        arr = np.array(constant_tensor(v).numpy())  # a copy: nothing shared is touched
        name = v.name
        tmp = rw.add_initializer(node.graph, f"{name}__init", arr)
        v.replace_all_uses_with(tmp)
        rw.remove(node)
        v.name = None
        tmp.name = name  # onnx_ir renames the initializer entry too
