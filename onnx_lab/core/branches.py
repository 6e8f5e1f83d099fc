"""Graph inputs that choose the branches of ``If`` nodes, and which branches each value takes.

optimum's merged decoders hold all their compute in one ``If`` on the boolean graph input
``use_cache_branch``: ``then_branch`` reads the KV cache, ``else_branch`` recomputes without
it. A run on one value of that input checks one branch only, so whatever judges a model on
seeded inputs (verification, compare, the precision searches) needs one sample per value:
:func:`branch_switches` finds such inputs; the feeds (``runtime/feeds.py``) build the samples.

Only conditions that are a boolean graph input of one element, or computed from one by a
chain of ``Identity``, ``Cast``, ``Not``, ``Equal`` / ``Xor`` / ``And`` / ``Or`` with a
constant and the ops that only reshape (``Squeeze``, ``Unsqueeze``, ``Reshape``, ``Flatten``),
are followed: the value of the condition for each value of the input is then known exactly.
Any other condition (computed from data, from two inputs) is left alone, never guessed.

Example:
    >>> [s.input for s in branch_switches(lab.model)]
    ['use_cache_branch']
    >>> branch_switches(lab.model)[0].taken[True]
    ('optimum::if/then_branch',)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core.llm import decoder_io
from onnx_lab.core.shapes import shape_tuple
from onnx_lab.core.values import const_array
from onnx_lab.errors import CacheError

if TYPE_CHECKING:
    from onnx_lab.core.model import LabModel

__all__ = ["BranchSwitch", "branch_switches", "switch_values", "branch_labels", "unexercised",
           "untaken_bodies"]

# Ops a condition may pass through on its way from the input (one non-constant input each).
_RESHAPES = frozenset({"Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten"})
_WITH_CONSTANT = {"Equal": np.equal, "Xor": np.logical_xor, "And": np.logical_and,
                  "Or": np.logical_or}
_MAX_CHAIN = 16


@dataclass(frozen=True)
class BranchSwitch:
    """A boolean graph input that decides ``If`` conditions.

    Attributes:
        input: the graph input's name.
        taken: value -> the body graph paths that run for it (``"optimum::if/then_branch"``).
        cache_value: the value whose branches read the KV cache inputs (optimum's
            ``use_cache_branch=True``), None when both or neither do.
    """

    input: str
    taken: Mapping[bool, tuple[str, ...]]
    cache_value: bool | None = None

    def label(self, value: bool) -> str:
        """``"use_cache_branch=True (optimum::if/then_branch)"``."""
        paths = self.taken.get(value, ())
        where = f" ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''})" if paths else ""
        return f"{self.input}={value}{where}"


def branch_switches(model: LabModel) -> list[BranchSwitch]:
    """The boolean graph inputs that decide ``If`` conditions (see the module doc), in input
    order; empty for a model without such an ``If`` (cached on the model)."""
    return model.cached(("branch_switches",), lambda: _switches(model))


def _switches(model: LabModel) -> list[BranchSwitch]:
    idx = model.index
    if len(idx.graphs) == 1:
        return []
    g = model.graph
    flags = {v.name for v in g.inputs if v.name not in g.initializers
             and v.dtype == ir.DataType.BOOL and _one_element(v)}
    if not flags:
        return []
    taken: dict[str, dict[bool, list[str]]] = {}
    for e in idx.entries.values():
        node = e.node
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.inputs:
            continue
        traced = _trace(model, node.inputs[0], flags)
        if traced is None:
            continue
        name, chain = traced
        for value in (False, True):
            cond = _apply(chain, value)
            if cond is None:
                break
            attr = node.attributes.get("then_branch" if cond else "else_branch")
            path = idx.graph_path(attr.value) if attr is not None else None
            if path is not None:
                taken.setdefault(name, {False: [], True: []})[value].append(path)
    io = _cache_inputs(model)
    out = []
    for v in g.inputs:
        if v.name not in taken:
            continue
        t = {k: tuple(p) for k, p in taken[v.name].items()}
        reads = [value for value in (False, True) if _reads_any(model, t[value], io)]
        out.append(BranchSwitch(v.name, t, reads[0] if len(reads) == 1 else None))
    return out


def _one_element(v: ir.Value) -> bool:
    shape = shape_tuple(v.shape)
    return shape is not None and all(d == 1 for d in shape)


def _trace(model: LabModel, value: ir.Value | None, flags: set[str]
           ) -> tuple[str, list[tuple[str, Any]]] | None:
    """(the flag input, the ops from it to ``value``, last first) or None."""
    chain: list[tuple[str, Any]] = []
    for _ in range(_MAX_CHAIN):
        if value is None or not value.name:
            return None
        if value.name in flags and value.producer() is None:
            return value.name, chain
        node = value.producer()
        if node is None or node.domain not in ("", "ai.onnx") or not node.inputs:
            return None
        op = node.op_type
        if op in _RESHAPES or op == "Not":
            chain.append((op, None))
            value = node.inputs[0]
        elif op == "Cast":
            to = node.attributes.get("to")
            if to is None:
                return None
            chain.append(("Cast", ir.DataType(to.value).numpy()))
            value = node.inputs[0]
        elif op in _WITH_CONSTANT and len(node.inputs) == 2:
            consts = [const_array(x) for x in node.inputs]
            live = [i for i, c in enumerate(consts) if c is None]
            if len(live) != 1 or consts[1 - live[0]].size != 1:
                return None
            chain.append((op, consts[1 - live[0]]))
            value = node.inputs[live[0]]
        else:
            return None
    return None


def _apply(chain: Sequence[tuple[str, Any]], value: bool) -> bool | None:
    """The condition's value when the flag input is ``value`` (None if not one element)."""
    x: np.ndarray = np.array([value])
    for op, arg in reversed(chain):
        if op == "Not":
            x = np.logical_not(x)
        elif op == "Cast":
            x = x.astype(arg)
        elif op in _WITH_CONSTANT:
            x = _WITH_CONSTANT[op](x, np.asarray(arg).reshape(-1)[0])
    return bool(x.reshape(-1)[0]) if x.size == 1 else None


