"""Confirming a culprit the way a person does by hand: feed the reference's activations into
the candidate's suspect node and look at its local error.

A divergence found by :func:`~onnx_lab.numerics.compare.compare` is the first tensor out of
tolerance whose inputs agree. "Agree" is within a tolerance, and inputs with no counterpart
stand for their compared ancestors, so the suspect can still be a node that only *receives*
slightly different inputs and amplifies them (a Softmax, a division). :func:`local_check` cuts
the candidate's node out (with its weights), runs it in onnxruntime on the reference's values of
its inputs and compares its outputs with the reference's: a local error out of tolerance means
the node computes differently; a local error within it means the difference comes in through
its inputs.

Example:
    >>> c = onnx_lab.compare(ref, cand, confirm=True)
    >>> c.first_divergence["confirmed"], c.first_divergence["local_max_abs"]
    >>> check = local_check(c)          # the cut model, its feeds, expected and got
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.subgraph import extract_graph
from onnx_lab.core.values import is_constant, weight_makers
from onnx_lab.errors import InputError, LabError
from onnx_lab.numerics._divergence import _data_inputs as _direct_data_inputs
from onnx_lab.numerics._divergence import _unchanged
from onnx_lab.numerics._values import as_value, is_structured, value_dtype
from onnx_lab.numerics.metrics import Rule, rule_for, tensor_metrics
from onnx_lab.runtime.capture import run as capture_run

__all__ = ["LocalCheck", "local_check", "confirm_divergence"]

_NP = {"float32": np.float32, "float16": np.float16, "float64": np.float64,
       "int64": np.int64, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
       "bool": np.bool_}


@dataclass
class LocalCheck:
    """The candidate's suspect node run on the reference's activations.

    Attributes:
        node_id: the node in the candidate; ref_node_id: its counterpart in the reference.
        model: the candidate's node alone (its weights and Constant inputs included), whose
            inputs are the node's data inputs.
        feeds: the reference's values of those inputs (cast to the candidate's input dtypes).
        expected: the reference's values of the node's outputs, by the candidate's names.
        got: what the candidate's node computes from ``feeds``.
        metrics: per output, :func:`~onnx_lab.numerics.metrics.tensor_metrics` of got vs
            expected under ``rules``.
        rules: per output, the rule that judged it; preset: the preset it came from.
        region: the candidate's nodes cut out: the node alone, or with the nodes above it
            whose outputs have no counterpart (a QDQ candidate's QuantizeLinear and the
            node before it, when the counterpart is a DequantizeLinear).
        passed: every output within its rule (the node computes like the reference).
    """

    node_id: str
    ref_node_id: str | None
    model: LabModel
    feeds: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    got: dict[str, np.ndarray]
    metrics: dict[str, dict[str, Any]]
    rules: dict[str, Rule] = field(default_factory=dict)
    preset: str = "by dtype"
    region: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(m["passed"] for m in self.metrics.values())

    @property
    def max_abs(self) -> float:
        return max((float(m["max_abs"]) for m in self.metrics.values()), default=0.0)


def _inf_apart(expected: Any, got: Any) -> bool:
    """Whether two float arrays of one shape hold infinities at other places."""
    if is_structured(expected) or is_structured(got):
        return False
    a, b = np.asarray(expected), np.asarray(got)
    if a.dtype.kind != "f" or b.dtype.kind != "f" or a.shape != b.shape:
        return False
    return bool((np.isinf(a) != np.isinf(b)).any())


def _counterparts(comparison: Any) -> dict[str, str]:
    """{candidate tensor: reference tensor} from the comparison's alignment."""
    al = comparison.alignment
    out = {}
    for r, c in zip(al["tensor"], al["cand_tensor"]):
        if isinstance(c, str) and isinstance(r, str):
            out.setdefault(c, r)
    for r, c in zip(comparison.outputs["tensor"], comparison.outputs["cand_tensor"]):
        out.setdefault(c, r)
    return out


