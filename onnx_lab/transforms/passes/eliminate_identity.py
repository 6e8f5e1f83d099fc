"""eliminate_identity: remove Identity nodes by wiring their input to their readers."""

from __future__ import annotations

from onnx_lab.transforms.base import register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern
from onnx_lab.transforms.passes._shared import BypassPass


@register_pass("eliminate_identity")
class EliminateIdentity(BypassPass):
    """Remove Identity nodes (their readers read the Identity's input directly)."""

    no_match_reason = "no Identity node"
    pattern = Pattern("identity", "Identity")

    def describe(self, b: Binding) -> Found:
        return Found(f"Identity {b.root_id} only copies {b.root.inputs[0].name!r}")
