"""Grouping nodes into collapsed boxes: by name scope, or by repeated blocks / topological chunks.

Exports with ``/encoder/layer.3/attention/MatMul`` names group by scope truncated to a depth;
``"auto"`` picks the deepest depth whose view stays under ``max_nodes`` drawn elements. Exports
without scopes (``conv2d_5.tmp_0`` names) group by repeated blocks (a run of ops that repeats,
found by splitting the topological order at an op that recurs with identical segments) or, if
nothing repeats, by equal topological chunks. One scope (or block) can be drawn open with
``expand``.

Everything here is O(nodes × scope depth): scopes come from the index's node entries once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from onnx_lab.core.index import node_scope
from onnx_lab.core.source_map import module_scopes
from onnx_lab.errors import RenderError, unknown_name
from onnx_lab.render.graph import Group, is_folded_constant, owner_in_graph

if TYPE_CHECKING:
    from onnx_lab.core.model import LabModel

__all__ = ["CollapsePlan", "plan_collapse", "scope_parts", "check_collapse", "resolve_expand",
           "OVERVIEW_NODES"]


@dataclass
class CollapsePlan:
    """The boxes of a collapsed view.

    Attributes:
        groups: group key -> Group (members in topological order).
        depth: the scope depth used (None for fallback grouping or no collapse).
        mode: 'scope', 'blocks', 'chunks' or 'none'.
        expanded: group keys drawn open.
        notes: what was decided and why.
    """

    groups: dict[str, Group] = field(default_factory=dict)
    depth: int | None = None
    mode: str = "none"
    expanded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def scope_parts(scope: str) -> tuple[str, ...]:
    """``'/encoder/layer.3/attention'`` -> ``('encoder', 'layer.3', 'attention')``."""
    return tuple(p for p in scope.split("/") if p)


# Unscoped views up to this many nodes are never grouped by collapse="auto".
SMALL_VIEW = 40
# Drawn elements of a scoped overview (collapse="auto", nothing expanded) of a graph too large
# to draw whole: it reads at a glance and lays out in about a second. Deeper levels (171 boxes
# of a 24-layer dynamo GPT-2 at max_nodes=300, nested frames, 400 edges) took dot past its
# timeout on real exports, and the sfdp fallback drew them scattered.
OVERVIEW_NODES = 60


def check_collapse(collapse) -> int | str | None:
    """Validate ``collapse``: None, ``"auto"`` or a depth >= 1 (``"2"`` accepted)."""
    if collapse is None or collapse == "auto":
        return collapse
    if isinstance(collapse, str) and collapse.strip().isdigit():
        collapse = int(collapse)
    if isinstance(collapse, int) and not isinstance(collapse, bool) and collapse >= 1:
        return collapse
    raise RenderError(f"collapse={collapse!r} is not a valid value.",
                      fix="Use collapse='auto', a scope depth such as collapse=2, or None.")


def _adopt(model: LabModel, graph: str, ids: Sequence[str],
           scopes: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Give scope-less nodes the scope of their consumers (else producers) when unambiguous.

    TorchScript exports leave weight ``Identity`` nodes and shape helpers unscoped; drawn as
    loose nodes they would swamp a collapsed view. One reverse topological pass (consumers
    first) lets chains of unscoped helpers inherit in one go.
    """
    idx = model.index
    out = dict(scopes)
    for nid in reversed(ids):
        if out[nid]:
            continue
        found: set[tuple[str, ...]] = set()
        for o in idx.entries[nid].node.outputs:
            for c in idx.consumers.get(o.name, ()):
                owner = owner_in_graph(idx, c, graph)
                if owner in out and owner != nid:
                    found.add(out[owner])
        found.discard(())
        if len(found) == 1:
            out[nid] = found.pop()
    for nid in ids:
        if out[nid]:
            continue
        found = set()
        for p in idx.predecessors(nid):
            if p in out:
                found.add(out[p])
        found.discard(())
        if len(found) == 1:
            out[nid] = found.pop()
    return out


def _units(scopes: Mapping[str, tuple[str, ...]], depth: int) -> tuple[int, Counter]:
    keys: Counter = Counter()
    loose = 0
    for parts in scopes.values():
        if parts:
            keys[parts[:depth]] += 1
        else:
            loose += 1
    # A key holding one node is drawn as that node: still one element.
    return loose + len(keys), keys


