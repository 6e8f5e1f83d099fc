"""Which branches of the main graph's data-dependent Ifs the verification's samples ran, for
the bodies a step changed.

A step that rewrites a node inside an If branch is only checked when a sample takes that
branch. A branch an input switch decides (optimum's ``use_cache_branch``) is covered by
``core.branches``; an If whose condition the model computes (``torch.cond`` on a data
predicate) takes whichever branch the seeded feeds lead to, and a change in the other
passed verification unseen. This reads each such condition in the reference's run and names
a changed branch no sample took.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_lab.core.branches import branch_switches
from onnx_lab.core.model import LabModel
from onnx_lab.errors import LabError

__all__ = ["changed_branches", "untaken", "changed_loops", "unrun"]


def _top_branch(model: LabModel, path: str, op: str = "If") -> tuple[str, str] | None:
    """(main-graph node id, attribute) of the ``op`` whose body ``path`` lies in (directly or
    nested): an If's ``then_branch``/``else_branch``, a Loop's ``body``; None when the
    main-graph owner is another op."""
    idx = model.index
    owner_of = {sub: (graph, out, attr) for (graph, out, attr), sub in idx.bodies.items()}
    while path in owner_of:
        graph, out, attr = owner_of[path]
        nid = idx.producer_in(out, graph)
        if nid is None:
            return None
        if graph == "":
            node = idx.entries[nid].node
            wanted = ("then_branch", "else_branch") if op == "If" else ("body",)
            if node.op_type == op and node.domain in ("", "ai.onnx") and attr in wanted:
                return nid, attr
            return None
        path = graph
    return None


def _changed_paths(before: LabModel, after: LabModel, result: Any) -> set[str]:
    """The body paths holding a node the step changed (new, rewritten or removed)."""
    paths: set[str] = set()
    for nid in getattr(result, "provenance", {}) or {}:
        e = after.index.entries.get(nid)
        if e is not None and e.graph:
            paths.add(e.graph)
    for nid in getattr(result, "removed", ()) or ():
        e = before.index.entries.get(nid)
        if e is not None and e.graph:
            paths.add(e.graph)
    return paths


def changed_loops(before: LabModel, after: LabModel, result: Any) -> dict[str, list[str]]:
    """{Loop node id: [trip count tensor, condition tensor] ('' when not given)} of the
    main-graph Loops whose body holds a node the step changed."""
    if result is None or len(before.index.graphs) == 1:
        return {}
    out: dict[str, list[str]] = {}
    for path in _changed_paths(before, after, result):
        top = _top_branch(before, path, "Loop")
        if top is not None:
            node = before.index.entries[top[0]].node
            out[top[0]] = [v.name if v is not None else "" for v in node.inputs[:2]]
    return out


def unrun(loops: Mapping[str, Sequence[str]], samples: Iterable[Mapping[str, Any]],
          run: Callable[[Mapping[str, Any], Sequence[str]], Mapping[str, Any]]) -> list[str]:
    """The changed Loop bodies that ran 0 times on every sample (a trip count of 0, or a
    first condition false), each as a line for the report's ``unexercised``. A Loop whose
    trip count the model computes from the data (``ceil(relu(max(x) - 10))``) ran 0 times on
    the seeded feeds, and a planted weight in its body verified."""
    names = sorted({n for ns in loops.values() for n in ns if n})
    if not names:
        return []
    seen: dict[str, list[Any]] = {n: [] for n in names}
    count = 0
    for feeds in samples:
        count += 1
        try:
            values = run(feeds, names)
        except LabError:  # the counts cannot be read: nothing to say either way
            return []
        for n in names:
            v = np.asarray(values[n]) if n in values else None
            if v is not None and v.size == 1:
                seen[n].append(v.reshape(-1)[0])
    lines = []
    for nid, (trips, cond) in sorted(loops.items()):
        if trips and len(seen[trips]) == count and all(x == 0 for x in seen[trips]):
            why = f"its trip count {trips!r} was 0"
        elif cond and len(seen[cond]) == count and not any(bool(x) for x in seen[cond]):
            why = f"its condition {cond!r} was False"
        else:
            continue
        lines.append(f"body of Loop {nid!r}, which the step changed: it ran 0 times, {why} "
                     "on every sample (give feeds that run it: verify={'feeds': ...})")
    return lines


def changed_branches(before: LabModel, after: LabModel, result: Any
                     ) -> dict[tuple[str, str], str]:
    """{(If node id, branch): cond tensor} of the main-graph Ifs, with a condition the model
    computes, whose branch holds a node the step changed (new, rewritten or removed)."""
    if result is None or len(before.index.graphs) == 1:
        return {}
    paths = _changed_paths(before, after, result)
    if not paths:
        return {}
    switched = set()
    for s in branch_switches(before):
        for branches in s.taken.values():
            switched.update(branches)
    out: dict[tuple[str, str], str] = {}
    for path in paths:
        top = _top_branch(before, path)
        if top is None:
            continue
        node = before.index.entries[top[0]].node
        cond = node.inputs[0].name if node.inputs and node.inputs[0] is not None else None
        if cond and cond not in {v.name for v in before.graph.inputs} \
                and cond not in before.graph.initializers \
                and before.index.producer.get(cond) is not None:
            out[top] = cond
    return {k: c for k, c in out.items() if f"{k[0]}/{k[1]}" not in switched}


def untaken(branches: Mapping[tuple[str, str], str], samples: Iterable[Mapping[str, Any]],
            run: Callable[[Mapping[str, Any], Sequence[str]], Mapping[str, Any]]) -> list[str]:
    """The changed branches no sample took, each as a line for the report's ``unexercised``
    (``run(feeds, names)`` gives the reference's values of the conditions)."""
    conds = sorted(set(branches.values()))
    seen: dict[str, set[bool]] = {c: set() for c in conds}
    for feeds in samples:
        try:
            values = run(feeds, conds)
        except LabError:  # the conditions cannot be read: nothing to say either way
            return []
        for c in conds:
            v = np.asarray(values[c])
            if v.size == 1:
                seen[c].add(bool(v.reshape(-1)[0]))
    lines = []
    for (nid, branch), cond in sorted(branches.items()):
        want = branch == "then_branch"
        if want not in seen[cond]:
            lines.append(f"{branch} of If {nid!r}, which the step changed: its condition "
                         f"{cond!r} was {not want} on every sample (give feeds that take it: "
                         "verify={'feeds': ...})")
    return lines
