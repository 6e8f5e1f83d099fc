"""eliminate_dropout: remove Dropout nodes that do nothing at inference."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.values import const_array
from onnx_lab.transforms.base import register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern
from onnx_lab.transforms.passes._shared import BypassPass, bypass_blocker


def _blocker(node: ir.Node) -> str | None:
    """Why the Dropout ``node`` is not the identity at inference (or cannot go), or None."""
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
class EliminateDropout(BypassPass):
    r"""Remove inference-time Dropout (training_mode absent or false, mask unused).

    ### Dropout at inference (`eliminate_dropout`)

    With `training_mode` absent or false, Dropout(x) = x (the inverted-dropout scaling 1/(1−p)
    happens only in training). The node is removed like an Identity. It is kept when
    `training_mode` is true or not a constant, or when its `mask` output is used."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("dropout",)
    presets = {"safe": (20,)}  # clean-up first: chains become adjacent (transforms/presets.py)

    no_match_reason = "no Dropout node"
    pattern = Pattern("dropout", "Dropout")

    def blocker(self, node: ir.Node, data_input: int) -> str | None:
        return _blocker(node)

    def describe(self, b: Binding) -> Found:
        return Found(f"Dropout {b.root_id} is the identity at inference")
