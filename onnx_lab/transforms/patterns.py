"""All optimization opportunities of a model: one row per match of every registered graph pass.

Example:
    >>> from onnx_lab.transforms.patterns import find_patterns
    >>> find_patterns(lab.model)[["match_id", "pattern", "saving_nodes"]]
"""

from __future__ import annotations

import logging

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import _REGISTRY, Match, get_pass, pass_names

logger = logging.getLogger(__name__)

__all__ = ["COLUMNS", "find_patterns", "find_matches"]

COLUMNS = ["match_id", "pattern", "pass", "node_ids", "anchor", "description", "saving_nodes",
           "saving_bytes"]


def find_matches(model: LabModel) -> list[Match]:
    """Every Match of every registered graph pass, in topological order of the anchor.

    Anchors that are not nodes (initializer names) sort by their first node, else last.
    """
    found: list[tuple[int, int, int, Match]] = []
    topo = {nid: e.topo for nid, e in model.index.entries.items()}
    end = len(topo)
    for order, name in enumerate(pass_names()):
        if _REGISTRY[name].kind != "graph":
            continue
        for k, m in enumerate(get_pass(name).find(model)):
            pos = topo.get(m.anchor)
            if pos is None:
                pos = min((topo[n] for n in m.node_ids if n in topo), default=end)
            found.append((pos, order, k, m))
    found.sort(key=lambda t: t[:3])
    return [m for *_, m in found]


def find_patterns(model: LabModel) -> pd.DataFrame:
    """The optimization opportunities of ``model`` as a table.

    Columns:
        match_id (str: ``"{pass}:{anchor}"``, stable for one model version; pass it to
        ``lab.apply(pass, matches=[...])``), pattern (str: ``conv_bn``, ``conv_bn_relu``,
        ``conv_add_bias``, ``matmul_add``, ``constant_subgraph``, ``dead_nodes``, ``identity``,
        ``dropout``, ``transpose_cancel``, ``transpose_merge``, ``noop_*``, ``reshape_chain``,
        ``squeeze_cancel``, ``squeeze_merge``, ``unsqueeze_merge``, ``duplicate_initializer``,
        ``unused_initializer``, ``constant_node``), pass (str: the pass that rewrites it),
        node_ids (list[str]: the nodes involved, anchor first), anchor (str: a node id, or an
        initializer name for initializer patterns), description (str), saving_nodes (int:
        nodes fewer after the rewrite), saving_bytes (int: weight bytes fewer; negative when
        a constant fold makes the model bigger).

    One row per match, in topological order of the anchor.

    Example:
        >>> df = find_patterns(onnx_lab.open("sample:convnet").model)
        >>> df.loc[df.pattern == "conv_bn_relu", "match_id"].tolist()
        ['fuse_conv_bn:/stem/conv/Conv', 'fuse_conv_bn:/block1/conv/Conv']
    """
    rows = [(m.match_id, m.pattern, m.pass_name, list(m.node_ids), m.anchor, m.description,
             int(m.saving_nodes), int(m.saving_bytes)) for m in find_matches(model)]
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype({"saving_nodes": "int64", "saving_bytes": "int64"})