def local_check(comparison: Any, divergence: dict[str, Any] | None = None, *,
                sample: int = 0) -> LocalCheck:
    """Run the candidate's node of ``divergence`` (default: the first divergence) on the
    reference's activations of its inputs, and compare its outputs with the reference's.

    Args:
        comparison: a :class:`~onnx_lab.numerics.compare.Comparison` of two models (not of a
            dict reference: the reference's activations are recaptured).
        divergence: a ``first_divergence``-like dict (needs ``cand_node_id`` or ``node_id``).
        sample: which feed sample to use.

    Raises:
        InputError: nothing to check (no divergence, a dict reference, a node without a
            counterpart, a node inside an If/Loop body, inputs without counterparts).
    """
    if not all(hasattr(comparison, a) for a in ("first_divergence", "reference", "candidate")):
        raise InputError(f"A repro or local check needs a comparison, the result of "
                         f"onnx_lab.compare(...), got {type(comparison).__name__}.",
                         fix="c = onnx_lab.compare(reference, candidate); then "
                         "onnx_lab.repro(c, 'repro/') or c.repro('repro/').")
    if divergence is not None and not isinstance(divergence, dict):
        raise InputError(f"divergence must be a dict like first_divergence, got "
                         f"{type(divergence).__name__}.",
                         fix="Pass divergence={'cand_node_id': ...}.")
    div = divergence if divergence is not None else comparison.first_divergence
    if div is None:
        raise InputError("The comparison has no divergence to check.",
                         fix="Pass divergence={'cand_node_id': ...} for a node of your choice.")
    if comparison.reference is None:
        raise InputError("A comparison against a dict of arrays cannot be checked locally: "
                         "the reference's activations are not available.",
                         fix="Compare against the reference model instead.")
    cand: LabModel = comparison.candidate.model
    ref: LabModel = comparison.reference.model
    nid = div.get("cand_node_id") or div.get("node_id")
    if not isinstance(nid, str) or nid not in cand.index.entries:
        raise InputError(f"Node {nid!r} of the divergence has no counterpart in the candidate.",
                         fix="Check comparison.alignment for the node's tensors.")
    entry = cand.index.entries[nid]
    if entry.graph:
        raise InputError(f"Node {nid!r} lies inside the body {entry.graph!r}: only main-graph "
                         "nodes can be cut out.", fix="Check the node that owns the body.")
    node = entry.node
    pairs = _counterparts(comparison)
    graph_inputs = {v.name for v in cand.graph.inputs}
    # Weights the candidate computes (a ConstantOfShape fill, Pow(8, 0.5)) are cut out with
    # the node, as its initializers are: fed the reference's values, a weight that differs
    # (the bug) was hidden and the check found nothing.
    makers = weight_makers(cand)
    data = _data_inputs(cand, node, makers)
    missing = [n for n in data if n not in pairs and n not in graph_inputs]
    region = [nid]
    if missing:
        # A QDQ candidate's counterpart is the DequantizeLinear after the node: the cut
        # reaches up through the tensors without a counterpart (its QuantizeLinear, the
        # node itself) to tensors that have one.
        data, region = _region_inputs(cand, nid, data, pairs, graph_inputs, makers)
        if not region:
            raise InputError(f"Input(s) {missing} of {nid!r} have no counterpart in the "
                             "reference, so the reference's values cannot be fed.",
                             fix="Check a node whose inputs were compared "
                             "(comparison.layers).")
    outs = [v.name for v in node.outputs if v.name and v.name in pairs]
    if not outs:
        raise InputError(f"No output of {nid!r} has a counterpart in the reference.",
                         fix="Check comparison.alignment.")
    feeds_all = comparison.feeds[sample]
    want = list(dict.fromkeys([pairs[n] for n in data if n not in graph_inputs]
                              + [pairs[o] for o in outs]))
    ref_vals = capture_run(ref, {k: v for k, v in feeds_all.items()
                                 if k in {i.name for i in ref.graph.inputs}}, outputs=want)
    try:
        graph = extract_graph(cand, data, outs)
    except ValueError as e:  # a body reading the enclosing graph (an If): no clean cut
        raise InputError(f"{nid!r} cannot be cut out of the candidate: {e}",
                         fix="Check the node's inputs in comparison.layers; a node whose "
                         "If/Loop bodies read the enclosing graph is not cut out.") from e
    graph.opset_imports.update(cand.ir.opset_imports)
    # Cut tensors need types: the candidate's inferred dtype, the fed value's shape.
    types = cand.types(comparison.candidate.dims, comparison.candidate.shapes)
    feeds: dict[str, np.ndarray] = {}
    for v in graph.inputs:
        value = as_value(feeds_all[v.name] if v.name in graph_inputs
                         else ref_vals[pairs[v.name]])
        if is_structured(value):  # a sequence or map (its elements' shapes may differ)
            feeds[v.name] = value
            if v.type is None:  # the candidate's type, else a sequence of its first's dtype
                known = cand.index.values.get(v.name)
                if known is not None and known.type is not None:
                    v.type = known.type
                elif isinstance(value, list):
                    v.type = ir.SequenceType(ir.TensorType(ir.DataType.from_numpy(
                        np.asarray(value[0]).dtype) if value else ir.DataType.FLOAT))
            continue
        info = types.get(v.name)
        want_dt = _NP.get(info.dtype if info is not None and info.dtype else "")
        if want_dt is not None:
            value = value.astype(want_dt)
        feeds[v.name] = value
        if v.type is None:
            v.dtype = ir.DataType.from_numpy(value.dtype)
        v.shape = ir.Shape(value.shape)
    for v in graph.outputs:
        info = types.get(v.name)
        if v.type is None and info is not None and info.dtype in _NP:
            v.dtype = ir.DataType.from_numpy(np.dtype(_NP[info.dtype]))
    sub = LabModel(ir.Model(graph, ir_version=cand.ir.ir_version,
                            functions=list(cand.ir.functions.values())), path=cand.path)
    got = capture_run(sub, feeds, outputs=outs)
    preset = getattr(comparison, "preset", "by dtype")
    outputs = set(comparison.outputs["cand_tensor"])
    metrics: dict[str, dict[str, Any]] = {}
    rules: dict[str, Rule] = {}
    # a sequence or map as it is: numpy made a tensor of a sequence of equal shapes (and the
    # repro's script then failed on the list onnxruntime gave), and refused unequal ones
    expected = {o: as_value(ref_vals[pairs[o]]) for o in outs}
    for o in outs:
        exp = expected[o]
        dt = value_dtype(exp) if is_structured(exp) else \
            "bool" if exp.dtype == np.bool_ else str(exp.dtype)
        _name, rules[o] = rule_for(dt, output=o in outputs,
                                   preset=None if preset == "by dtype" else preset)
        metrics[o] = tensor_metrics(exp, as_value(got[o]), rule=rules[o])
        if div.get("two_ways") and _inf_apart(exp, got[o]):
            # a divergence where one side's inf faces the other's 65504 (compare's
            # two_ways): what the metrics take for one overflow is the difference checked
            metrics[o] = {**metrics[o], "passed": False, "max_abs": math.inf}
    return LocalCheck(nid, div.get("node_id"), sub, feeds, expected,
                      {o: as_value(got[o]) for o in outs}, metrics, rules, preset, region)

