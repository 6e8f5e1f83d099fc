"""The one matcher of onnx_lab's node passes: a pass declares a pattern, a check and a rewrite.

Like onnxscript's rewriter, a :class:`PatternPass` says *what* it matches (a :class:`Pattern`:
the op type of the node the walk visits, optionally the op type of the node producing one of
its inputs, a chain of producers above that one and the one consumer of its output), a :meth:`~PatternPass.check` that returns None or the human reason a candidate is
rejected (it lands in ``PassResult.reason`` or ``notes`` through :meth:`LabPass.skip`), a
:meth:`~PatternPass.describe` that names the match, and a :meth:`~PatternPass.apply` that
rewrites one match. The walk over the model index, the tests of op types and domains, the
producer lookup, the bookkeeping of reasons and the building of :class:`Match` objects live
here once. The same queries serve walks that only explain (the transformer near-misses of
``transforms/near_miss.py``): :func:`producer_chain` follows producers step by step and says
at which node which op was expected and what was found, :func:`consumer` the one reader of an
op type.

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
           "users", "names_of", "sole_reader", "alive", "Step", "Chain", "producer",
           "producer_chain", "consumers", "consumer"]

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


def producer(node: ir.Node | None, i: int) -> ir.Node | None:
    """The node producing input ``i`` of ``node`` (None: a graph input, initializer or none)."""
    if node is None or i >= len(node.inputs) or node.inputs[i] is None:
        return None
    return node.inputs[i].producer()


def consumers(node: ir.Node, op_type: OpTypes = None, output: int = 0) -> list[ir.Node]:
    """Distinct nodes reading output ``output`` of ``node`` (of one of ``op_type``)."""
    if output >= len(node.outputs):
        return []
    return [n for n in users(node.outputs[output])
            if op_type is None or _fits(n, op_type, (n.domain,))]


def consumer(node: ir.Node, op_type: OpTypes, output: int = 0) -> tuple[ir.Node | None, str]:
    """(the one reader of ``node``'s output of one of ``op_type``, '') or (None, what reads it
    instead: "found IsNaN, Where")."""
    readers = consumers(node, None, output)
    want = consumers(node, op_type, output)
    if len(want) == 1:
        return want[0], ""
    ops = "/".join((op_type,) if isinstance(op_type, str) else tuple(op_type or ("any",)))
    found = ", ".join(f"{n.op_type}" for n in readers) or "nothing"
    many = f"{len(want)} {ops} readers" if len(want) > 1 else f"no {ops}"
    return None, f"{many} after {node.op_type} (found {found})"


@dataclass(frozen=True)
class Step:
    """One step up a producer chain: the producer of input ``input`` (None: of any input, the
    first that fits; a callable: the index it picks from the node, None to stop there, e.g.
    the one input that is not a constant) must be one of ``op`` (None: any op)."""

    op: OpTypes
    input: int | Callable[[ir.Node], int | None] | None = None


@dataclass
class Chain:
    """What :func:`producer_chain` found: the nodes matched, and where it stopped.

    Attributes:
        nodes: the producers matched, nearest first.
        failed: None when every step matched; else what was found instead
            ("expected Softmax before MatMul, found Where").
        at: the node whose input did not fit (None when all matched).
        step: index of the failing step.
    """

    nodes: list[ir.Node]
    failed: str | None = None
    at: ir.Node | None = None
    step: int = -1

    @property
    def ok(self) -> bool:
        return self.failed is None


def producer_chain(start: ir.Node, steps: Sequence[Step | tuple[OpTypes, int | None]]
                   ) -> Chain:
    """Follow producers up from ``start``, one :class:`Step` (or ``(op, input)``) at a time.

    The walk onnxruntime's fusion classes do (``match_parent_path``): it stops at the first
    step whose producer is not of the expected op type and says what it found instead, so a
    "not fused, because" names the missing op and the node it was looked for at.
    """
    found: list[ir.Node] = []
    cur = start
    for k, st in enumerate(steps):
        op, idx = (st.op, st.input) if isinstance(st, Step) else st
        if callable(idx):
            idx = idx(cur)
            cands = [idx] if idx is not None else []
        else:
            cands = [idx] if idx is not None else range(len(cur.inputs))
        nxt = None
        got: list[str] = []
        for i in cands:
            p = producer(cur, i)
            if p is not None and _fits(p, op, (p.domain,)):
                nxt = p
                break
            got.append(p.op_type if p is not None else
                       (f"input {cur.inputs[i].name!r}" if i < len(cur.inputs)
                        and cur.inputs[i] is not None else "nothing"))
        if nxt is None:
            ops = "/".join((op,) if isinstance(op, str) else tuple(op or ("any",)))
            return Chain(found, f"expected {ops} before {cur.op_type}, found "
                                f"{' or '.join(dict.fromkeys(got)) or 'nothing'}", cur, k)
        found.append(nxt)
        cur = nxt
    return Chain(found)


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
        chain: producers further up from the producer (:class:`Step` each, nearest first):
            ``Conv ← Pad ← ...``; bound in :attr:`Binding.chain`, first in the match.
        consumer: op type(s) of the one reader of the root's output (bound as
            :attr:`Binding.consumer`, last in the match); None for no consumer.
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
    chain: tuple[Step, ...] = ()
    consumer: OpTypes = None

    @property
    def size(self) -> int:
        """Number of nodes the pattern binds (chain, producer, root and consumer)."""
        return ((1 if self.producer is None else 2) + len(self.chain)
                + (self.consumer is not None))


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
    chain: list[ir.Node] = field(default_factory=list)
    consumer: ir.Node | None = None

    @property
    def head(self) -> ir.Node:
        """The first node in data-flow order: the match is named after it."""
        return self.nodes[0]

    @property
    def head_id(self) -> str:
        if self.chain:
            return self.model.index.node_id(self.chain[-1])
        return self.producer_id if self.producer_id is not None else self.root_id

    @property
    def nodes(self) -> list[ir.Node]:
        """The bound nodes in data-flow order, head first (the chain's farthest producer,
        ..., the producer, the root, the consumer)."""
        out = [*reversed(self.chain)]
        out += [self.root] if self.producer is None else [self.producer, self.root]
        return out + ([self.consumer] if self.consumer is not None else [])

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
                if p.chain:
                    up = producer_chain(prod, p.chain)
                    if not up.ok:
                        continue
                    b.chain = up.nodes
            if p.consumer is not None:
                reader, _ = consumer(node, p.consumer)
                if reader is None:
                    continue
                b.consumer = reader
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
