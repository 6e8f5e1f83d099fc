"""Provenance: which nodes of the original model each node of a later version comes from.

Every transform stamps its new or changed nodes with ``metadata_props["onnx_lab.origin"]``, a
JSON list of node ids of the model as opened. The key composes across steps and survives
save/load, so every layer (alignment in numerics, the graph views in render, the history in the
façade) reads origins through this module. onnx_ir's own passes do not track provenance,
which is why it exists.

Example:
    >>> from onnx_lab.core.provenance import origins
    >>> lab.apply("fuse_conv_bn")
    >>> origins(lab.model)["/stem/conv/Conv"]
    ['/stem/conv/Conv', '/stem/bn/BatchNormalization']
"""

from __future__ import annotations

import functools
import json

import onnx_ir as ir

from onnx_lab.core._meta import load_json
from onnx_lab.core.model import LabModel
from onnx_lab.errors import unknown_name

__all__ = ["ORIGIN_KEY", "node_origin", "origins", "stamp_origins"]

ORIGIN_KEY = "onnx_lab.origin"


def node_origin(node: ir.Node, fallback: str) -> list[str]:
    """Original node ids of ``node`` (its ``onnx_lab.origin`` stamp, else ``[fallback]``)."""
    raw = node.metadata_props.get(ORIGIN_KEY)
    # Parsed once per stamp: every version of a model carries the same stamps, and each
    # step's verification reads them all (long ones, rare, are not kept).
    ids = _cached_stamp(raw) if raw is None or len(raw) <= 4096 else _stamp(raw)
    return list(ids) if ids is not None else [fallback]


def _stamp(raw: str | None) -> tuple[str, ...] | None:
    """The node ids of a stamp, or None when it is absent or unreadable."""
    value = load_json(raw, max_depth=1)
    if isinstance(value, list):
        # node ids are strings: a stamp of another shape (hostile or damaged) is ignored
        ids = [v for v in value if isinstance(v, str)]
        if len(ids) == len(value):  # [] is a stamp too: no known origin
            return tuple(ids)
    return None


_cached_stamp = functools.lru_cache(maxsize=1 << 16)(_stamp)


def origins(model: LabModel) -> dict[str, list[str]]:
    """For every node id of ``model``: the node ids of the original model it comes from.

    Example:
        >>> r = lab.apply("fuse_conv_bn")
        >>> origins(lab.model)["/stem/conv/Conv"]
        ['/stem/conv/Conv', '/stem/bn/BatchNormalization']
    """
    return NodeOrigins({nid: node_origin(e.node, nid) for nid, e in model.index.entries.items()})


class NodeOrigins(dict):
    """:func:`origins`' dict: an unknown node id is an UnknownNameError naming the close
    ones (a bare KeyError was all ``lab.origins["nosuch"]`` said)."""

    def __missing__(self, key: str) -> list[str]:
        raise unknown_name("node id", key, self.keys(),
                           fix="lab.nodes.node_id lists the current version's nodes.")


def stamp_origins(model: LabModel) -> None:
    """Write each node's origin into its metadata (in place; ids of ``model`` itself)."""
    for nid, e in model.index.entries.items():
        if ORIGIN_KEY not in e.node.metadata_props:
            e.node.metadata_props[ORIGIN_KEY] = json.dumps([nid])
