"""constants_to_initializers: Constant nodes become initializers of the same name."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.passes._util import alive, is_std, match, walk


@register_pass("constants_to_initializers")
class ConstantsToInitializers(LabPass):
    """Turn Constant nodes of the main graph into initializers of the same name."""

    no_match_reason = "no Constant node in the main graph"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        for nid, node in walk(model, main_only=True):
            if not is_std(node, "Constant"):
                continue
            v = node.outputs[0]
            if v.is_graph_output():
                self.skip(nid, f"its output {v.name!r} is a graph output")
                continue
            if "sparse_value" in node.attributes:
                self.skip(nid, "it holds a sparse tensor")
                continue
            t = ir.convenience.get_const_tensor(v)
            if t is None:
                self.skip(nid, "its value cannot be read")
                continue
            out.append(match(self.name, "constant_node", model, node, [],
                             f"Constant {nid} becomes initializer {v.name!r}", 1))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            node = m.data["nodes"][0]
            if not alive(node):
                continue
            v = node.outputs[0]
            arr = ir.convenience.get_const_tensor(v).numpy()
            name = v.name
            tmp = rw.add_initializer(node.graph, f"{name}__init", arr)
            v.replace_all_uses_with(tmp)
            rw.remove(node)
            v.name = None
            tmp.name = name  # onnx_ir renames the initializer entry too