def _data_inputs(model: LabModel, node: ir.Node, makers: set[str]) -> list[str]:
    """The inputs of ``node`` that carry data (not weights, nor weights nodes compute), and
    the values of the enclosing graph its If/Loop bodies read (silero-vad's If reads the
    audio in its branches)."""
    idx = model.index
    out = _direct_data_inputs(node, idx, makers)
    for name in idx.entries[idx.node_id(node)].implicit_inputs:
        v = idx.values.get(name)
        if v is not None and name not in out and not is_constant(v, stored=True) \
                and idx.producer.get(name) not in makers:
            out.append(name)
    return out


def _region_inputs(cand: LabModel, nid: str, data: list[str], pairs: dict[str, str],
                   graph_inputs: set[str], makers: set[str], limit: int = 32
                   ) -> tuple[list[str], list[str]]:
    """(the tensors to feed, the candidate's nodes cut out) when some data inputs of ``nid``
    have no counterpart: up through their producers to tensors that have one (or graph
    inputs), at most ``limit`` nodes of the main graph; ([], []) when that cannot be cut."""
    idx = cand.index
    feed: list[str] = []
    region = [nid]
    todo = list(data)
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name in pairs or name in graph_inputs:
            feed.append(name)
            continue
        pid = idx.producer.get(name)
        if pid is None or idx.entries[pid].graph or len(region) >= limit:
            return [], []
        if pid not in region:
            region.append(pid)
            todo.extend(_data_inputs(cand, idx.node(pid), makers))
    made = {v.name for r in region for v in idx.node(r).outputs}
    if made & set(feed):  # a node of the region makes a fed tensor too: no clean cut
        return [], []
    return feed, region



