"""Tensors held in onnxruntime's NCHWc blocked memory layout.

``ort:all`` (onnxruntime's layout optimization) rewrites Conv/Pool chains into
``com.microsoft.nchwc`` ops whose activations are stored channel-blocked: the same logical
shape as the NCHW tensor they replace, a different element order. Comparing such a tensor
element by element with the original one reports huge false errors, so alignment skips them.
"""

from __future__ import annotations

import json

from onnx_lab.core.model import LabModel

NCHWC_DOMAIN = "com.microsoft.nchwc"

#: Node metadata naming the outputs (indices) that hold a tensor of the model before in
#: another order of axes (``sink_transposes`` runs an NHWC region in NCHW): ``{"outputs":
#: [0], "perm": [...]}``. Alignment does not pair a marked tensor with an unmarked one
#: (:func:`layout_marks`).
LAYOUT_KEY = "onnx_lab.layout"


def layout_marks(model: LabModel) -> dict[str, tuple[int, ...]]:
    """{tensor: the perm its pass recorded} for the outputs a pass marked (:data:`LAYOUT_KEY`;
    never a graph output). A tensor marked on one side of a comparison only holds another
    order of axes than its counterpart: alignment does not pair them. Both marked alike
    (two versions after the same rewrite), they are compared as usual.

    Example:
        >>> layout_marks(onnx_lab.open("sample:convnet").model)
        {}
    """
    return model.cached(("layout_marks",), lambda: _marks(model))


def _marks(model: LabModel) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for e in model.index.entries.values():
        raw = e.node.metadata_props.get(LAYOUT_KEY)
        if not raw or e.graph:
            continue
        try:
            doc = json.loads(raw[:10_000])
            idxs, perm = doc.get("outputs", []), doc.get("perm", [])
            perm = tuple(int(p) for p in perm) if isinstance(perm, list) else ()
        except (ValueError, AttributeError, TypeError):  # hostile or foreign: nothing marked
            continue
        outs = e.node.outputs
        for i in idxs if isinstance(idxs, list) else []:
            if isinstance(i, int) and 0 <= i < len(outs) and outs[i].name and \
                    not outs[i].is_graph_output():
                out[outs[i].name] = perm
    return out


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
