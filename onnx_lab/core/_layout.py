"""Tensors held in onnxruntime's NCHWc blocked memory layout.

``ort:all`` (onnxruntime's layout optimization) rewrites Conv/Pool chains into
``com.microsoft.nchwc`` ops whose activations are stored channel-blocked: the same logical
shape as the NCHW tensor they replace, a different element order. Comparing such a tensor
element by element with the original one reports huge false errors, so alignment skips them.
"""

from __future__ import annotations

from onnx_lab.core.model import LabModel

NCHWC_DOMAIN = "com.microsoft.nchwc"


def blocked_layout_tensors(model: LabModel) -> set[str]:
    """Names of main-graph tensors in NCHWc blocked layout.

    Outputs of ``com.microsoft.nchwc`` nodes are blocked, except ReorderOutput's (it converts
    back to NCHW); onnxruntime leaves layout-agnostic standard ops (Concat, Add, Relu...)
    between them, which carry the blocked layout on, so their outputs are blocked too.

    Example:
        >>> blocked_layout_tensors(onnx_lab.open("sample:convnet").model)
        set()
    """
    idx = model.index
    if not any(e.node.domain == NCHWC_DOMAIN for e in idx.entries.values()):
        return set()
    blocked: set[str] = set()
    for nid in idx.topo_order(""):
        node = idx.entries[nid].node
        if node.domain == NCHWC_DOMAIN:
            is_blocked = node.op_type != "ReorderOutput"
        else:
            is_blocked = any(v is not None and v.name in blocked for v in node.inputs)
        if is_blocked:
            blocked.update(v.name for v in node.outputs if v.name)
    return blocked
