"""Pass infrastructure: matches, results with provenance, the rewrite context, the registry.

Every transform is a :class:`LabPass`, an ``onnx_ir.passes.InPlacePass`` that works on a clone:
``LabPass(...).run(model)`` clones the LabModel, stamps each node with its origin, lets the pass
find its matches and rewrite the chosen ones through a :class:`Rewrite` context (which records
which nodes each new node came from), and returns a :class:`PassResult` with the new model,
before/after counts, provenance, removed ids, and a human reason when nothing was done.

Provenance is written into node ``metadata_props["onnx_lab.origin"]`` (a JSON list of node ids
of the original model), so it composes across steps and survives save/load; :func:`origins`
reads it back. onnx_ir's own passes do not track provenance, which is why this layer exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.provenance import ORIGIN_KEY, node_origin, origins, stamp_origins
from onnx_lab.core.source_map import carry_sources
from onnx_lab.core.values import overridable
from onnx_lab.errors import PassError, PassParameterError, close_matches, unknown_name

__all__ = ["ORIGIN_KEY", "Param", "Match", "PassContext", "PassResult", "Rewrite", "LabPass", "register_pass",
           "get_pass", "pass_names", "pass_kind", "available", "origins", "node_origin",
           "stamp_origins"]

# ---------------------------------------------------------------------------- data types
@dataclass(frozen=True)
class Param:
    """A pass parameter: name, Python type, default and a one-line doc."""

    name: str
    type: type | tuple[type, ...]
    default: Any
    doc: str = ""


@dataclass
class Match:
    """One place where a pass can apply.

    Attributes:
        match_id: stable within one model version, e.g. ``"fuse_conv_bn:/stem/conv/Conv"``.
        pattern: the pattern name (``conv_bn``, ``conv_bn_relu``, ``dead_node`` ...).
        pass_name: the registered pass that rewrites it.
        node_ids: the nodes involved, anchor first.
        anchor: the node the match is named after.
        description: one human sentence.
        saving_nodes, saving_bytes: expected reduction (bytes may be negative for folds).
        data: pass-private details (not shown in tables).
    """

    match_id: str
    pattern: str
    pass_name: str
    node_ids: list[str]
    anchor: str
    description: str
    saving_nodes: int = 0
    saving_bytes: int = 0
    data: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class PassResult:
    """What one pass did. Never a bare ``False``: ``reason`` says why nothing changed.

    Attributes:
        name, params: the pass and the parameters it ran with.
        modified: whether the model changed.
        nodes_before, nodes_after: node counts over all graphs.
        provenance: new or changed node id -> node ids (in the step's input model) it came from.
        removed: node ids of the input model that no longer exist.
        reason: why nothing was done (when modified is False), else None.
        seconds: time of the rewrite (verification not included).
        notes: warnings (refused folds, ops only onnxruntime runs, unknown provenance...).
        model: the resulting LabModel (the input itself when nothing changed).
        matches: the match ids that were applied.
        verification, verify_passed, max_abs_err, first_failure: filled by verification.
        verified_by: which check verified the step: ``"region"`` (the rewritten region on
            the captured values at its boundary), ``"full"`` (the whole model),
            ``"unchanged"`` (no value changed: nothing ran); None when not verified.
    """

    name: str
    params: dict[str, Any]
    modified: bool
    nodes_before: int
    nodes_after: int
    provenance: dict[str, list[str]]
    removed: list[str]
    reason: str | None
    seconds: float
    notes: list[str]
    model: LabModel
    matches: list[str] = field(default_factory=list)
    # The verification report: a DataFrame, or numerics.verify.Report until first read.
    _verification: Any = field(default=None, repr=False)
    verify_passed: bool | None = None
    max_abs_err: float | None = None
    first_failure: str | None = None
    verify_seconds: float | None = None
    # True when an edit meant to change values did (see steps.apply); None otherwise
    outputs_changed: bool | None = None
    verified_by: str | None = None

    @property
    def verification(self) -> pd.DataFrame | None:
        """The verification report (see ``transforms.verify.verify``), None if not verified.

        Kept as rows until first read, so a run that only needs the verdict builds no
        DataFrame (and does not import pandas).
        """
        v = self._verification
        if hasattr(v, "frame"):  # numerics.verify.Report
            v = self._verification = v.frame()
        return v

    @verification.setter
    def verification(self, report: Any) -> None:
        self._verification = report

    def __repr__(self) -> str:
        status = (f"{self.nodes_before} -> {self.nodes_after} nodes" if self.modified
                  else f"not modified: {self.reason}")
        ver = ""
        if self.verify_passed is not None:
            ver = f", verify {'passed' if self.verify_passed else 'FAILED'}"
            if not self.verify_passed and self.first_failure:
                ver += f" first at {self.first_failure!r}"
            if self.max_abs_err is not None:
                # Over the outputs only: an intermediate can fail while the outputs agree.
                ver += f" (outputs max_abs_err {self.max_abs_err:.3g})"
        return f"PassResult({self.name}: {status}{ver}, {self.seconds:.3f}s)"

    def summary(self) -> dict[str, Any]:
        """The plain fields (for JSON and history rows)."""
        return {"name": self.name, "params": self.params, "modified": self.modified,
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "reason": self.reason, "seconds": round(self.seconds, 6),
                "verify_passed": self.verify_passed, "max_abs_err": self.max_abs_err,
                "first_failure": self.first_failure, "outputs_changed": self.outputs_changed,
                "verified_by": self.verified_by, "notes": list(self.notes),
                "matches": list(self.matches)}

    def _repr_html_(self) -> str:
        return _display.draw(self, "html")


# ---------------------------------------------------------------------------- rewriting
def _fresh(base: str, taken: set[str]) -> str:
    """``base``, else ``base_1``, ``base_2``... whichever is not in ``taken`` (then taken)."""
    name, k = base, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name


class Rewrite:
    """Editing helpers for a pass, recording provenance of every node it creates or changes.

    Attributes:
        model: the LabModel being rewritten (a clone; its index reflects the state before the
            rewrite, so look nodes up by id before changing them).
        notes: messages for the result.
    """

    def __init__(self, model: LabModel) -> None:
        self.model = model
        self.notes: list[str] = []
        self._ids_before = {id(e.node): nid for nid, e in model.index.entries.items()}
        self._records: dict[int, tuple[ir.Node, list[str], list[str]]] = {}
        self._names: set[str] = set(model.index.values) | {
            n for g in model.index.graphs.values() for n in g.initializers}
        self.modified = False

    # -- provenance ---------------------------------------------------------------------
    def record(self, node: ir.Node, sources: Iterable[ir.Node]) -> None:
        """Declare that ``node`` (new or changed) stands for ``sources`` (nodes of the input)."""
        step_ids: list[str] = []
        orig: list[str] = []
        for s in sources:
            sid = self._ids_before.get(id(s))
            if sid is None and id(s) in self._records:  # a node created earlier in this pass
                _, s_ids, s_orig = self._records[id(s)]
                step_ids += [x for x in s_ids if x not in step_ids]
                orig += [x for x in s_orig if x not in orig]
                continue
            if sid is None:
                continue
            if sid not in step_ids:
                step_ids.append(sid)
            orig += [x for x in node_origin(s, sid) if x not in orig]
        self._records[id(node)] = (node, step_ids, orig)
        node.metadata_props[ORIGIN_KEY] = json.dumps(orig)
        self.modified = True

    # -- names and values ---------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        """A tensor/initializer name not used in the model yet."""
        return _fresh(base, self._names)

    def unique_node_name(self, base: str) -> str:
        """A node name not used in the model yet (so it becomes the node's id)."""
        if not hasattr(self, "_node_names"):
            self._node_names = {e.node.name for e in self.model.index.entries.values()
                                if e.node.name} | set(self.model.index.entries)
        return _fresh(base, self._node_names)

    def add_initializer(self, graph: ir.Graph, base_name: str, array: np.ndarray, *,
                        exact: bool = False) -> ir.Value:
        """Register a new initializer holding ``array`` in ``graph``.

        With ``exact=True`` the name is ``base_name`` itself (the caller has freed it, e.g. by
        removing the node that produced a value of that name).
        """
        if exact:
            name = base_name
            self._names.add(name)
        else:
            name = self.unique_name(base_name)
        tensor = ir.tensor(np.asarray(array, order="C"), name=name)
        value = ir.Value(name=name, shape=tensor.shape, type=ir.TensorType(tensor.dtype),
                         const_value=tensor)
        graph.register_initializer(value)
        if (self.model.ir.ir_version or 0) < 4:
            # IR < 4 requires every initializer to be listed as a graph input too.
            graph.inputs.append(value)
        self.modified = True
        return value

    def drop_if_unused(self, value: ir.Value | None) -> bool:
        """Remove an initializer, or a Constant node, whose value nothing uses any more.

        Graph inputs (but IR < 4 initializers, listed as inputs by rule) and outputs are kept.
        Returns True when something was removed.
        """
        if value is None or value.uses() or value.is_graph_output() or overridable(value):
            return False
        if value.is_initializer():
            graph = value.graph
            if graph is not None and value.name in graph.initializers:
                if value.is_graph_input():  # IR < 4: the initializer's required input entry
                    graph.inputs.remove(value)
                graph.initializers.pop(value.name)
                self.modified = True
                return True
            return False
        prod = value.producer()
        if prod is not None and prod.op_type == "Constant" and prod.graph is not None \
                and all(not o.uses() and not o.is_graph_output() for o in prod.outputs):
            prod.graph.remove(prod, safe=True)
            self.modified = True
            return True
        return False

    def set_const_input(self, node: ir.Node, index: int, array: np.ndarray,
                        base_name: str | None = None) -> ir.Value:
        """Make input ``index`` of ``node`` the constant ``array``.

        An initializer used only by ``node`` is updated in place (it keeps its name); otherwise
        a new initializer is added next to the node and the old constant is dropped when
        nothing else uses it. The input slot is appended when the node has fewer inputs.
        """
        graph = node.graph
        old = node.inputs[index] if index < len(node.inputs) else None
        array = np.asarray(array, order="C")
        if old is not None and old.is_initializer() and not old.is_graph_input() \
                and not old.is_graph_output() and old.graph is graph \
                and all(u.node is node for u in old.uses()) and len(old.uses()) == 1:
            tensor = ir.tensor(array, name=old.name)
            old.const_value = tensor
            old.shape = tensor.shape
            old.type = ir.TensorType(tensor.dtype)
            self.modified = True
            return old
        name = base_name or (old.name if old is not None and old.name else
                             f"{node.name or node.op_type}_in{index}")
        new = self.add_initializer(graph, name, array)
        if index < len(node.inputs):
            node.replace_input_with(index, new)
        else:
            node.resize_inputs(index + 1)
            node.replace_input_with(index, new)
        self.drop_if_unused(old)
        return new

    # -- structural edits ---------------------------------------------------------------
    def bypass(self, node: ir.Node, input_index: int = 0, output_index: int = 0, *,
               keep_name: bool = False) -> bool:
        """Remove ``node`` by wiring its input ``input_index`` to every use of its output.

        When the output is a graph output, the input value takes over the output's name (so
        model outputs keep their names). Returns False (and changes nothing) when that is not
        possible (the input is itself a graph input, initializer or output).

        ``keep_name=True`` is for fusions, where the node producing the input now computes
        what ``node`` computed (a Conv with the BatchNormalization folded in): the input value
        then takes the removed output's name whenever it is a node output of this graph, so a
        tensor name keeps meaning the same values across versions.
        """
        graph = node.graph
        out = node.outputs[output_index]
        src = node.inputs[input_index]
        if src is None or graph is None:
            return False
        if keep_name and not out.is_graph_output() and src.producer() is not None \
                and src.graph is graph and not src.is_graph_output():
            name = out.name
            out.replace_all_uses_with(src)
            out.name = None
            src.name = name
        elif out.is_graph_output():
            # Renaming a value of an enclosing graph from inside a body would break the
            # outer graph; graph inputs/initializers/outputs must keep their own names.
            if src.is_graph_input() or src.is_graph_output() or src.is_initializer() \
                    or src.graph is not graph:
                return False
            name = out.name
            out.replace_all_uses_with(src, replace_graph_outputs=True)
            out.name = None
            src.name = name
            # A graph output needs a type: keep the declared one.
            if out.type is not None:
                src.type = out.type
            if out.shape is not None:
                src.shape = out.shape
        else:
            out.replace_all_uses_with(src)
        graph.remove(node, safe=True)
        self.modified = True
        return True

    def remove(self, nodes: ir.Node | Iterable[ir.Node]) -> None:
        """Remove nodes whose outputs are no longer used."""
        nodes = [nodes] if isinstance(nodes, ir.Node) else list(nodes)
        # Remove per graph as one set, so chains (a -> b, both unused outside) can go together.
        by_graph: dict[int, tuple[ir.Graph, list[ir.Node]]] = {}
        for n in nodes:
            if n.graph is None:
                continue
            by_graph.setdefault(id(n.graph), (n.graph, []))[1].append(n)
        for graph, group in by_graph.values():
            graph.remove(group, safe=True)
        self.modified = True

    def replace(self, old_nodes: Sequence[ir.Node], new_nodes: Sequence[ir.Node],
                old_values: Sequence[ir.Value], new_values: Sequence[ir.Value]) -> None:
        """Replace ``old_nodes`` by ``new_nodes`` (inserted after the last old node), rewiring
        ``old_values`` to ``new_values`` (graph outputs keep their names) and recording that
        every new node comes from all old nodes."""
        graph = old_nodes[0].graph
        for n in new_nodes:
            self.record(n, old_nodes)
        # Insert after the last old node in graph order: the new nodes read the old nodes'
        # inputs, which may be produced between the old nodes (e.g. a Constant bias).
        olds = {id(n) for n in old_nodes}
        last = old_nodes[-1]
        for n in graph:
            if id(n) in olds:
                last = n
        ir.convenience.replace_nodes_and_values(graph, last, list(old_nodes),
                                                list(new_nodes), list(old_values),
                                                list(new_values))
        self.modified = True


# ---------------------------------------------------------------------------- passes
@dataclass(frozen=True)
class PassContext:
    """What a pass may know of the Lab beside the model: its dim values and input shapes.

    Whole-model tools (onnxsim, onnxslim) fix their input shapes from it; node passes ignore
    it. ``run_pass`` builds it from the History's dims and shapes.
    """

    dims: Mapping[str, int] = field(default_factory=dict)
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)


class LabPass(ir.passes.InPlacePass):
    """Base of every onnx_lab transform.

    Subclasses set ``name`` (via :func:`register_pass`), ``params`` and ``no_match_reason``
    and implement :meth:`find` (the opportunities) and :meth:`rewrite` (apply chosen matches).
    Node passes declare a pattern instead (``transforms.matcher.PatternPass``); whole-model
    tools (onnxsim, onnxruntime...) override :meth:`run` (``transforms._whole.WholeModelPass``).

    Example:
        >>> result = get_pass("eliminate_identity")().run(lab.model)
        >>> result.modified, result.removed
    """

    name: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    no_match_reason: ClassVar[str] = "nothing to do"
    semantics_preserving: ClassVar[bool] = True

    def __init__(self, matches: Sequence[str] | None = None, **params: Any) -> None:
        super().__init__()
        self.options = self._validate(params)
        self.selected = list(matches) if matches is not None else None
        self._rewrite: Rewrite | None = None
        self._reason: str | None = None
        self._applied: list[str] = []
        self._work: LabModel | None = None
        self._skipped: list[str] = []
        self.context = PassContext()

    def skip(self, node_id: str, why: str) -> None:
        """From :meth:`find`: note a candidate that is not a match and why (becomes the
        result's reason when nothing matched, else a note)."""
        msg = f"{node_id}: {why}"
        if msg not in self._skipped:
            self._skipped.append(msg)

    @property
    def skipped(self) -> list[str]:
        """Candidates the last :meth:`find` rejected, with the reason."""
        return list(self._skipped)

    @classmethod
    def _validate(cls, params: dict[str, Any]) -> dict[str, Any]:
        known = {p.name: p for p in cls.params}
        out = {p.name: p.default for p in cls.params}
        for k, v in params.items():
            if k not in known:
                near = close_matches(k, known, n=3)
                hint = (f" (did you mean {' or '.join(repr(m) for m in near)}?)" if near
                        else "")
                raise PassParameterError(
                    f"Pass {cls.name!r} has no parameter {k!r}{hint}.",
                    fix=f"Its parameters: {', '.join(known) or 'none'}.")
            p = known[k]
            ok = isinstance(v, p.type) and not (isinstance(v, bool) and p.type in (int, float))
            if isinstance(v, int) and not isinstance(v, bool) and p.type is float:
                v, ok = float(v), True
            if not ok and not (v is None and p.default is None):
                tname = p.type.__name__ if isinstance(p.type, type) else \
                    " or ".join(t.__name__ for t in p.type)
                raise PassError(f"Parameter {k!r} of pass {cls.name!r} must be {tname}, got "
                                f"{type(v).__name__} {v!r}.", fix=f"{p.doc or ''}".strip() or None)
            out[k] = v
        return out

    # -- to implement -------------------------------------------------------------------
    def find(self, model: LabModel) -> list[Match]:
        """All matches of this pass in ``model`` (empty for whole-model tools)."""
        return []

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        """Apply ``matches`` to ``model.ir`` in place through ``rw``."""
        raise NotImplementedError

    # -- onnx_ir interface ------------------------------------------------------------------
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        work = getattr(self, "_work", None)
        lm = work if work is not None and work.ir is model else LabModel(model)
        self._skipped = []
        found = self.find(lm)
        chosen = self._choose(found)
        if not chosen:
            if found:
                self._reason = "no match selected"
            elif self._skipped:
                self._reason = "; ".join(self._skipped)
            else:
                self._reason = self.no_match_reason
            return ir.passes.PassResult(model, modified=False)
        rw = Rewrite(lm)
        rw.notes.extend(f"skipped {s}" for s in self._skipped)
        self.rewrite(lm, chosen, rw)
        self._rewrite = rw
        self._applied = [m.match_id for m in chosen]
        if not rw.modified:
            self._reason = "; ".join(rw.notes) or self.no_match_reason
        else:
            # Rewrites insert nodes next to what they replace; keep stored order topological
            # (sort() is stable and covers the bodies too).
            try:
                model.graph.sort()
            except ValueError:  # a cycle: an invalid model; leave it as it is
                pass
        return ir.passes.PassResult(model, modified=rw.modified)

    def _choose(self, found: list[Match]) -> list[Match]:
        if self.selected is None:
            return found
        by_id = {m.match_id: m for m in found}
        out = []
        for mid in self.selected:
            if mid not in by_id:
                raise unknown_name("match id", mid, by_id,
                                   fix="See lab.patterns() for the current match ids.")
            out.append(by_id[mid])
        return out

    # -- the LabModel interface ---------------------------------------------------------------
    def run(self, model: LabModel, context: PassContext | None = None) -> PassResult:
        """Apply the pass to a clone of ``model`` and describe what happened (``context``:
        the Lab's dims and shapes, read by whole-model tools)."""
        self.context = context or PassContext()
        t0 = time.perf_counter()
        before = model.index
        self._skipped = []
        if self.selected is None and not self.find(model):
            # Nothing to do: answer without cloning (most passes of a preset are no-ops on a
            # given model, and a clone of a large graph costs more than find()).
            reason = "; ".join(self._skipped) or self._reason or self.no_match_reason
            return PassResult(self.name, dict(self.options), False, len(before), len(before),
                              {}, [], reason, time.perf_counter() - t0, [], model, [])
        work = LabModel(model.ir.clone(), path=model.path)
        stamp_origins(work)
        # Unnamed (or duplicate-named) nodes have position-derived ids, which shift when nodes
        # before them go away; naming them by their id keeps every surviving node's id.
        for nid, e in work.index.entries.items():
            if e.node.name != nid:
                e.node.name = nid
        ids_before = {id(e.node): nid for nid, e in work.index.entries.items()}
        self._work = work
        try:
            self.__call__(work.ir)
        finally:
            self._work = None
        seconds = time.perf_counter() - t0
        rw = self._rewrite
        if rw is None or not rw.modified:
            return PassResult(self.name, dict(self.options), False, len(before), len(before), {},
                              [], self._reason or self.no_match_reason, seconds,
                              rw.notes if rw else [], model, [])
        new = LabModel(work.ir, path=model.path)
        carry_sources(model, new)
        after = new.index
        present = {id(e.node) for e in after.entries.values()}
        removed = [nid for key, nid in ids_before.items() if key not in present]
        provenance: dict[str, list[str]] = {}
        notes = list(rw.notes)
        for nid, e in after.entries.items():
            key = id(e.node)
            if key in rw._records:
                provenance[nid] = rw._records[key][1]
            elif key not in ids_before:
                provenance[nid] = []
                notes.append(f"provenance unknown for new node {nid}")
        return PassResult(self.name, dict(self.options), True, len(before), len(after),
                          provenance, removed, None, seconds, notes, new, self._applied)


# ---------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class _Entry:
    name: str
    factory: Callable[..., LabPass]
    summary: str
    params: tuple[Param, ...]
    kind: str


_REGISTRY: dict[str, _Entry] = {}
_LOADED = False


def register_pass(name: str, *, kind: str = "graph") -> Callable[[type[LabPass]], type[LabPass]]:
    """Class decorator: register a :class:`LabPass` under ``name``.

    The registry records the name, the parameters and the docstring's first paragraph (the
    summary); the CLI, widgets and docs read it. The rest of the docstring from its ``### ``
    heading on is the pass's teaching text (:func:`onnx_lab.transforms.explain`), and a
    ``patterns`` class attribute names the patterns its matches carry.
    """

    def deco(cls: type[LabPass]) -> type[LabPass]:
        cls.name = name
        # The summary: the docstring's first paragraph, on one line.
        first = (cls.__doc__ or "").strip().split("\n\n", 1)[0]
        summary = " ".join(x.strip() for x in first.splitlines())
        _REGISTRY[name] = _Entry(name, cls, summary, tuple(cls.params), kind)
        return cls

    return deco


def _register_factory(name: str, factory: Callable[..., LabPass], summary: str,
                      params: tuple[Param, ...] = (), kind: str = "tool") -> None:
    """Register a pass built by a factory (e.g. one per onnxoptimizer pass)."""
    _REGISTRY[name] = _Entry(name, factory, summary, params, kind)


def _load_builtins() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    import importlib
    import pkgutil

    # on use: `import onnx_lab` loads base, not every pass
    from onnx_lab.transforms import passes

    for mod in pkgutil.iter_modules(passes.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"onnx_lab.transforms.passes.{mod.name}")
    for extra in ("tools", "shapes", "edit"):
        importlib.import_module(f"onnx_lab.transforms.{extra}")


def pass_names() -> list[str]:
    """Names of all registered passes."""
    _load_builtins()
    return list(_REGISTRY)


def pass_kind(name: str) -> str | None:
    """The registered kind of pass ``name``: ``"graph"`` for onnx_lab's own passes, ``"tool"``
    for wrappers, ``"edit"`` for edits; None if unknown."""
    _load_builtins()
    entry = _REGISTRY.get(name)
    return entry.kind if entry is not None else None


def get_pass(name: str, matches: Sequence[str] | None = None, **params: Any) -> LabPass:
    """An instance of pass ``name`` with ``params`` (validated: PassError on bad ones)."""
    _load_builtins()
    if name not in _REGISTRY:
        raise unknown_name("pass", name, _REGISTRY,
                           fix="See onnx_lab.transforms.available() (or `onnx-lab passes`).")
    return _REGISTRY[name].factory(matches=matches, **params)


def pass_traits(name: str) -> tuple[bool, str | None]:
    """What a registered pass declares for its verification: (semantics_preserving,
    verify_preset). Tools and factories: (True, None)."""
    _load_builtins()
    cls = _REGISTRY[name].factory if name in _REGISTRY else None
    if not isinstance(cls, type):
        return True, None
    return (bool(getattr(cls, "semantics_preserving", True)),
            getattr(cls, "verify_preset", None))


def available() -> pd.DataFrame:
    """The registered passes.

    Columns:
        name (str), summary (str: first docstring line), parameters (dict name ->
        'type = default: doc'), kind ('graph' for onnx_lab's own passes, 'tool' for wrappers
        of onnxsim / onnxoptimizer / onnxruntime).
    """
    _load_builtins()
    rows = []
    for e in _REGISTRY.values():
        params = {p.name: f"{getattr(p.type, '__name__', p.type)} = {p.default!r}"
                  + (f": {p.doc}" if p.doc else "") for p in e.params}
        rows.append((e.name, e.summary, params, e.kind))
    return pd.DataFrame(rows, columns=["name", "summary", "parameters", "kind"])