def _node_unchanged(comparison: Any, check: LocalCheck) -> bool:
    """Whether the checked node is, in the candidate, the reference node's computation (same
    op, attributes, dtypes and weights): a cut that also holds the nodes above it then shows
    what those compute."""
    ref: LabModel = comparison.reference.model
    rid = check.ref_node_id
    if not isinstance(rid, str) or rid not in ref.index.entries:
        return False
    layers = comparison.layers
    equal = frozenset(t for t, c, e in zip(layers["tensor"], layers["cand_tensor"],
                                           layers["max_abs"]) if t == c and e == 0)
    return _unchanged(ref.index.node(rid), comparison.candidate.model, check.node_id, ref,
                      equal)


def confirm_divergence(comparison: Any) -> dict[str, Any]:
    """The keys :func:`compare` adds to ``first_divergence`` with ``confirm=True``:
    confirmed (the node computes differently), local_max_abs, local_passed, confirm_note, and
    ``cause`` updated from what the check showed (a weight difference stays ``weights``)."""
    div = comparison.first_divergence
    try:
        check = local_check(comparison)
    except LabError as e:  # a cut that cannot be made or run: the comparison stands
        return {"confirmed": None, "local_max_abs": math.nan, "local_passed": None,
                "confirm_note": f"not confirmed: {e.problem}"}
    computes = not check.passed
    cause = div.get("cause")
    if cause != "weights":
        cause = "computation" if computes else "inputs"
    rule = next(iter(check.rules.values())).describe()
    what = check.node_id if len(check.region) < 2 else \
        f"{check.node_id} (cut out with {', '.join(check.region[1:])})"
    others = check.region[1:]
    if computes and others and cause != "weights" and _node_unchanged(comparison, check):
        # The cut reached up through nodes whose outputs have no counterpart (a residual Add
        # rewired to another tensor: "not the same quantity"), and the node itself is the
        # reference's computation: the difference is made in those nodes. It had been told
        # "LayerNormalization ... computes differently", the node a rewired Add fed.
        cand = comparison.candidate.model
        where = ", ".join(f"{cand.index.node(n).op_type} {n!r}" for n in others)
        head = f"{div.get('op_type', '')} {div.get('node_id', check.node_id)}".strip()
        return {"confirmed": True, "local_max_abs": check.max_abs, "local_passed": False,
                "cause": "inputs", "confirm_note": (
                    f"confirmed: on the reference's inputs, {what} still differs (local "
                    f"max_abs {check.max_abs:.3g}; {rule}); {check.node_id} itself is "
                    f"unchanged, so the difference is made in {where}"),
                "message": (
                    f"{head}: unchanged in the candidate (same op, attributes and weights), "
                    f"its output differs because what feeds it does: cut out with {where} "
                    f"and fed the reference's values above them, it still differs (local "
                    f"max_abs {check.max_abs:.3g}), so {where} "
                    f"{'computes' if len(others) == 1 else 'compute'} differently"
                    + (f"; {div['message'].split('; upstream, ', 1)[1]}"
                       if "; upstream, " in div.get("message", "") else ""))}
    note = (f"confirmed: on the reference's inputs, {what} still differs "
            f"(local max_abs {check.max_abs:.3g}; {rule}): it computes differently"
            if computes else
            f"not confirmed: on the reference's inputs, {what} agrees (local max_abs "
            f"{check.max_abs:.3g}; {rule}): the difference comes in through its inputs")
    out = {"confirmed": computes, "local_max_abs": check.max_abs,
           "local_passed": check.passed, "cause": cause, "confirm_note": note}
    if cause != div.get("cause"):  # the message said what the check disproved
        head = f"{div.get('op_type', '')} {div.get('node_id', check.node_id)}".strip()
        out["message"] = (f"{head} computes differently: fed the reference's inputs its output "
                          f"still differs (local max_abs {check.max_abs:.3g})" if computes else
                          f"{head}: its output differs (max_abs {div.get('max_abs', math.nan):.3g})"
                          f", but fed the reference's inputs it agrees (local max_abs "
                          f"{check.max_abs:.3g}): the difference comes in through its inputs")
    return out
