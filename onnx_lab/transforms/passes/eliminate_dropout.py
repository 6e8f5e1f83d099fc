"""eliminate_dropout: remove Dropout nodes that do nothing at inference."""

from __future__ import annotations

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, const_array, register_pass
from onnx_lab.transforms.passes._util import alive, is_std, match, walk
from onnx_lab.transforms.passes.eliminate_identity import bypass_blocker


def _blocker(node) -> str | None:
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        mode = const_array(node.inputs[2])
        if mode is None:
            return f"training_mode comes from {node.inputs[2].name!r}, not a constant"
        if bool(mode.reshape(-1)[0]):
            return "training_mode is true (it drops values)"
    if node.attributes.get("is_test") is not None and node.attributes["is_test"].as_int() == 0:
        return "is_test=0 (training behaviour)"
    if len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output()):
        return f"its mask output {node.outputs[1].name!r} is used"
    return bypass_blocker(node)


@register_pass("eliminate_dropout")
class EliminateDropout(LabPass):
    """Remove inference-time Dropout (training_mode absent or false, mask unused)."""

    no_match_reason = "no Dropout node"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        for nid, node in walk(model):
            if not is_std(node, "Dropout"):
                continue
            why = _blocker(node)
            if why:
                self.skip(nid, why)
                continue
            out.append(match(self.name, "dropout", model, node, [],
                             f"Dropout {nid} is the identity at inference", 1))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            node = m.data["nodes"][0]
            if not alive(node) or _blocker(node) is not None:
                continue
            extra = [v for v in node.inputs[1:] if v is not None]
            if rw.bypass(node):
                for v in extra:
                    rw.drop_if_unused(v)
