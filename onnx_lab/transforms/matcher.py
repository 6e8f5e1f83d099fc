"""The one matcher of onnx_lab's node passes: a pass declares a pattern, a check and a rewrite.

Like onnxscript's rewriter, a :class:`PatternPass` says *what* it matches (a :class:`Pattern`:
the op type of the node the walk visits, optionally the op type of the node producing one of
its inputs), a :meth:`~PatternPass.check` that returns None or the human reason a candidate is
rejected (it lands in ``PassResult.reason`` or ``notes`` through :meth:`LabPass.skip`), a
:meth:`~PatternPass.describe` that names the match, and a :meth:`~PatternPass.apply` that
rewrites one match. The walk over the model index, the tests of op types and domains, the
producer lookup, the bookkeeping of reasons and the building of :class:`Match` objects live
here once.

Example:
    >>> class DropIdentity(PatternPass):
    ...     pattern = Pattern("identity", "Identity")
    ...     def check(self, b):
    ...         return None if b.root.inputs[0] is not None else "it has no data input"
    ...     def describe(self, b):
    ...         return Found(f"Identity {b.root_id} only copies its input")
    ...     def apply(self, m, nodes, rw):
    ...         rw.bypass(nodes[0])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite

__all__ = ["STANDARD_DOMAINS", "Pattern", "Binding", "Found", "PatternPass", "walk", "is_std",
           "users", "names_of", "sole_reader", "alive"]

STANDARD_DOMAINS = ("", "ai.onnx")

OpTypes = str | tuple[str, ...] | None


# ---------------------------------------------------------------------------- graph queries
def walk(model: LabModel, main_only: bool = False) -> Iterator[tuple[str, ir.Node]]:
    """(node_id, node) in whole-model topological order (bodies follow their owner)."""
    for nid, e in model.index.entries.items():
        if main_only and e.graph != "":
            continue
        yield nid, e.node


def is_std(node: ir.Node, op_type: OpTypes = None) -> bool:
    """Node in the default ONNX domain (and of one of ``op_type``)."""
    return _fits(node, op_type, STANDARD_DOMAINS)


def _fits(node: ir.Node, op_type: OpTypes, domains: tuple[str, ...]) -> bool:
    if node.domain not in domains:
        return False
    if op_type is None:
        return True
    return node.op_type == op_type if isinstance(op_type, str) else node.op_type in op_type


def users(value: ir.Value | None) -> list[ir.Node]:
    """Distinct nodes reading ``value`` (body nodes reading an outer value included)."""
    if value is None:
        return []
    out: list[ir.Node] = []
    for u in value.uses():
        if all(u.node is not n for n in out):
            out.append(u.node)
    return out


def names_of(model: LabModel, nodes: Sequence[ir.Node]) -> str:
    """Node ids of ``nodes``, comma separated (for reasons)."""
    return ", ".join(model.index.node_id(n) for n in nodes)


def sole_reader(model: LabModel, value: ir.Value, reader: ir.Node) -> str | None:
    """Why ``reader`` is not the only consumer of ``value`` (a producer's output that a fusion
    would absorb), or None."""
    if value.is_graph_output():
        return f"its output {value.name!r} is a graph output"
    others = [u for u in users(value) if u is not reader]
    if others:
        return f"its output is also read by {names_of(model, others)}"
    return None


def alive(*nodes: ir.Node) -> bool:
    """All nodes still belong to a graph (an earlier match in the same pass may have removed
    them)."""
    return all(n.graph is not None for n in nodes)


# ---------------------------------------------------------------------------- declarations
@dataclass(frozen=True)
class Pattern:
    """What a pass matches: a node the walk visits (the root), optionally with its producer.

    Attributes:
        name: the pattern name given to matches (:class:`Found` may choose another).
        op: op type(s) of the root; None for any op of ``domains``.
        producer: op type(s) of the node producing one of the root's ``inputs``; None for
            single-node patterns. The producer comes first in the match (its anchor).
        inputs: the root inputs the producer may feed, tried in order (``(0, 1)`` for both
            sides of an Add); the first that fits is the only one checked.
        arity: the number of inputs the root must have, None for any.
        domains: domains the root and the producer must be in.
        main_only: visit the main graph only (not If/Loop/Scan bodies).
        disjoint: a node already in a match of this pass is not matched again (chains of
            three Transposes give one pair, the third stays for the next run).
        where: a structural test beyond op types (``fit = where(binding)``): None means the
            place does not fit the pattern, silently (a residual Add of two tensors is no
            bias Add); anything else is kept as :attr:`Binding.fit` for the check.
    """

    name: str
    op: OpTypes
    producer: OpTypes = None
    inputs: tuple[int, ...] = (0,)
    arity: int | None = None
    domains: tuple[str, ...] = STANDARD_DOMAINS
    main_only: bool = False
    disjoint: bool = False
    where: Callable[[Binding], Any] | None = None

    @property
    def size(self) -> int:
        """Number of nodes the pattern binds (root and producer)."""
        return 1 if self.producer is None else 2


@dataclass
class Binding:
    """One place a :class:`Pattern` fits.

    Attributes:
        model: the model being matched.
        root, root_id: the node the walk visited.
        producer, producer_id: the node producing the root's input ``input`` (None without).
        input: the root input the producer feeds.
        fit: what ``Pattern.where`` found (None when the pattern has no ``where``).
    """

    model: LabModel
    root: ir.Node
    root_id: str
    producer: ir.Node | None = None
    producer_id: str | None = None
    input: int = 0
    fit: Any = None

    @property
    def head(self) -> ir.Node:
        """The first node in data-flow order: the match is named after it."""
        return self.producer if self.producer is not None else self.root

    @property
    def head_id(self) -> str:
        return self.producer_id if self.producer_id is not None else self.root_id

    @property
    def nodes(self) -> list[ir.Node]:
        """The bound nodes, head first."""
        return [self.head] if self.producer is None else [self.producer, self.root]

    @property
    def value(self) -> ir.Value | None:
        """The root's input ``input`` (the producer's output, for two-node patterns)."""
        return self.root.inputs[self.input] if self.input < len(self.root.inputs) else None

    @property
    def other(self) -> ir.Value | None:
        """The root's other input, for two-input roots (the constant of a bias Add)."""
        return self.root.inputs[1 - self.input]


