"""constants_to_initializers: Constant nodes become initializers of the same name."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.transforms.base import Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern, PatternPass


@register_pass("constants_to_initializers")
class ConstantsToInitializers(PatternPass):
    """Turn Constant nodes of the main graph into initializers of the same name."""

    no_match_reason = "no Constant node in the main graph"
    pattern = Pattern("constant_node", "Constant", main_only=True)

    def check(self, b: Binding) -> str | None:
        v = b.root.outputs[0]
        if v.is_graph_output():
            return f"its output {v.name!r} is a graph output"
        if "sparse_value" in b.root.attributes:
            return "it holds a sparse tensor"
        if ir.convenience.get_const_tensor(v) is None:
            return "its value cannot be read"
        return None

    def describe(self, b: Binding) -> Found:
        return Found(f"Constant {b.root_id} becomes initializer {b.root.outputs[0].name!r}")

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        node = nodes[0]
        v = node.outputs[0]
        arr = ir.convenience.get_const_tensor(v).numpy()
        name = v.name
        tmp = rw.add_initializer(node.graph, f"{name}__init", arr)
        v.replace_all_uses_with(tmp)
        rw.remove(node)
        v.name = None
        tmp.name = name  # onnx_ir renames the initializer entry too