def _opened_in(parts: tuple[str, ...], one_level: Mapping[str, int]) -> int | None:
    """The depth of the deepest expanded scope (opened one level) holding ``parts``."""
    best = None
    for e, n in one_level.items():
        if len(parts) >= n and _key(parts[:n]) == e and (best is None or n > best):
            best = n
    return best


def _units_one_level(scopes: Mapping[str, tuple[str, ...]], depth: int,
                     one_level: Mapping[str, int]) -> int:
    """Drawn units at ``depth`` with the ``one_level`` scopes opened one level: their own
    nodes one each, each of their sub-scopes one box."""
    keys: set[tuple[str, ...]] = set()
    loose = 0
    for parts in scopes.values():
        inside = _opened_in(parts, one_level) if parts else None
        if inside is not None:
            if len(parts) > inside:
                keys.add(("\0sub",) + parts[:inside + 1])
            else:
                loose += 1
        elif parts:
            keys.add(parts[:depth])
        else:
            loose += 1
    return loose + len(keys)


def node_levels(model: LabModel, nid: str) -> tuple[str, ...]:
    """The scope levels node ``nid`` is boxed by: those of the module it comes from (exporter
    metadata, carried through fusions), else those of its name."""
    return module_scopes(model).get(nid) or scope_parts(node_scope(model.index.entries[nid].node))


def _key(parts: tuple[str, ...]) -> str:
    return "/" + "/".join(parts)


def resolve_expand(expand: str | Iterable[str] | None, known: Iterable[str]) -> list[str]:
    """Normalize ``expand`` to a list of known scope/group keys (UnknownNameError otherwise)."""
    if expand is None:
        return []
    items = [expand] if isinstance(expand, str) else list(expand)
    pool = set(known)
    out = []
    for item in items:
        s = str(item).rstrip("/") if str(item) != "/" else str(item)
        cands = [s, "/" + s.lstrip("/")]
        hit = next((c for c in cands if c in pool), None)
        if hit is None:
            raise unknown_name("scope", str(item), sorted(pool),
                               fix="Pass a scope of lab.nodes.scope such as "
                               f"{sorted(pool)[0]!r}." if pool else
                               "This view has no scopes or blocks to expand.")
        out.append(hit)
    return out