@dataclass
class Found:
    """How :meth:`PatternPass.describe` names an accepted candidate.

    Attributes:
        description: one human sentence.
        pattern: the pattern name, when not the :class:`Pattern`'s own (``conv_bn_relu``).
        saving_nodes, saving_bytes: the expected reduction.
        extra: nodes involved beyond the bound ones (a Relu after a folded BN, which stays).
        data: pass-private details for :meth:`PatternPass.apply`.
    """

    description: str
    pattern: str | None = None
    saving_nodes: int = 1
    saving_bytes: int = 0
    extra: Sequence[ir.Node] = ()
    data: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the matcher
class PatternPass(LabPass):
    """A pass that declares :attr:`pattern` and implements check, describe and apply.

    :meth:`find` walks the model index once and, for every place the pattern fits, calls
    :meth:`check`: a reason rejects the candidate (recorded with :meth:`LabPass.skip` under the
    head node's id), None accepts it and :meth:`describe` names the :class:`Match` (id
    ``"{pass}:{head id}"``, node ids head first). :meth:`rewrite` applies each chosen match
    whose bound nodes an earlier match has not removed.
    """

    pattern: ClassVar[Pattern]

    def check(self, b: Binding) -> str | None:
        """Why the candidate ``b`` cannot be rewritten, or None."""
        return None

    def describe(self, b: Binding) -> Found:
        """The description, savings and data of the accepted candidate ``b``."""
        raise NotImplementedError

    def apply(self, m: Match, nodes: list[ir.Node], rw: Rewrite) -> None:
        """Rewrite one match; ``nodes`` are the bound nodes (head first), then the extras."""
        raise NotImplementedError

    def find(self, model: LabModel) -> list[Match]:
        p = self.pattern
        out: list[Match] = []
        used: set[int] = set()
        #: (head id, bound node ids, reason) of the candidates :meth:`check` rejected.
        self.near_misses: list[tuple[str, list[str], str]] = []
        for nid, node in walk(model, p.main_only):
            b = self._bind(model, nid, node, used)
            if b is None:
                continue
            why = self.check(b)
            if why:
                self.skip(b.head_id, why)
                # Kept with the bound nodes for lab.patterns(near_misses=True).
                self.near_misses.append((b.head_id, [b.head_id] + [
                    model.index.node_id(n) for n in b.nodes[1:]], why))
                continue
            found = self.describe(b)
            nodes = [*b.nodes, *found.extra]
            ids = [b.head_id] + [model.index.node_id(n) for n in nodes[1:]]
            out.append(Match(f"{self.name}:{b.head_id}", found.pattern or p.name, self.name,
                             ids, b.head_id, found.description, found.saving_nodes,
                             int(found.saving_bytes), dict(found.data, nodes=nodes)))
            if p.disjoint:
                used.update(id(n) for n in b.nodes)
        return out

    def _bind(self, model: LabModel, nid: str, node: ir.Node, used: set[int]) -> Binding | None:
        """The first binding of the pattern at ``node`` that fits structurally, else None."""
        p = self.pattern
        if not _fits(node, p.op, p.domains) or (p.arity is not None
                                                 and len(node.inputs) != p.arity):
            return None
        for i in p.inputs if p.producer is not None else (0,):
            b = Binding(model, node, nid, input=i)
            if p.producer is not None:
                prod = b.value.producer() if b.value is not None else None
                if prod is None or not _fits(prod, p.producer, p.domains):
                    continue
                b.producer, b.producer_id = prod, model.index.node_id(prod)
            if any(id(n) in used for n in b.nodes):
                continue
            if p.where is not None:
                b.fit = p.where(b)
                if b.fit is None:
                    continue
            return b
        return None

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            nodes = m.data["nodes"]
            if alive(*nodes[:self.pattern.size]):
                self.apply(m, nodes, rw)
