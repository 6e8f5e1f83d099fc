"""Which op type to keep out of a conversion so that its result loads as a deployment loads it.

A float16 or int8 conversion can be judged correct (its runs, with onnxruntime's graph
optimizations off, match the reference) and still not load at onnxruntime's default options:
onnxruntime 1.32 aborts loading a dynamic-int8 LSTM and crashes (signal 11) on an opset-20
``Gelu`` in float16, both with the optimizations on. Such a result is refused by
``to_fp16``/``to_int8_*`` and by every save; this module finds what to keep in higher
precision instead: the conversion is redone with all the nodes of one op type kept out, op
type by op type (recurrent and control-flow ops first, then the rarest), each checked in a
child process (:func:`onnx_lab.runtime.session.default_load_regression`), until one loads.

Example:
    >>> found = load_blocker(lambda ids: fp16_model(lab, block_list=ids), lab.model, ids)
    >>> found.op_type, found.node_ids
    ('Gelu', ['/block/act/Gelu'])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from onnx_lab.core.model import LabModel
from onnx_lab.errors import LabError
from onnx_lab.runtime.session import default_load_regression

__all__ = ["LoadBlocker", "load_blocker", "op_types_to_try"]

logger = logging.getLogger(__name__)

#: Op types tried first: the kernels that have aborted onnxruntime at load after a conversion.
SUSPECTS = ("LSTM", "GRU", "RNN", "Loop", "Scan", "If")


@dataclass(frozen=True)
class LoadBlocker:
    """An op type whose nodes, kept out of the conversion, make its result load.

    Attributes:
        op_type: the op type.
        node_ids: its nodes among the candidates (those to keep in higher precision).
        model: the conversion with them kept out (it loads at default options).
        tried: the op types tried, in order, this one last.
    """

    op_type: str
    node_ids: list[str]
    model: LabModel
    tried: list[str]


def op_types_to_try(source: LabModel, candidates: Sequence[str], limit: int = 8
                    ) -> dict[str, list[str]]:
    """The op types of ``candidates`` (node ids of ``source``) :func:`load_blocker` tries, in
    its order (recurrent and control-flow ops first, then the rarest), each with its nodes."""
    by_op: dict[str, list[str]] = {}
    for nid in candidates:
        entry = source.index.entries.get(nid)
        if entry is not None:
            by_op.setdefault(entry.node.op_type, []).append(nid)
    order = sorted(by_op, key=lambda op: (op not in SUSPECTS, len(by_op[op]), op))[:limit]
    return {op: by_op[op] for op in order}


def load_blocker(convert: Callable[[list[str]], LabModel], source: LabModel,
                 candidates: Sequence[str], limit: int = 8) -> LoadBlocker | None:
    """The first op type (of ``candidates``, node ids of ``source`` the conversion changes)
    whose nodes kept out of ``convert`` give a model that loads at onnxruntime's default
    options, trying at most ``limit`` op types; None when none does (or past 2 GB of
    weights, where the load check is skipped). ``convert(ids)`` redoes the conversion with
    ``ids`` kept out."""
    by_op = op_types_to_try(source, candidates, limit)
    tried: list[str] = []
    for op in by_op:
        tried.append(op)
        try:
            model = convert(by_op[op])
        except LabError as e:  # this set does not convert: try the next op type
            logger.info("keeping the %s nodes out: the conversion fails (%s)", op, e.problem)
            continue
        if default_load_regression(model, source) is None:
            return LoadBlocker(op, by_op[op], model, tried)
    return None
