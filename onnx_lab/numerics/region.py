"""Verifying a step by the region it rewrote, against a reference captured once per preset.

A preset (``steps.apply_preset``) captures its reference once: every main-graph tensor of the
model before the preset, on the seeded feeds (:func:`capture_reference`). A step is then
verified by running only what it changed (:func:`region_report`):

- the region: the main-graph nodes the step created, changed or rewired (the PassResult's
  provenance, and every node whose op, inputs, outputs or attributes differ from the node of
  the same id before the step), plus the readers of the initializers it changed (a folded
  constant);
- its inputs: the tensors those nodes read that are produced outside the region or are graph
  inputs, fed with the reference's values; its initializers are the new model's own;
- what is compared: every tensor of the region that has a counterpart in the reference
  (:func:`onnx_lab.numerics.align.align_versions`: the same SameQuantity rule and the same
  tolerance rules as the whole-model check), which must include every region tensor read
  outside the region and every graph output it computes.

The region's inputs are the reference's exact values, so for float32 rewrites the region
computes what the whole new model computes on the reference's activations, and a difference
belongs to this step alone. Differences within tolerance can add up over the steps: the
preset's outputs are compared with the reference's once at the end (:func:`final_check`).

A region that cannot be cut cleanly is not verified here: :func:`region_report` returns
``(None, why)`` and the caller runs the whole-model check (:func:`onnx_lab.numerics.verify.
report_of`). That is the case for a rewrite inside an If/Loop/Scan body, a region node with a
body or a local-function op, a random op, a boundary tensor with no reference value (renamed
or absent), a region of more than half the main graph, several feed samples, a reference too
large to hold (``max_bytes``), or a region that does not run on its own.

Example:
    >>> ref, _why = capture_reference(before, after)
    >>> report, how = region_report(ref, before, after, result)
    >>> how, report.attrs["passed"] if report else None
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.subgraph import extract_graph
from onnx_lab.core.values import (
    RANDOM_OPS,  # a region holding one: checked on the whole model
    foldable_nodes,
    rename_value,
    type_only_dtype,
)
from onnx_lab.errors import LabError

# By job, importable from here: what a step changed.
from onnx_lab.numerics._stepdiff import StepDiff, _same_node, step_diff
from onnx_lab.numerics.align import (
    VersionPair,
    align_versions,
    computed_precision,
    version_tensors,
)
from onnx_lab.numerics.metrics import is_structured, rule_for
from onnx_lab.numerics.selection import (
    Selections,
    Sides,
    fetch,
    flipped,
    judge_selections,
    run_cut,
)
from onnx_lab.numerics.verify import (
    NOT_CHECKED,
    Report,
    _feeds,
    _judge,
    _nbytes,
    _new_stats,
    _row,
    _saved_form_problem,
)
from onnx_lab.runtime.capture import estimate_bytes, plan_chunks
from onnx_lab.runtime.session import out_of_memory

logger = logging.getLogger(__name__)

__all__ = ["PresetReference", "Region", "StepDiff", "PendingRegion", "capture_reference",
           "step_diff", "find_region", "region_report", "judge_region", "final_check",
           "with_copies", "unchanged_report", "RANDOM_OPS", "MAX_REGION_SHARE", "COPY_PREFIX",
           "judge_final"]

#: A region of more than this share of the main graph's nodes costs about a whole run: the
#: whole-model check runs instead.
MAX_REGION_SHARE = 0.5


# ---------------------------------------------------------------------------- the region
@dataclass
class Region:
    """The part of ``after`` a step rewrote (see the module docstring).

    Attributes:
        nodes: node ids in ``after``, topological order.
        inputs: boundary tensors fed with the reference's values.
        outputs: region tensors read outside the region, or graph outputs.
        tensors: every tensor the region computes that something reads (the run's outputs).
        constants: changed initializers compared without a run (graph outputs, and those
            that hold exactly the reference's value: their readers are not in the region).
    """

    nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    tensors: list[str]
    constants: list[str]
    #: the constants among ``constants`` that hold exactly the reference's value
    exact_constants: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.nodes and not self.constants

    @property
    def exact(self) -> bool:
        """Nothing to run and every changed constant bit-identical to the reference: the
        model computes what it computed."""
        return not self.nodes and set(self.constants) <= set(self.exact_constants)


def find_region(after: LabModel, diff: StepDiff, values: Mapping[str, Any] | None = None
                ) -> tuple[Region | None, str | None]:
    """(the region, None), or (None, why it cannot be cut cleanly).

    ``values``: the reference's values (:attr:`PresetReference.values`); a changed constant
    that holds exactly the reference's value of its name (a folded constant) is compared
    alone: its readers compute what they computed, and are not run."""
    if diff.bodies:
        return None, "the step rewrote nodes inside an If/Loop/Scan body"
    idx = after.index
    graph = after.graph
    inits = graph.initializers
    graph_outputs = {v.name for v in graph.outputs}
    live = {n: 1 for n in diff.nodes}
    same: list[str] = []
    for c in diff.constants:
        if values is not None and _identical(inits[c].const_value, values.get(c)):
            same.append(c)
            continue
        for nid in idx.consumers.get(c, ()):
            if idx.entries[nid].graph:
                return None, f"the changed constant {c!r} is read inside a body"
            live[nid] = 1
    order = {nid: idx.entries[nid].topo for nid in live}
    region = sorted(live, key=order.__getitem__)
    main = sum(1 for e in idx.entries.values() if not e.graph)
    if len(region) > MAX_REGION_SHARE * main:
        return None, f"the region holds {len(region)} of the {main} main-graph nodes"
    functions = {(f.domain, f.name, f.overload) for f in after.ir.functions.values()}
    in_region = set(region)
    produced: set[str] = set()
    tensors: list[str] = []
    outputs: list[str] = []
    kept: list[str] = []
    for nid in region:
        e = idx.entries[nid]
        node = e.node
        for inner in [node, *_body_nodes(node)]:  # a body runs within its owner
            if inner.op_type in RANDOM_OPS and inner.domain in ("", "ai.onnx"):
                return None, f"the region holds the random op {inner.op_type} ({nid})"
            if (inner.domain, inner.op_type, inner.overload) in functions:
                return None, f"the region holds {nid}, a call of the model's function " \
                    f"{inner.op_type!r}"
        read = False
        for v in node.outputs:
            if not v.name:
                continue
            produced.add(v.name)
            users = idx.consumers.get(v.name, ())
            if not users and v.name not in graph_outputs:
                continue  # nothing reads it (an inference Dropout's mask)
            read = True
            tensors.append(v.name)
            if v.name in graph_outputs or any(u not in in_region for u in users):
                outputs.append(v.name)
        if read:
            kept.append(nid)
    inputs: dict[str, None] = {}
    computed: set[str] | None = None
    for nid in kept:
        e = idx.entries[nid]
        # a body's reads of outer values are inputs of its owner's region too
        outer = [idx.values.get(n) for n in e.implicit_inputs]
        for v in [*e.node.inputs, *outer]:
            if v is None or not v.name or v.name in produced:
                continue
            if v.name in inits and v.const_value is not None:
                continue  # the new model's own constant, part of the region
            if values is not None and v.name not in values:
                if computed is None:
                    computed = _constant_outputs(after)
                if v.name in computed:
                    # computed from constants alone (a weight filled by ConstantOfShape)
                    # and not kept by the reference: the region computes it itself
                    continue
            inputs[v.name] = None
    constants = [c for c in diff.constants if c in graph_outputs or c in same]
    return Region(kept, list(inputs), outputs, tensors, constants, same), None


def _body_nodes(node: ir.Node) -> list[ir.Node]:
    """Every node inside ``node``'s bodies, nested ones too."""
    out: list[ir.Node] = []
    for a in node.attributes.values():
        graphs = [a.value] if a.type == ir.AttributeType.GRAPH else (
            list(a.value) if a.type == ir.AttributeType.GRAPHS else [])
        for g in graphs:
            for n in g:
                out.append(n)
                out.extend(_body_nodes(n))
    return out


def _constant_outputs(model: LabModel) -> set[str]:
    """Names of the main-graph values computed from constants alone (Constant nodes and the
    nodes :func:`onnx_lab.core.values.foldable_nodes` lists)."""
    names: set[str] = set()
    typed: set[str] = set()  # read x through a CastLike(c, x): the region would need x
    for _nid, n in foldable_nodes(model).values():
        if type_only_dtype(n) is not None or any(v is not None and v.name in typed
                                                 for v in n.inputs):
            typed.update(v.name for v in n.outputs)
        else:
            names.update(v.name for v in n.outputs)
    idx = model.index
    for nid in idx.topo_order(""):
        node = idx.entries[nid].node
        if node.op_type == "Constant" and node.domain == "":
            names.update(v.name for v in node.outputs)
    return names


def _identical(tensor: Any, ref: Any) -> bool:
    """Whether an initializer holds exactly (bit for bit) the reference's value."""
    if tensor is None or ref is None or is_structured(ref):
        return False
    ref = np.asarray(ref)
    if ref.dtype.kind in "OSU" or int(np.prod(tensor.shape.numpy(), dtype=np.int64)) != ref.size:
        return False
    try:
        arr = tensor.numpy()
    except Exception:  # noqa: BLE001 - a tensor numpy cannot hold: not identical
        return False
    return arr.dtype == ref.dtype and arr.shape == ref.shape and arr.tobytes() == ref.tobytes()


# ---------------------------------------------------------------------------- the reference
@dataclass
class PresetReference:
    """The model before a preset and its tensors on one seeded sample.

    Attributes:
        model: the reference model.
        feeds: (reference feeds, candidate feeds) of the sample (numerics.verify's feeds).
        values: name -> the reference value that stands for the current version's tensor of
            that name (graph inputs, node outputs); a step that changes a tensor without it
            being compared equal drops its name (:meth:`advance`).
        outputs: the reference's graph outputs: name -> value (what the final check
            compares the preset's result with).
    """

    model: LabModel
    feeds: tuple[dict[str, Any], dict[str, Any]]
    values: dict[str, Any]
    outputs: dict[str, Any]

    def advance(self, diff: StepDiff, report: Report | None) -> None:
        """Keep ``values`` true for the new version: drop the names the step changed, then
        take back those the report compared with a reference value and found equal (under
        the new name of a fused node too)."""
        if diff.bodies:
            self.values.clear()  # values computed inside bodies are not tracked: no regions
            return
        old = {n: self.values[n] for n in diff.names if n in self.values}
        for n in diff.names:
            self.values.pop(n, None)
        for r in (report.rows if report is not None else ()):
            name, ref = r["tensor"], r["ref_tensor"]
            if r["match"] == "preset_output":
                continue
            if not r["passed"] or flipped(r):  # downstream of a flip: not this value
                self.values.pop(name, None)
                continue
            v = old.get(ref, self.values.get(ref))
            if v is None or name not in diff.names:
                continue
            if is_structured(v) or r["shape"] is None or list(np.shape(v)) == list(r["shape"]):
                self.values[name] = v


def capture_reference(model: LabModel, candidate: LabModel, *, feeds: Any = None,
                      dims: Mapping[str, int] | None = None,
                      shapes: Mapping[str, Any] | None = None, seed: int = 0,
                      providers: Any = None, max_bytes: int = 1 << 30
                      ) -> tuple[PresetReference | None, str | None]:
    """Run ``model`` once on the seeded feeds (sized as the step from ``model`` to
    ``candidate`` is verified: numerics.verify's feeds) and keep every main-graph tensor it
    computes: (the reference, None), or (None, why not: several samples, the tensors would
    not fit in ``max_bytes // 2``, or the model does not run)."""
    # on use: tests stand in for run on its module; `import onnx_lab` loads this module
    from onnx_lab.runtime._runner import quick_sizes, run

    samples = _feeds(model, candidate, feeds, dims, shapes, seed, True)
    if len(samples) != 1:
        return None, f"{len(samples)} feed samples (regions are checked on one)"
    ref_feeds = samples[0][0]
    names = [n for n, _nid, _t in version_tensors(model)]
    # By quick shape inference, as the run's memory check sizes them (the full types only
    # when it fails: the sizes it leaves unknown depend on the values, unknown to both).
    shapes = {k: np.shape(v) for k, v in ref_feeds.items()
              if v is not None and not is_structured(v)}
    sizes = (quick_sizes(model, names, shapes) or estimate_bytes(model, names, shapes)) \
        if names else {}
    budget = max(max_bytes // 2, 1)
    unsized: list[str] = []
    if len(plan_chunks(sizes, budget)) > 1:
        # Values computed from constants alone (weights filled by ConstantOfShape) are left
        # out: a region that reads one computes it itself (find_region).
        computed = _constant_outputs(model)
        names = [n for n in names if n not in computed]
        if len(plan_chunks({n: sizes[n] for n in names}, budget)) > 1:
            # The plan sizes each tensor whose size depends on the values (NonZero, NMS,
            # TopK of a computed k: a detector's post-processing) as the largest known one.
            # When the known ones fit, those are captured too and kept while their actual
            # sizes fit (the run's memory check counts them as nothing either).
            known = {n: sizes[n] for n in names if sizes[n] is not None}
            if len(plan_chunks(known, budget)) > 1:
                return None, "the reference's tensors do not fit in max_bytes at once"
            unsized = [n for n in names if sizes[n] is None]
    try:
        values = run(model, ref_feeds, names, providers=providers) if names else {}
    except LabError as e:
        return None, f"the reference does not run: {e}"
    if unsized:
        held = sum(sizes[n] or 0 for n in names)
        kept = {v.name for v in model.graph.outputs}  # the final check compares them
        for n in unsized:
            held += _nbytes(values.get(n)) or 0
            if held > budget and n not in kept:
                values.pop(n, None)  # no reference value: a region reading it falls back
    values = {**ref_feeds, **values}
    outputs = {v.name: values[v.name] for v in model.graph.outputs if v.name in values}
    return PresetReference(model, samples[0], values, outputs), None


# ---------------------------------------------------------------------------- a step
def region_report(ref: PresetReference, before: LabModel, after: LabModel, result: Any = None,
                  *, diff: StepDiff | None = None, atol: float | None = None,
                  rtol: float | None = None, preset: str | None = None, providers: Any = None,
                  defer: bool = False) -> tuple[Report | PendingRegion | None, str]:
    """Verify the step ``before`` -> ``after`` by its region: (report, ``"region"`` or
    ``"unchanged"``), or (None, why the region cannot be cut cleanly: the caller runs the
    whole-model check). With ``defer``, a region that needs a run is returned planned
    (``(PendingRegion, "pending")``): :func:`judge_region` runs it later, alone or within
    the preset's final run.

    The report has :data:`onnx_lab.numerics.verify.REPORT_COLUMNS` (one row per compared
    region tensor, ``ref_tensor`` its name in the reference) and the attrs of
    :func:`onnx_lab.numerics.verify.verify`, plus ``verified_by`` and ``region`` (its node
    count, inputs and outputs). ``max_abs_err`` is over the graph outputs the region
    computes (None when it computes none: the preset's final check compares them).
    """
    if _fed(after) != _fed(ref.model):
        return None, "the step changed the graph inputs"
    if dict(after.ir.opset_imports) != dict(before.ir.opset_imports):
        return None, "the step changed the opset imports"
    if not _same_functions(before, after):
        return None, "the step changed the model's functions"
    if _saved_form_problem(before, after):
        return None, "the new model's saved form needs the whole-model check"
    diff = diff if diff is not None else step_diff(before, after, result)
    region, why = find_region(after, diff, ref.values)
    if region is None:
        return None, why or "no region"
    if region.empty:
        return unchanged_report(), "unchanged"
    for n in region.inputs:
        v = ref.values.get(n, _MISSING)
        if v is _MISSING:
            return None, f"the region's input {n!r} has no reference value (renamed or absent)"
        if v is None or is_structured(v) or np.asarray(v).dtype.kind in "OSU":
            return None, f"the region's input {n!r} is not a numeric tensor"
    not_comparable: dict[str, str] = {}
    wanted = set(region.tensors) | set(region.constants)
    pairs = [p for p in align_versions(before, after, result, rejected=not_comparable,
                                       wanted=wanted)
             if p.tensor in wanted and p.ref in ref.values]
    paired = {p.tensor for p in pairs}
    pairs[:0] = [VersionPair(c, c, None, before.index.producer.get(c), "name", -1)
                 for c in region.constants if c not in paired and c in ref.values]
    paired = {p.tensor for p in pairs}
    for n in [*region.outputs, *region.constants]:
        if n not in paired:
            return None, f"the region's output {n!r} has no counterpart in the reference"
    pending = PendingRegion(before, after, result, region, pairs, not_comparable,
                            {"atol": atol, "rtol": rtol, "preset": preset,
                             "providers": providers})
    if defer and region.nodes:
        return pending, "pending"
    try:
        return judge_region(ref, pending), "region"
    except (LabError, ValueError) as e:  # a region that does not run alone: the whole model
        logger.debug("region run failed (%s)", e)
        return None, f"the region does not run on its own: {e}"


@dataclass
class PendingRegion:
    """A step's region, planned and not yet run (:func:`region_report` with ``defer``): the
    preset's final run computes its tensors when no later step changed a value."""

    before: LabModel
    after: LabModel
    result: Any
    region: Region
    pairs: list[VersionPair]
    not_comparable: dict[str, str]
    options: dict[str, Any]

    def still_computed(self, model: LabModel) -> bool:
        """Whether ``model`` computes the region's tensors with the same nodes (the later
        steps changed no value)."""
        a_idx, m_idx = self.after.index, model.index
        for name in self.region.tensors:
            nid = a_idx.producer.get(name)
            if nid is None or m_idx.producer.get(name) != nid:
                return False
            if not _same_node(a_idx.entries[nid].node, m_idx.entries[nid].node):
                return False
        return True

    def feeds_itself(self, model: LabModel) -> bool:
        """Whether an input of the region is computed, in ``model``, from one of the
        region's own nodes (through nodes outside it: Conv -> Relu -> Conv with both Convs
        rewritten). Such an input holds the new model's value there, not the reference's,
        so the region read from a run of ``model`` is judged by the differences of the
        whole chain, as the whole-model check judges it: a failure there is judged again
        with the region run on the reference's values (``steps._Regions.finish``)."""
        idx = model.index
        inside = set(self.region.nodes)
        todo = [p for n in self.region.inputs if (p := idx.producer.get(n)) is not None]
        seen: set[str] = set(todo)
        while todo:
            nid = todo.pop()
            if nid in inside:
                return True
            for prev in idx.predecessors(nid):  # (with the outer values a body reads)
                if prev not in seen:
                    seen.add(prev)
                    todo.append(prev)
        return False


def judge_region(ref: PresetReference, pending: PendingRegion,
                 values: Mapping[str, Any] | None = None, *, copy: bool = False) -> Report:
    """The report of a planned region: its tensors computed by the region alone on the
    reference's values (``values`` None), or given (from a run of the whole final model,
    whose inputs to the region are the reference's values bit for bit). Raises LabError or
    ValueError when the region does not run on its own."""
    region, after, opts = pending.region, pending.after, pending.options
    got = dict(values) if values is not None else (
        _run_region(after, region, ref, opts["providers"]) if region.nodes else {})
    for c in region.constants:
        got[c] = after.graph.initializers[c].const_value.numpy()
    pairs = pending.pairs
    stats = {p.tensor: _new_stats() for p in pairs}
    skipped: list[str] = []
    precision = computed_precision(ref.model)
    for p in pairs:
        if not _judge(p, ref.values[p.ref], got[p.tensor], stats[p.tensor],
                      preset=opts["preset"], atol=opts["atol"], rtol=opts["rtol"],
                      computed=precision.get(p.ref)):
            skipped.append(p.tensor)
    pairs = [p for p in pairs if p.tensor not in set(skipped)]
    rows = [_row(p, stats[p.tensor]) for p in pairs]
    selections = None
    if not all(r["passed"] for r in rows):  # near-tie flips of selections inside the region
        selections = judge_selections(_region_sides(ref, pending, got),
                                      {r["tensor"]: r["passed"] for r in rows})
        selections.apply(rows, pending.not_comparable)
    failing = [r["tensor"] for r in rows if not r["passed"]]
    outs = [r["max_abs"] for r in rows if r["match"] == "output" and not flipped(r)]
    attrs = {"passed": not failing, "first_failure": failing[0] if failing else None,
             "max_abs_err": float(max(outs)) if outs else None, "samples": 1,
             "skipped": sorted(set(skipped)), "not_comparable": pending.not_comparable,
             "verified_by": "region",
             "region": {"nodes": len(region.nodes), "inputs": list(region.inputs),
                        "outputs": list(region.outputs),
                        "run": ("as a copy in the final run" if values is not None and copy
                                else "with the final outputs" if values is not None
                                else "alone" if region.nodes else "none")}}
    if selections is not None and not selections.empty:
        attrs["selections"] = selections.to_dict()
        attrs["selection_note"] = selections.note(
            [r["tensor"] for r in rows if r["match"] == "output" and flipped(r)])
    return Report(rows, attrs)


def _rules(opts: Mapping[str, Any]) -> Any:
    """dtype (, output=) -> the rule of ``opts``' preset and tolerances."""
    return lambda dt, output=False: rule_for(dt, output=output, preset=opts.get("preset"),
                                             atol=opts.get("atol"), rtol=opts.get("rtol"))[1]


def _region_sides(ref: PresetReference, pending: PendingRegion, got: Mapping[str, Any]
                  ) -> Sides:
    """A region as the selection judge sees it: its tensors as computed, its inputs fed with
    the reference's values, the reference's values by the pairs; its nodes checked on their
    own downstream of a flip."""
    region, after = pending.region, pending.after
    ref_of = {p.tensor: p.ref for p in pending.pairs}
    for n in region.inputs:
        ref_of.setdefault(n, n)
    for n in after.graph.initializers:
        if n in ref.values:
            ref_of.setdefault(n, n)
    fed = {n: ref.values[n] for n in region.inputs}

    def values(names: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        have = {**fed, **got}
        cand = fetch(after, have, names, lambda ns: {})
        refs = {n: ref.values[ref_of[n]] for n in names if ref_of.get(n) in ref.values}
        return [(refs, cand)]

    nodes = set(region.nodes)
    return Sides(after, pending.before, ref_of.get, values, _rules(pending.options),
                 nodes.__contains__, pending.options.get("providers"))


def judge_final(ref: PresetReference, model: LabModel, rows: list[dict[str, Any]], *,
                atol: float | None = None, rtol: float | None = None,
                preset: str | None = None, providers: Any = None,
                values: Mapping[str, Any] | None = None) -> Selections | None:
    """The preset's failing outputs (:func:`final_check`'s rows) judged for near-tie flips of
    the selections above them (:mod:`onnx_lab.numerics.selection`), the rows updated in
    place; None when every output passed. The final model's values come from one more run,
    the reference's from ``ref.values`` (its names stand for the current version's
    tensors; ``values``: the final model's tensors already computed, by
    :func:`~onnx_lab.numerics.selection.selection_tensors` in the final run); every rewrite
    was checked by its own region, so no node is checked again."""
    if all(r["passed"] for r in rows):
        return None
    by_output = {r["tensor"]: r["ref_tensor"] for r in rows}

    def ref_of(name: str) -> str | None:
        if name in by_output:
            return by_output[name]
        return name if name in ref.values else None

    have = dict(values or {})

    def values_of(names: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        # on use: tests stand in for run on its module
        from onnx_lab.runtime._runner import run

        feeds = {**ref.feeds[1], **have}
        cand = fetch(model, feeds, names, lambda ns: run(model, ref.feeds[1], ns,
                                                         providers=providers))
        refs = {n: ref.values[m] for n in names if (m := ref_of(n)) in ref.values}
        return [(refs, cand)]

    sides = Sides(model, ref.model, ref_of, values_of,
                  _rules({"preset": preset, "atol": atol, "rtol": rtol}), None, providers)
    selections = judge_selections(sides, {r["tensor"]: r["passed"] for r in rows})
    selections.apply(rows)
    return selections


_MISSING = object()


def unchanged_report() -> Report:
    """The report of a step that changed no value anything reads (nothing ran)."""
    attrs = {"passed": True, "first_failure": None, "max_abs_err": None, "samples": 0,
             "skipped": [], "not_comparable": {}, "verified_by": "unchanged",
             "region": {"nodes": 0, "inputs": [], "outputs": []},
             "note": "no node or constant that something reads changed: the values are the "
             "previous version's"}
    return Report([], attrs)


def _same_functions(before: LabModel, after: LabModel) -> bool:
    """Whether both versions hold the same model-local functions (a rewritten body changes
    what its unchanged call nodes compute)."""
    a, b = after.ir.functions, before.ir.functions
    if a.keys() != b.keys():
        return False
    return all(a[k] is b[k] or ir.serde.serialize_function(a[k]).SerializeToString()
               == ir.serde.serialize_function(b[k]).SerializeToString() for k in a)


def _fed(model: LabModel) -> list[str]:
    """The graph inputs a run is fed (an initializer listed as an input, as IR < 4 allows, is
    not)."""
    g = model.graph
    return [v.name for v in g.inputs if v.name not in g.initializers]


def _run_region(after: LabModel, region: Region, ref: PresetReference, providers: Any
                ) -> dict[str, Any]:
    """The region's tensors, computed by the region alone on the reference's values."""
    return run_cut(after, {n: np.asarray(ref.values[n]) for n in region.inputs},
                   region.tensors, providers)


def final_check(ref: PresetReference, model: LabModel, *, atol: float | None = None,
                rtol: float | None = None, preset: str | None = None, providers: Any = None,
                extra: list[str] | None = None, copies: list[PendingRegion] | None = None
                ) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The preset's outputs against the reference's: (report rows (``match``
    ``"preset_output"``, one per graph output, judged by the output rule, element-wise),
    the values of ``extra``, the tensors of each of ``copies``), from one run of ``model``
    on the reference's sample (``extra``: more tensors of ``model`` computed by the same
    run: a pending region's; ``copies``: planned regions computed in the same run by a copy
    of each, fed the reference's values at its inputs (:func:`with_copies`)). Raises
    LabError when the run with ``extra`` or ``copies`` fails (the caller runs them alone)."""
    # on use: tests stand in for run on its module
    from onnx_lab.runtime._runner import run

    outs = [v.name for v in model.graph.outputs]
    refs = list(ref.outputs)
    pairs = []
    for i, name in enumerate(outs):
        r = name if name in refs else (refs[i] if i < len(refs) else None)
        if r is not None:
            pairs.append(VersionPair(name, r, model.index.producer.get(name),
                                     ref.model.index.producer.get(r), "output", i))
    stats = {p.tensor: _new_stats() for p in pairs}
    wanted = list(dict.fromkeys([*(p.tensor for p in pairs), *(extra or [])]))
    runs, feeds, renamed = model, ref.feeds[1], []
    if copies:
        runs, fed, renamed = with_copies(model, copies, ref)
        feeds = {**feeds, **fed}
        wanted += [n for names in renamed for n in names.values()]
    try:
        got = run(runs, feeds, wanted, providers=providers) if wanted else {}
    except LabError as e:
        if extra or copies:
            raise  # the caller runs the pending regions alone, then this check again
        # a run refused for want of memory (an audit's --memory-gb) says nothing of the
        # numbers: the outputs are not checked, which is not "they differ"
        why = f"{NOT_CHECKED}: {e}" if out_of_memory(e, runs) else \
            f"the optimized model does not run: {e}"
        for p in pairs:
            stats[p.tensor].update(passed=False, max_abs=math.inf, max_rel=math.inf, note=why)
        got = None
    if got is not None:
        precision = computed_precision(ref.model)
        for p in pairs:
            _judge(p, ref.outputs[p.ref], got[p.tensor], stats[p.tensor], preset=preset,
                   atol=atol, rtol=rtol, computed=precision.get(p.ref))
        if precision and not all(s["passed"] for s in stats.values()):
            stats = _against_plain_run(ref, pairs, got, stats, run, preset=preset, atol=atol,
                                       rtol=rtol, providers=providers)
    rows = []
    for p in pairs:
        row = _row(p, stats[p.tensor])
        row["match"] = "preset_output"
        rows.append(row)
    values = {n: got[n] for n in (extra or [])} if got is not None else {}
    copied = [{n: got[m] for n, m in names.items()} for names in renamed] \
        if got is not None else []
    return rows, values, copied


def _against_plain_run(ref: PresetReference, pairs: list[VersionPair], got: Mapping[str, Any],
                       stats: dict[str, dict[str, Any]], run: Any, **judge: Any
                       ) -> dict[str, dict[str, Any]]:
    """The final check's stats again, against the original's outputs from a run of its
    outputs alone, when those differ from the ones captured with every intermediate exposed.

    Exposing a tensor can change what onnxruntime computes: on CPU a float16 model runs many
    ops in float32 between inserted Casts, and a float16 tensor exposed as an output keeps
    its Cast pair, so it is rounded (or overflows to inf) where the plain run never is. The
    preset's result runs plainly; judged against the captured outputs, a correct preset can
    fail (light ZFNet-512 converted to float16: NaN outputs captured, finite ones plain).
    Costs one run of the original, only when a final output of a model that computes in a
    narrower float (:func:`~onnx_lab.numerics.align.computed_precision`) failed."""
    try:
        plain = run(ref.model, ref.feeds[0], list(dict.fromkeys(p.ref for p in pairs)),
                    providers=judge.pop("providers"))
    except LabError:
        return stats
    if all(_same_value(plain[p.ref], ref.outputs[p.ref]) for p in pairs):
        return stats
    precision = computed_precision(ref.model)
    again = {p.tensor: _new_stats() for p in pairs}
    for p in pairs:
        _judge(p, plain[p.ref], got[p.tensor], again[p.tensor],
               computed=precision.get(p.ref), **judge)
        if again[p.tensor]["passed"] and not again[p.tensor]["note"]:
            again[p.tensor]["note"] = ("against the original's outputs run alone: with its "
                                       "intermediates exposed onnxruntime computed others")
    ref.outputs.update({p.ref: plain[p.ref] for p in pairs})
    return again


def _same_value(a: Any, b: Any) -> bool:
    """Bit for bit (NaN at the same places), for arrays; structured values: not compared."""
    if is_structured(a) or is_structured(b):
        return True
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


#: The prefix of the tensors a region's copy adds to the final run (``with_copies``).
COPY_PREFIX = "onnx_lab.region"


def with_copies(model: LabModel, copies: list[PendingRegion], ref: PresetReference
                ) -> tuple[LabModel, dict[str, Any], list[dict[str, str]]]:
    """``model`` plus a copy of each planned region (cut from the version its step made),
    its inputs new graph inputs fed with the reference's values, every name it adds
    prefixed: (the model to run, its extra feeds, per copy {region tensor: its name in the
    run}). One run then computes the final outputs and every region exactly as the region
    alone would (the same nodes on the same values), sharing one session.

    Raises ValueError when a copy cannot be built (a name already taken, a region input
    without a reference value): the caller runs the regions alone."""
    merged = model.clone()
    graph = merged.graph
    taken = set(merged.index.values) | set(graph.initializers)
    fed: dict[str, ir.Value] = {}
    feeds: dict[str, Any] = {}
    renamed: list[dict[str, str]] = []
    for k, plan in enumerate(copies):
        prefix = f"{COPY_PREFIX}{k}/"
        region = plan.region
        sub = extract_graph(plan.after, region.inputs, region.tensors)
        for v in list(sub.inputs):
            arr = np.asarray(ref.values[v.name])  # KeyError: no reference value
            name = f"{COPY_PREFIX}.reference/{v.name}"
            new = fed.get(name)
            if new is None:
                if name in taken:
                    raise ValueError(f"the name {name!r} is taken")
                new = ir.Value(name=name, type=ir.TensorType(ir.DataType.from_numpy(arr.dtype)),
                               shape=ir.Shape(arr.shape))
                graph.inputs.append(new)
                fed[name] = new
                feeds[name] = arr
            v.replace_all_uses_with(new)
        sub.outputs.clear()
        sub.inputs.clear()
        for name in list(sub.initializers):
            init = sub.initializers.pop(name)
            # (its tensor is shared with the model's versions and the message it was read
            # from: renamed in place, it would rename the user's ModelProto's initializer)
            rename_value(init, prefix + name)
            if init.name in taken:
                raise ValueError(f"the name {init.name!r} is taken")
            graph.register_initializer(init)
        names: dict[str, str] = {}
        for node in list(sub):
            node.name = prefix + (node.name or "")  # node names are unique in a graph too
            for v in node.outputs:
                if v.name:
                    if v.name in region.tensors:
                        names[v.name] = prefix + v.name
                    v.name = prefix + v.name
                    if v.name in taken:
                        raise ValueError(f"the name {v.name!r} is taken")
            sub.remove(node)
            graph.append(node)
        renamed.append(names)
    return LabModel(merged.ir, path=model.path), feeds, renamed
