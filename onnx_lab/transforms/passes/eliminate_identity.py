"""eliminate_identity: remove Identity nodes by wiring their input to their readers."""

from __future__ import annotations

from onnx_lab.transforms.base import register_pass
from onnx_lab.transforms.matcher import Binding, Found, Pattern
from onnx_lab.transforms.passes._shared import BypassPass


@register_pass("eliminate_identity")
class EliminateIdentity(BypassPass):
    r"""Remove Identity nodes (their readers read the Identity's input directly).

    ### Identity (`eliminate_identity`)

    Identity(x) = x. Its readers are rewired to read x directly. When the Identity's output is a
    graph output, x takes over that name, so model outputs keep their names. An Identity that
    copies a graph input (or an initializer, or a value of an enclosing graph) to a graph output
    is kept: both names must survive."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("identity",)
    presets = {"safe": (10,)}  # clean-up first: chains become adjacent (transforms/presets.py)

    no_match_reason = "no Identity node"
    pattern = Pattern("identity", "Identity")

    def describe(self, b: Binding) -> Found:
        return Found(f"Identity {b.root_id} only copies {b.root.inputs[0].name!r}")