def plan_collapse(model: LabModel, graph: str, ids: Sequence[str], collapse: int | str | None,
                  max_nodes: int, expand: str | Iterable[str] | None = None, *,
                  fold_constants: bool = True) -> CollapsePlan:
    """Group ``ids`` (node ids of ``graph`` in topological order) into boxes.

    Args:
        collapse: None (no boxes), ``"auto"`` or a scope depth >= 1.
        max_nodes: the most drawn elements ``"auto"`` aims for; a scoped overview with
            nothing expanded of a graph larger than that aims for at most
            :data:`OVERVIEW_NODES` (its boxes open one level at a time).
        expand: scope(s) to draw open (individual nodes inside a frame).
        fold_constants: Constant nodes are drawn inside their consumers (not counted).

    Raises:
        UnknownNameError: ``expand`` names a scope that does not exist in the view.
    """
    plan = CollapsePlan()
    if collapse is None and expand is None:
        return plan
    if collapse is None:
        collapse = "auto"  # expanding only makes sense inside a collapsed view
    idx = model.index
    # Folded Constant nodes live inside their consumers' labels: they never count as units.
    live = [n for n in ids if not (fold_constants and is_folded_constant(idx.entries[n].node))]
    scopes = {n: node_levels(model, n) for n in live}
    scopes = _adopt(model, graph, live, scopes)
    max_depth = max((len(p) for p in scopes.values()), default=0)
    has_scopes = sum(1 for p in scopes.values() if p) >= max(2, len(scopes) // 2)

    # Scopes that exist, for expand; every prefix of every scope counts.
    known: set[str] = set()
    for parts in set(scopes.values()):
        for i in range(1, len(parts) + 1):
            known.add(_key(parts[:i]))

    if has_scopes:
        one_level: dict[str, int] = {}  # expanded scopes opened one level: their depth
        budget = max_nodes
        exp = resolve_expand(expand, known) if expand is not None else []
        if collapse == "auto" and not exp and len(live) <= budget:
            plan.notes.append("collapse='auto': the view fits max_nodes without boxes.")
            return plan
        if collapse == "auto" and not exp:
            budget = min(max_nodes, OVERVIEW_NODES)
        if collapse == "auto":
            depth = None
            # Deepest depth that fits, counting expanded scopes as their members. With expand,
            # no deeper than the expanded scope: it opens among boxes of its own level
            # (expand='/h.3' shows /h.0 ... /h.23 as boxes and /h.3 open).
            top = max_depth
            if exp:
                top = min(max_depth, min(len(scope_parts(e)) for e in exp))
            for d in range(top, 0, -1):
                n, _ = _units(scopes, d)
                if exp:
                    n += sum(1 for p in scopes.values()
                             if any(_key(p).startswith(e + "/") or _key(p) == e for e in exp))
                if n <= budget:
                    depth = d
                    break
            if depth is None and exp:
                # Opened whole it does not fit (a decoder's root box holds every layer): open
                # it one level, its own nodes among the boxes of its sub-scopes. Opened whole
                # and cut, it drew the first few layers' nodes and none of the rest.
                one_level = {e: len(scope_parts(e)) for e in exp}
                depth = 1
                for d in range(max_depth, 0, -1):
                    if _units_one_level(scopes, d, one_level) <= budget:
                        depth = d
                        break
                plan.notes.append(f"collapse='auto': {', '.join(exp)} opened whole gives more "
                                  f"than {budget} boxes; opened one level.")
            if depth is None:
                depth = 1
                plan.notes.append(f"collapse='auto': even scope depth 1 gives more than "
                                  f"{budget} boxes; drawing depth 1.")
            keys = _units(scopes, depth)[1] if not exp else ()
            if len(keys) == 1:
                # The overview is one box (a decoder's /model holding every layer): open it
                # one level, its layers as boxes, within max_nodes rather than the overview's
                # target (one box said nothing: 96 layers of a Llama were "/model").
                (root,) = keys
                opened = {_key(root): len(root)}
                if max_depth > len(root) \
                        and _units_one_level(scopes, depth, opened) <= max_nodes:
                    one_level, exp = opened, [_key(root)]
                    plan.notes.append(f"collapse='auto': the overview is one box, "
                                      f"{_key(root)}; opened one level.")
        else:
            depth = int(collapse)
        plan.depth = depth
        plan.mode = "scope"
        members: dict[str, list[str]] = {}
        for nid in live:
            parts = scopes[nid]
            if not parts:
                continue
            key = _key(parts)
            if one_level:
                inside = _opened_in(parts, one_level)
                if inside is not None:
                    if len(parts) > inside:  # a sub-scope of the opened box: its own box
                        members.setdefault(_key(parts[:inside + 1]), []).append(nid)
                    continue  # the opened box's own nodes: drawn open
            elif any(key == e or key.startswith(e + "/") for e in exp):
                continue  # drawn open
            members.setdefault(_key(parts[:depth]), []).append(nid)
        for gk, m in members.items():
            if len(m) > 1:
                plan.groups[gk] = Group(gk, gk, m)
        plan.expanded = exp
        plan.notes.append(f"collapsed by name scope to depth {depth}: {len(plan.groups)} boxes.")
        return plan

    # A handful of nodes reads best as it is: never chunk them into "nodes 1-2" boxes.
    if collapse == "auto" and expand is None and len(live) <= min(SMALL_VIEW, max_nodes):
        plan.notes.append(f"collapse='auto': {len(live)} node{'s' if len(live) != 1 else ''}, "
                          "drawn without boxes.")
        return plan
    # No usable scopes: repeated blocks, else topological chunks. Blocks are found among the
    # nodes that depend on the inputs; weight-making nodes join the block of their first user.
    live, dynamic = _constants_next_to_users(model, graph, live)
    dpos = [i for i, n in enumerate(live) if n in dynamic]
    blocks = _repeated_blocks([idx.entries[live[i]].node.op_type for i in dpos])
    if blocks is not None:
        plan.mode = "blocks"
        dbounds, anchor = blocks

        def start(k: int) -> int:  # constants placed before dynamic node k belong to its block
            return 0 if k == 0 else dpos[k - 1] + 1
        bounds = [(start(a), start(b) if b < len(dpos) else len(live)) for a, b in dbounds]
        names = []
        for i, (a, b) in enumerate(bounds):
            names.append((f"block{i + 1}", f"block {i + 1} ({anchor}…)", live[a:b]))
        plan.notes.append(f"no name scopes: grouped {len(bounds)} repeated blocks that start at "
                          f"{anchor}.")
    else:
        plan.mode = "chunks"
        size = max(2, -(-len(live) // max(1, min(max_nodes, 40))))
        if collapse != "auto":
            size = max(2, int(collapse) * 10)
        names = []
        for i in range(0, len(live), size):
            names.append((f"chunk{i // size + 1}", f"nodes {i + 1}–{min(i + size, len(live))}",
                          live[i:i + size]))
        plan.notes.append(f"no name scopes: grouped the topological order into chunks of "
                          f"{size} nodes.")
    exp = resolve_expand(expand, [k for k, _, _ in names]) if expand is not None else []
    for key, name, m in names:
        if key in exp or len(m) < 2:
            continue
        plan.groups[key] = Group(key, name, m)
    plan.expanded = exp
    return plan


def _constants_next_to_users(model: LabModel, graph: str, ids: Sequence[str]
                              ) -> tuple[list[str], set[str]]:
    """``ids`` with nodes that depend on no graph input moved just before their first user,
    and the set of the nodes that do depend on one.

    Topological order puts weight-making nodes first (onnx-caffe2 exports compute every weight
    with ConstantOfShape): cut into blocks, the first block held 858 of DenseNet's 1746 nodes
    with edges to every other block (3 s in dot). Next to their users they group with them.
    """
    idx = model.index
    g = idx.graph(graph)
    inputs = {v.name for v in g.inputs if v.name and v.name not in g.initializers}
    id_set = set(ids)
    dynamic: set[str] = set()
    for nid in ids:
        e = idx.entries[nid]
        names = [v.name for v in e.node.inputs if v is not None and v.name]
        names += list(e.implicit_inputs)
        for t in names:
            p = idx.producer.get(t)
            if t in inputs or p in dynamic or (p is None and t not in g.initializers):
                dynamic.add(nid)
                break
            if p is not None and p not in id_set and owner_in_graph(idx, p, graph) is None:
                dynamic.add(nid)  # a value of an enclosing graph
                break
    if not dynamic or len(dynamic) == len(ids):
        return list(ids), set(ids)
    order: list[str] = []
    placed: set[str] = set()
    for nid in ids:
        if nid not in dynamic:
            continue
        # Constant producers first (depth-first, iterative: chains can be long).
        stack = [(nid, False)]
        while stack:
            n, ready = stack.pop()
            if n in placed:
                continue
            if ready:
                placed.add(n)
                order.append(n)
                continue
            stack.append((n, True))
            for p in reversed(idx.predecessors(n)):
                if p in id_set and p not in dynamic and p not in placed:
                    stack.append((p, False))
    order.extend(n for n in ids if n not in placed)  # constants no dynamic node reads
    return order, dynamic


def _repeated_blocks(ops: Sequence[str], min_repeats: int = 3
                     ) -> tuple[list[tuple[int, int]], str] | None:
    """Split the op sequence at an anchor op whose segments repeat (same op multiset).

    Returns block bounds (start, end) covering the sequence (a prologue and epilogue become
    blocks of their own) and the anchor op, or None when nothing repeats.
    """
    counts = Counter(ops)
    n = len(ops)
    best = None
    # Candidates: ops that recur a few times but are not everywhere (e.g. Softmax, LayerNorm).
    cands = [op for op, c in counts.most_common() if min_repeats <= c <= n // 4][:12]
    for op in cands:
        pos = [i for i, o in enumerate(ops) if o == op]
        segs = [Counter(ops[a:b]) for a, b in zip(pos, pos[1:])]
        if not segs:
            continue
        sig = Counter(frozenset(s.items()) for s in segs).most_common(1)[0]
        share = sig[1] / len(segs)
        seg_len = sum(dict(sig[0]).values())
        if share >= 0.6 and seg_len >= 3 and (best is None or seg_len > best[0]):
            best = (seg_len, op, pos)
    if best is None:
        return None
    _, op, pos = best
    bounds = []
    if pos[0] > 0:
        bounds.append((0, pos[0]))
    for a, b in zip(pos, pos[1:] + [n]):
        bounds.append((a, b))
    return bounds, op
