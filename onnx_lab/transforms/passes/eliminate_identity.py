"""eliminate_identity: remove Identity nodes by wiring their input to their readers."""

from __future__ import annotations

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.passes._util import alive, is_std, match, walk


def bypass_blocker(node, out_index: int = 0, in_index: int = 0, src=None) -> str | None:
    """Why ``node`` cannot be bypassed (graph output names must survive), or None.

    ``src`` is the value that would replace the output (default: input ``in_index``).
    """
    out = node.outputs[out_index]
    if src is None:
        src = node.inputs[in_index] if in_index < len(node.inputs) else None
    if src is None:
        return "it has no data input"
    if not out.is_graph_output():
        return None
    if src.is_graph_input():
        return f"it copies graph input {src.name!r} to graph output {out.name!r}; both names " \
               "must survive"
    if src.is_graph_output():
        return f"it copies graph output {src.name!r} to graph output {out.name!r}; both names " \
               "must survive"
    if src.is_initializer():
        return f"its graph output {out.name!r} would become initializer {src.name!r}"
    if src.graph is not node.graph:
        return f"its graph output {out.name!r} reads {src.name!r} of an enclosing graph"
    return None


@register_pass("eliminate_identity")
class EliminateIdentity(LabPass):
    """Remove Identity nodes (their readers read the Identity's input directly)."""

    no_match_reason = "no Identity node"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        for nid, node in walk(model):
            if not is_std(node, "Identity"):
                continue
            why = bypass_blocker(node)
            if why:
                self.skip(nid, why)
                continue
            out.append(match(self.name, "identity", model, node, [],
                             f"Identity {nid} only copies {node.inputs[0].name!r}", 1))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            node = m.data["nodes"][0]
            if alive(node) and bypass_blocker(node) is None:
                rw.bypass(node)
