"""The pass base and the registry: :class:`LabPass` (clone, stamp origins, match, rewrite,
result), :func:`register_pass`, :func:`get_pass`, :func:`pass_names`, :func:`available`...
Importable from :mod:`onnx_lab.transforms.base`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel, sort_nodes
from onnx_lab.core.provenance import stamp_origins
from onnx_lab.core.source_map import carry_sources
from onnx_lab.errors import (
    InputError,
    PassError,
    PassParameterError,
    clip_text,
    close_matches,
    unknown_name,
)
from onnx_lab.transforms.results import Match, Param, PassContext, PassResult
from onnx_lab.transforms.rewrite import Rewrite


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
    # The presets this pass belongs to, each with its order key(s) in that preset (a pass may
    # run twice: eliminate_dead_nodes sweeps before and after the fusions); presets.py sorts
    # each preset's members by these keys (see its docstring for the bands). Not inherited.
    presets: ClassVar[dict[str, tuple[int, ...]]] = {}

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
                what = f" ({p.doc.strip().rstrip('.')})" if p.doc and p.doc.strip() else ""
                raise PassError(f"Parameter {k!r} of pass {cls.name!r}{what} must be {tname}, "
                                f"got {type(v).__name__} {v!r}.",
                                fix=f"Give {k} a value of type {tname}.")
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
        work = model.clone()  # (a graph stored out of order is copied by serialization)
        stamp_origins(work)
        # Unnamed (or duplicate-named) nodes have position-derived ids, which shift when nodes
        # before them go away; naming them by their id keeps every surviving node's id.
        for nid, e in work.index.entries.items():
            if e.node.name != nid:
                e.node.name = nid
        if not before.stored_in_order():
            # named first, so the ids stay: the version the step makes is valid ONNX
            sort_nodes(work.ir)
            work.invalidate()
        work.adopt_types(model)  # find() on the copy needs them again (fold_constants)
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
    presets: tuple[tuple[str, tuple[int, ...]], ...] = ()


def _preset_keys(owner: str, presets: dict[str, tuple[int, ...]]
                 ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    out = []
    for preset, keys in presets.items():
        keys = (keys,) if isinstance(keys, int) else tuple(keys)
        if not isinstance(preset, str) or not keys or \
                not all(isinstance(k, int) and not isinstance(k, bool) for k in keys):
            raise PassError(f"Pass {owner!r} declares presets={presets!r}.",
                            fix="Give each preset name a tuple of int order keys, e.g. "
                                "presets = {'safe': (45,)}.")
        out.append((preset, keys))
    return tuple(out)


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
        # Presets are the class's own declaration, never inherited: a subclass registered
        # under another name (a variant, a test's planted bug) joins no preset by accident.
        _REGISTRY[name] = _Entry(name, cls, summary, tuple(cls.params), kind,
                                 _preset_keys(name, dict(vars(cls).get("presets", {}))))
        return cls

    return deco


def _register_factory(name: str, factory: Callable[..., LabPass], summary: str,
                      params: tuple[Param, ...] = (), kind: str = "tool",
                      presets: dict[str, tuple[int, ...]] | None = None) -> None:
    """Register a pass built by a factory (e.g. one per onnxoptimizer pass); ``presets`` as a
    :class:`LabPass`'s class attribute."""
    _REGISTRY[name] = _Entry(name, factory, summary, params, kind,
                             _preset_keys(name, dict(presets or {})))


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
    entry = _REGISTRY.get(name) if isinstance(name, str) else None
    return entry.kind if entry is not None else None


def get_pass(name: str, matches: Sequence[str] | None = None, **params: Any) -> LabPass:
    """An instance of pass ``name`` with ``params`` (validated: PassError on bad ones)."""
    _load_builtins()
    if isinstance(name, (list, tuple)):  # a list is no key of the registry (a TypeError)
        raise InputError(f"A pass is named by one str, got a {type(name).__name__}: "
                         f"{clip_text(repr(name), 200)}.",
                         fix="Run several passes with lab.apply_preset([...]), one pass with "
                         "lab.apply('name').")
    if not isinstance(name, str) or name not in _REGISTRY:
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


def preset_members() -> list[tuple[str, int, str]]:
    """(preset, order key, pass name) for every key a registered pass declares, sorted by
    preset, key and name: what :mod:`onnx_lab.transforms.presets` builds the presets from
    (plain tuples: looking a preset up builds no table)."""
    _load_builtins()
    return sorted((preset, key, e.name) for e in _REGISTRY.values()
                  for preset, keys in dict(e.presets).items() for key in keys)


def available() -> pd.DataFrame:
    """The registered passes.

    Columns:
        name (str), summary (str: first docstring line), parameters (dict name ->
        'type = default: doc'), kind ('graph' for onnx_lab's own passes, 'tool' for wrappers
        of onnxsim / onnxoptimizer / onnxruntime, 'edit' for edits), presets (dict preset
        name -> tuple of the pass's order keys in it; :mod:`onnx_lab.transforms.presets`
        builds each preset from this column).
    """
    _load_builtins()
    rows = []
    for e in _REGISTRY.values():
        params = {p.name: f"{getattr(p.type, '__name__', p.type)} = {p.default!r}"
                  + (f": {p.doc}" if p.doc else "") for p in e.params}
        rows.append((e.name, e.summary, params, e.kind, dict(e.presets)))
    return pd.DataFrame(rows, columns=["name", "summary", "parameters", "kind", "presets"])