def _cache_inputs(model: LabModel) -> set[str]:
    try:
        io = decoder_io(model)
    except CacheError:
        return set()
    return {s.past for s in io.cache if not s.kind.startswith("cross.")} if io else set()


def _reads_any(model: LabModel, paths: Sequence[str], names: set[str]) -> bool:
    """Whether a node inside one of the bodies at ``paths`` reads one of ``names``."""
    idx = model.index
    for name in names:
        for nid in idx.consumers.get(name, ()):
            graph = idx.entries[nid].graph
            if any(graph == p or graph.startswith(p + "/") for p in paths):
                return True
    return False


def switch_values(model: LabModel, feeds: Mapping[str, Any]) -> dict[str, bool]:
    """The value each switch of ``model`` has in ``feeds`` (switches not fed are left out)."""
    out = {}
    for s in branch_switches(model):
        if s.input in feeds and feeds[s.input] is not None:
            arr = np.asarray(feeds[s.input]).reshape(-1)
            if arr.size == 1:
                out[s.input] = bool(arr[0])
    return out


def untaken_bodies(model: LabModel, feed_list: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The body graph paths no sample of ``feed_list`` runs, by the switch values it feeds
    (a switch fed both values, or not fed, leaves its bodies out of it)."""
    seen: dict[str, set[bool]] = {}
    for f in feed_list:
        for name, value in switch_values(model, f).items():
            seen.setdefault(name, set()).add(value)
    return frozenset(p for s in branch_switches(model) if len(seen.get(s.input, ())) == 1
                     for p in s.taken.get(not next(iter(seen[s.input])), ()))


def unexercised(model: LabModel, feed_list: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per switch value no sample of ``feed_list`` takes: the branches its runs never
    checked (``"use_cache_branch=False (optimum::if/else_branch)"``)."""
    seen: dict[str, set[bool]] = {}
    for f in feed_list:
        for name, value in switch_values(model, f).items():
            seen.setdefault(name, set()).add(value)
    return [s.label(value) for s in branch_switches(model) for value in (False, True)
            if value not in seen.get(s.input, set()) and s.taken.get(value)]


def branch_labels(model: LabModel, feed_list: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per sample, the branches its switch values take (``"use_cache_branch=True
    (optimum::if/then_branch)"``); empty for a model without switches."""
    switches = branch_switches(model)
    if not switches:
        return []
    out = []
    for f in feed_list:
        values = switch_values(model, f)
        out.append(", ".join(s.label(values[s.input]) for s in switches if s.input in values))
    return out
