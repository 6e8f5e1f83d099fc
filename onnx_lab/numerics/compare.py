"""Layer-by-layer comparison of two models (or a model and captured arrays): where they diverge.

Stages (STYLE rule 8): :func:`~onnx_lab.numerics.align.align` pairs tensors, the pairs are
captured in chunks bounded by ``max_bytes`` — the reference's chunk first, then the candidate's
same chunk, metrics accumulated, both dropped — and the result is a :class:`Comparison` holding
DataFrames and views. Graph optimizations are disabled so no tensor is fused away.

Example:
    >>> import onnx_lab
    >>> from onnx_lab import to_fp16
    >>> ref = onnx_lab.open("sample:convnet")
    >>> c = onnx_lab.compare(ref, to_fp16(ref))
    >>> c.passed, c.first_divergence
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.branches import branch_labels, branch_switches
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import check_dim_arguments, fit_dims, validate_dims
from onnx_lab.core.source import Resolved, resolve
from onnx_lab.core.values import const_array
from onnx_lab.errors import (
    DimError,
    InputError,
    LabError,
    RuntimeLoadError,
    clip_text,
    strict_keywords,
)

# By job, every name importable from here: the runs, the divergence, the result.
from onnx_lab.numerics._absorbed import absorbed, mark_absorbed
from onnx_lab.numerics._compare_runs import (  # noqa: F401  (re-exports)
    _ORT_DOMAINS,
    CANDIDATE_ONLY_FIX,
    _run,
    _run_all,
    _run_once,
    _session,
)
from onnx_lab.numerics._divergence import (  # noqa: F401  (re-exports)
    _blame,
    _data_inputs,
    _differing_weights,
    _dtype_name,
    _first_divergence,
    _nonfinite_rows,
    _reaches,
)
from onnx_lab.numerics.align import (
    ALIGN_COLUMNS,
    SameQuantity,
    align,
    kept_node,
    through_float_casts,
)
from onnx_lab.numerics.comparison import Comparison
from onnx_lab.numerics.confirm import confirm_divergence
from onnx_lab.numerics.metrics import (
    METRIC_COLUMNS,
    MetricAccumulator,
    get_preset,
    rule_for,
)
from onnx_lab.numerics.selection import (
    Selections,
    Sides,
    downstream,
    fetch,
    flipped,
    judge_selections,
    selection_nodes,
    selection_region,
)
from onnx_lab.runtime.capture import estimate_bytes, plan_chunks
from onnx_lab.runtime.feeds import as_feed_list, cache_length_feeds, input_specs, past_length
from onnx_lab.runtime.session import (
    RUNTIME_PROTO_KEY,
    make_session,
    resolve_providers,
    run_session,
)

logger = logging.getLogger(__name__)

__all__ = ["compare", "Comparison", "LAYER_COLUMNS", "OUTPUT_COLUMNS", "default_preset"]

LAYER_COLUMNS = ["tensor", "node_id", "op_type", "depth", "cand_tensor", "cand_node_id", "match",
                 *METRIC_COLUMNS, "preset"]
OUTPUT_COLUMNS = ["tensor", "cand_tensor", *METRIC_COLUMNS, "preset"]


# ---------------------------------------------------------------------------- inputs
def _split_providers(providers: Any) -> tuple[list[str], list[str]]:
    """(reference providers, candidate providers); a pair of lists compares two EPs."""
    if isinstance(providers, (tuple, list)) and len(providers) == 2 and all(
            isinstance(p, (list, tuple)) for p in providers):
        return resolve_providers(providers[0]), resolve_providers(providers[1])
    p = resolve_providers(providers)
    return p, p


def _read_inputs(model: LabModel, names: Sequence[str]) -> list[str]:
    """The graph inputs of ``names`` that a node (in a body too) reads or that are outputs."""
    inputs = {v.name: v for v in model.graph.inputs}
    return [n for n in names if n in inputs and (inputs[n].uses() or
                                                 inputs[n].is_graph_output())]


def _check_inputs(ref: LabModel, cand: LabModel) -> None:
    """InputError when the two models do not take the same inputs."""
    rs = {n: (d, s) for n, d, s in input_specs(ref)}
    cs = {n: (d, s) for n, d, s in input_specs(cand)}
    if set(rs) != set(cs):
        only_r = sorted(set(rs) - set(cs))
        only_c = sorted(set(cs) - set(rs))
        switches = [f"the {what}'s {s.input!r}" for what, m, only in (
            ("reference", ref, only_r), ("candidate", cand, only_c))
            for s in branch_switches(m) if s.input in only]
        if switches and (not only_r or not only_c):
            # optimum's merged decoder against a plain one: nothing to rename
            raise InputError(
                f"The models' inputs differ: only in the reference {only_r}, only in the "
                f"candidate {only_c}; {' and '.join(switches)} decides its If branches (a "
                "merged decoder's use_cache_branch), which the other model does not have.",
                fix="Compare models of the same layout: a merged decoder with a merged one "
                "(its fp16 or int8 version), a with-past decoder with a with-past one.")
        if only_r and only_c:
            raise InputError(
                f"The models' inputs differ in name: only in the reference {only_r}, only in "
                f"the candidate {only_c}.",
                fix="Rename the inputs so both models take the same names "
                "(lab.rename_tensor).")
        # one side takes more inputs: nothing to rename them to
        what, other, extra, model, other_model = (
            ("reference", "candidate", only_r, ref, cand) if only_r else
            ("candidate", "reference", only_c, cand, ref))
        if not _read_inputs(model, extra):
            # onnxruntime's saved optimized model of an IR version 3 file (weights listed as
            # graph inputs too): the folded weights' initializers are gone, their inputs
            # stay, and onnxruntime asks for them (light AlexNet, SqueezeNet, ResNet-50...)
            held = [n for n in extra if n in other_model.graph.initializers]
            raise InputError(
                f"The {what} takes inputs the {other} does not: {extra}. No node of the "
                f"{what} reads them"
                + (f"; the {other} holds them as weights (an IR version "
                   f"{other_model.ir.ir_version} model lists its initializers as graph "
                   "inputs too, and a tool that folded what reads them dropped their values "
                   "but kept the inputs, which onnxruntime still asks for)" if held else "")
                + ".",
                fix=f"Remove them from the {what}'s graph inputs (nothing reads them), or "
                "make the optimized model with onnx_lab (lab.apply('ort:basic'), "
                "'onnxsim'...), whose steps keep the interface.")
        raise InputError(
            f"The {what} takes inputs the {other} does not: {extra}.",
            fix="A model that takes inputs the other does not is another model: compare it "
            "with its own versions.")
    for name, (d, s) in rs.items():
        cd, cshape = cs[name]
        if d != cd:
            raise InputError(
                f"Input {name!r} is {d} in the reference and {cd} in the candidate.",
                fix="Give both models the same input dtypes (e.g. to_fp16(lab, "
                "keep_io_types=True)).")
        if s is not None and cshape is not None and len(s) != len(cshape):
            raise InputError(
                f"Input {name!r} has rank {len(s)} {list(s)} in the reference and rank "
                f"{len(cshape)} {list(cshape)} in the candidate.",
                fix="Compare models that take the same input shapes.")
        if s is not None and cshape is not None and any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(s, cshape)):
            # no dims and no feeds fit both (tf2onnx's --inputs-as-nchw against the NHWC
            # export: "give dims that match the candidate's fixed shapes" could not be done)
            raise InputError(
                f"Input {name!r} is fixed to {list(s)} in the reference and to "
                f"{list(cshape)} in the candidate: no input fits both"
                + (" (another layout)" if sorted(d for d in s if isinstance(d, int)) ==
                   sorted(d for d in cshape if isinstance(d, int)) else "") + ".",
                fix="Compare models that take the same input shapes (a model exported with "
                "another input layout or size is compared with its own versions).")


def _load(source: Any, what: str, dims, shapes) -> Resolved:
    """``source`` with its own dims/shapes (a Lab's) under ``dims``/``shapes``, fitted to it:
    names it lacks (another side's ``batch_size``, dims a static model no longer has) are
    left out, the rest checked (DimError naming the side)."""
    check_dim_arguments(dims, shapes)  # a list or "batch=1": DimError, not AttributeError
    try:
        # Large files: weights stay in the file (read by ORT from disk, by onnx_ir on use).
        r = resolve(source, lazy=True)
        d, s = fit_dims(r.model, {**r.dims, **dict(dims or {})},
                        {**r.shapes, **{k: list(v) for k, v in (shapes or {}).items()}})
        validate_dims(r.model, d, s)
        return Resolved(r.model, d, s)
    except LabError as e:
        raise type(e)(f"{what}: {e.problem}", fix=e.fix) from e


def _check_known(sides: Sequence[tuple[str, Resolved]], dims: Mapping[str, int] | None,
                 shapes: Mapping[str, Sequence[int]] | None) -> None:
    """A dim or input shape given that no side has is a typo: the first side's DimError."""
    what, first = sides[0]
    try:
        for name, value in (dims or {}).items():
            if all(name not in r.dims for _, r in sides):
                validate_dims(first.model, {name: value}, None)  # raises, with "did you mean"
        for name, value in (shapes or {}).items():
            if all(name not in r.shapes for _, r in sides):
                validate_dims(first.model, None, {name: value})
    except LabError as e:
        raise type(e)(f"{what}: {e.problem}", fix=e.fix) from e


def runnable_samples(model: LabModel, feed_list: list[dict]) -> tuple[list[dict], list[str]]:
    """The first sample, and the other branches' samples (``branch_feeds``) ``model`` runs
    on, with onnxruntime's reason for each it does not: a branch that fails at these dims in
    the reference itself cannot judge a candidate; it is left out and named (compare's
    ``Comparison.unexercised``, the precision plan's notes), never the candidate's failure."""
    if len(feed_list) < 2:
        return feed_list, []
    names = [v.name for v in model.graph.outputs]
    sess = make_session(model, outputs=names, arena=False)
    keep, problems = feed_list[:1], []
    for f in feed_list[1:]:
        try:
            run_session(sess, f, names, what="the reference model")
        except RuntimeLoadError as e:
            problems.append(e.problem)
            continue
        keep.append(f)
    return keep, problems


def _shared_feeds(ref: Resolved, cand: Resolved) -> tuple[list[dict[str, np.ndarray]], list[str]]:
    """Seeded feeds from the reference's dims, which the candidate must accept (a static
    candidate's shapes must be the reference's resolved ones; its dim names may differ), and a
    sentence for each branch sample left out. When the reference's dims leave dims open, the
    candidate's own shapes (a static model) are used instead, if they resolve.

    The first sample must fit both models. A further sample runs another If branch with its
    own dims (``use_cache_branch=False`` with an empty past); a candidate fixed to the first
    sample's sizes (onnxslim or onnxsim given input shapes) cannot take it: it is left out
    and said, and ``Comparison.unexercised`` names the branch never compared."""
    try:
        feed_list, problems = runnable_samples(ref.model, as_feed_list(
            None, ref.model, ref.dims, ref.shapes, branches=True))
    except DimError as ref_error:
        try:
            return as_feed_list(None, cand.model, cand.dims, cand.shapes, branches=True), []
        except DimError:
            raise DimError(f"reference: {ref_error.problem}", fix=ref_error.fix) from ref_error
    notes = [f"a branch sample was not run: the reference itself fails on it "
             f"({p.rstrip('.')})" for p in problems]
    judged = None
    if len(feed_list) == 1:
        feed_list, step_note = _cache_step_samples(ref.model, feed_list, ref.dims, ref.shapes)
        if len(feed_list) > 1:
            judged = step_note
        elif step_note:
            notes.append(step_note)
    try:
        kept = as_feed_list(feed_list[:1], cand.model, cand.dims, cand.shapes)
    except InputError as e:
        given = ", ".join(f"{k}={v}" for k, v in ref.dims.items()) or "none"
        raise DimError(
            f"candidate: {e.problem} The feeds follow the reference's dims ({given}); the "
            "candidate's inputs are fixed to other sizes.",
            fix="Give dims that match the candidate's fixed shapes, or pass feeds=...") from e
    for f in feed_list[1:]:
        try:
            kept += as_feed_list([f], cand.model, cand.dims, cand.shapes)
        except InputError as e:
            took = "; ".join(branch_labels(ref.model, [f])) or _step_label(ref.model, f)
            notes.append(f"the sample for {took} was not run: the candidate's inputs are fixed "
                         f"to other sizes ({e.problem.rstrip('.')}); compare with feeds=... of the "
                         "candidate's shapes to judge it")
    if judged and len(kept) > 1:
        notes.append(judged)
    return kept, notes


def _cache_step_samples(model: LabModel, feed_list: list[dict], dims: Mapping[str, int],
                        shapes: Mapping[str, Sequence[int]]) -> tuple[list[dict], str | None]:
    """A KV-cache decoder without a cache switch (a with-past export, a genai build) judged
    at both kinds of step: ``feed_list`` with a sample at the other one (a prefill's empty
    past when the dims give a decode's, a decode's past of 1 when they give a prefill's,
    :func:`~onnx_lab.runtime.feeds.cache_length_feeds`), and the sentence that says so, or
    why the reference could not be judged there. An int8 decoder judged at a past of 4
    alone passed at 31 dB and gave 3 dB at the prefill. Other models: unchanged."""
    extra = cache_length_feeds(model, dims, shapes, first=feed_list[0])[1:]
    if not extra:
        return feed_list, None
    given, other = past_length(model, feed_list[0]), past_length(model, extra[0])
    if model.weights_nbytes() > _PRE_RUN_MAX_BYTES:
        # one more session of a large decoder only to see that it runs at the other length
        # costs a whole load: the sample is taken (every exporter's decoder runs there), and
        # a reference that does not is a RuntimeLoadError of the comparison
        return feed_list + extra, (f"a KV-cache decoder: judged at a decode and a prefill "
                                   f"step, past lengths {given} and {other}")
    kept, problems = runnable_samples(model, feed_list + extra)
    if problems:
        return feed_list, (f"a KV-cache decoder judged at a past length of {given} only: the "
                           f"reference itself does not run at {other} "
                           f"({problems[0].rstrip('.')})")
    return kept, (f"a KV-cache decoder: judged at a decode and a prefill step, past lengths "
                  f"{given} and {other}")


#: Up to this many bytes of weights, a decoder's second step is run on the reference first
#: (one more session), and left out with a note when it fails there.
_PRE_RUN_MAX_BYTES = 1 << 30


def _step_label(model: LabModel, feeds: Mapping[str, Any]) -> str:
    """What kind of KV-cache step a sample is ("past 0 (the prefill)"), else "another
    branch"."""
    past = past_length(model, feeds)
    if past is None:
        return "another branch"
    return f"past {past} ({'the prefill' if past == 0 else 'a decode step'})"


# ---------------------------------------------------------------------------- compare
@strict_keywords  # a misspelt keyword is an InputError with its close matches
def compare(reference: Any, candidate: Any, *, feeds: Any = None,
            dims: Mapping[str, int] | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None, layerwise: bool = True,
            atol: float | None = None, rtol: float | None = None, preset: str | None = None,
            providers: Any = None, max_bytes: int = 1 << 30, progress: Any = None,
            confirm: bool = False) -> Comparison:
    """Compare a candidate model against a reference, output by output and layer by layer.

    Args:
        reference: a Lab, path, ModelProto, ``"sample:NAME"``..., or a dict
            ``{tensor name: array}`` captured elsewhere (e.g. PyTorch hooks); with a dict,
            tensors align by name and ``feeds`` (or the dict's entries for the inputs) give
            the inputs.
        candidate: the model under test (same kinds, not a dict).
        feeds: None (one seeded sample; one per branch a boolean input decides; a
            KV-cache decoder's prefill and decode steps: see ``feeds_notes``; more for tree
            ensembles: :func:`onnx_lab.runtime.feeds.tree_samples`), a dict of
            arrays, a list of dicts (metrics aggregate over samples) or an ``.npz`` path.
        dims, shapes: values for symbolic dims / full input shapes.
        layerwise: also compare every aligned intermediate tensor (else outputs only).
        preset: the tolerance preset of :data:`onnx_lab.numerics.metrics.PRESETS` (``fp32``,
            ``fp16``, ``bf16``, ``int8``, ``int4``, ``exact``...). None: ``int4`` when a side
            holds weight-only quantized ops (MatMulNBits; not two with the same quantized
            weights), ``int8`` when the candidate quantizes activations and the reference
            does not, ``fp16``/``bf16`` when the candidate computes in that type, applied to
            the tensors computed through what chose it (:func:`preset_scope`), else each
            tensor's dtype picks its own. Outputs
            are judged element-wise (``|cand - ref| <= atol + rtol·|ref|``), intermediates
            against their own scale (``max|err| <= atol + rtol·max|ref|``); the ``rule`` and
            ``preset`` columns say which judged each tensor.
        atol, rtol: the preset's numbers replaced by yours (both rules).
        providers: provider list for both, or a pair ``(ref_providers, cand_providers)`` to
            compare execution providers.
        max_bytes: bound on captured activations held at once (reference + candidate chunk).
        progress: None (tqdm when interactive), False, or a callable(done, total, label).
        confirm: feed the reference's activations into the candidate's first divergent node
            and measure its local error (``first_divergence["confirmed"]``): whether the node
            computes differently or only receives different inputs.

    Returns:
        A :class:`Comparison`.

    Raises:
        InputError: the models' inputs differ in name, dtype or rank; bad feeds.
        DimError: unresolved symbolic dims.
        RuntimeLoadError: onnxruntime cannot load a model (names the op and domain).

    Example:
        >>> c = onnx_lab.compare("model.onnx", "model_fp16.onnx", dims={"batch": 1})
        >>> c.first_divergence
    """
    _check_args(atol, rtol, preset, max_bytes)
    sides = _sides(reference, candidate, feeds, dims, shapes, providers)
    cand_lab, ref_lab, ref_dict, feed_list = sides.cand, sides.ref, sides.ref_dict, sides.feeds
    ref_prov, cand_prov = sides.providers
    cand_model = cand_lab.model
    ref_model = ref_lab.model if ref_lab is not None else None
    # session.runtime_proto caches a full ModelProto (a copy of the weights) on the model;
    # drop the caches this call creates so a Lab does not carry one after the comparison.
    uncached = [m for m in (ref_model, cand_model)
                if m is not None and not m.is_cached(RUNTIME_PROTO_KEY)]
    alignment, out_pairs, pairs = _pairs(ref_model, cand_model, ref_dict, layerwise)
    # (tolerances given by hand are element-wise: the int8 preset judges by SQNR instead)
    given = preset
    preset = preset or default_preset(cand_model, ref_model,
                                      quantized=atol is None and rtol is None)
    # a default preset judges what is computed through its cause; the rest by dtype
    scope = preset_scope(cand_model, preset) if given is None else None

    def preset_of(cand_tensor: str) -> str | None:
        return preset if scope is None or cand_tensor in scope else None
    selections = None
    moved: list[str] = []
    try:
        metrics, kept = _run_metrics(ref_model, cand_model, ref_dict, feed_list, pairs,
                                     out_pairs, sides.providers, max_bytes, progress,
                                     preset_of, atol, rtol)
        out_acc = _output_accumulator(ref_model, cand_model, preset_of, atol, rtol)
        if len(pairs) > len(out_pairs):
            _outputs_run_alone(ref_model, cand_model, feed_list, out_pairs, metrics, kept,
                               sides.providers, out_acc)
        if ref_model is not None:
            _kept_shapes(metrics, ref_model, cand_model, out_pairs)
        outputs, layers, passed = _tables(metrics, out_pairs, alignment, layerwise)
        if ref_model is not None and len(layers):
            # NaN/inf the reference holds only because its tensors were exposed together
            layers = _rows_run_alone(ref_model, cand_model, layers, out_pairs, feed_list,
                                     sides.providers, preset_of, atol, rtol)
            passed = _passed(outputs, layers)
        if ref_model is not None and (not passed or not layers["passed"].all()):
            # near-tie flips of selections (TopK, NMS...): judged by their inputs
            # (outputs only: the tensors around the selections paired as layerwise pairs
            # them; with the outputs' pairs alone none held the reference's, a false alarm)
            selections = _judge_selections(
                ref_lab, cand_lab, alignment if layerwise else align(ref_model, cand_model),
                out_pairs, layers, outputs, feed_list, sides.providers, preset, atol, rtol)
            if selections is not None and not selections.empty:
                as_run = outputs
                outputs, layers = _selected(outputs, selections), _selected(layers, selections)
                outputs, moved = _as_run(outputs, as_run, selections)
                passed = _passed(outputs, layers)
        if ref_model is not None and not passed and len(outputs) \
                and outputs["passed"].astype(bool).all():
            # NaN/inf the candidate's own arithmetic absorbs (Exp(-inf) = 0) fail nothing
            layers = mark_absorbed(cand_model, layers, out_pairs, kept, feed_list, cand_prov,
                                   out_acc)
            passed = _passed(outputs, layers)
    finally:
        for m in uncached:
            m.forget(RUNTIME_PROTO_KEY)
    graph_model = ref_model if ref_model is not None else cand_model
    div = _first_divergence(graph_model, layers, outputs) if len(layers) else None
    if div is not None:
        _blame(div, graph_model, cand_model, layers, ref_dict, alignment,
               same_runtime=ref_prov == cand_prov)
    main_name, main_rule = rule_for("float32", output=True, preset=preset, atol=atol, rtol=rtol)
    result = Comparison(outputs=outputs, layers=layers, alignment=alignment, passed=passed,
                        first_divergence=div, atol=main_rule.atol, rtol=main_rule.rtol,
                        preset=preset or "by dtype",
                        reference=ref_lab, candidate=cand_lab, feeds=feed_list,
                        providers=(ref_prov, cand_prov), reference_values=ref_dict,
                        output_values=kept,
                        selections=selections.to_dict() if selections is not None else [],
                        selection_note="; ".join(x for x in (selections.note(
                            [r for r, c in out_pairs if c in selections.not_comparable]),
                            _moved_text(moved)) if x) or None
                        if selections is not None else None,
                        feeds_notes=sides.feeds_notes + _failing_samples(
                            graph_model, feed_list, kept, outputs, preset_of, atol, rtol),
                        untaken=_untaken_branches(ref_model, cand_model, feed_list, cand_prov))
    if confirm and div is not None and ref_model is not None:
        div.update(confirm_divergence(result))
    return result


def _held_constant(model: LabModel, feed_list: list) -> list[str]:
    """The sentence naming the integer and boolean inputs the seeded feeds hold at one value
    (``*mask*`` all ones, ``*type*`` ids all zeros: make_feeds' policy): a candidate that
    ignores its attention mask, or whose token-type row 1 is wrong, passed with nothing said."""
    held = []
    for v in model.graph.inputs:
        arrs = [f.get(v.name) for f in feed_list]
        if not arrs or any(not isinstance(a, np.ndarray) or a.size < 2 or a.dtype.kind not in "iub"
                           for a in arrs):
            continue
        first = arrs[0].reshape(-1)[0]
        if all((a == first).all() for a in arrs):
            held.append(f"{v.name!r} (all {first.item()!r})")
    if not held:
        return []
    return [f"the seeded feeds hold {', '.join(held)} at one value: what depends on other "
            "values of them was not compared (give feeds=... with realistic values)"]


def _untaken_branches(ref: LabModel | None, cand: LabModel, feed_list: list,
                      providers: list[str]) -> list[str]:
    """The branches of the candidate's main-graph Ifs whose condition the model computes
    (``torch.cond`` on a data predicate; a switch input is :attr:`Comparison.unexercised`'s
    own) that differ from the reference's and that no sample took: never compared. Two
    models whose else branches differed passed with nothing said when the seeded feeds
    never took it."""
    if ref is None:
        return []
    idx, inputs = cand.index, {v.name for v in cand.graph.inputs}
    todo: dict[tuple[str, str], str] = {}
    loops: dict[str, list[str]] = {}  # Loop id -> its trip count and condition tensors
    for nid in idx.topo_order(""):
        node = idx.entries[nid].node
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and node.outputs:
            rnid = ref.index.producer.get(node.outputs[0].name) if node.outputs[0].name \
                else None
            rnode = ref.index.entries[rnid].node if rnid is not None else None
            a = node.attributes.get("body")
            b = rnode.attributes.get("body") if rnode is not None else None
            if rnode is not None and rnode.op_type == "Loop" and a is not None and \
                    b is not None and _graph_bytes(a.value) != _graph_bytes(b.value):
                loops[nid] = [v.name if v is not None else "" for v in node.inputs[:2]]
            continue
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.inputs \
                or node.inputs[0] is None or not node.outputs:
            continue
        cond = node.inputs[0].name
        if not cond or cond in inputs or idx.producer.get(cond) is None:
            continue
        rnid = ref.index.producer.get(node.outputs[0].name)
        rnode = ref.index.entries[rnid].node if rnid is not None else None
        if rnode is None or rnode.op_type != "If":
            continue
        for branch in ("then_branch", "else_branch"):
            a, b = node.attributes.get(branch), rnode.attributes.get(branch)
            if a is None or b is None or _graph_bytes(a.value) != _graph_bytes(b.value):
                todo[(nid, branch)] = cond
    if not todo and not loops:
        return []
    conds = sorted(set(todo.values()) | {n for ns in loops.values() for n in ns if n})
    seen: dict[str, list[Any]] = {c: [] for c in conds}
    try:
        sess: dict[tuple[str, ...], Any] = {}  # one session for every sample

        def go(ns: list[str], f: dict) -> dict[str, Any]:
            if tuple(ns) not in sess:
                sess[tuple(ns)] = _session(cand, ns, providers, "candidate")
            return _run(sess[tuple(ns)], f, ns, "candidate")

        fetched = [fetch(cand, f, conds, lambda ns, f=f: go(ns, f)) for f in feed_list]
    except LabError as e:  # the conditions cannot be read: nothing to say either way
        logger.debug("If and Loop conditions not read (%s)", e)
        return []
    for got in fetched:
        for c in conds:
            v = np.asarray(got.get(c)) if c in got else None
            if v is not None and v.size == 1:
                seen[c].append(v.reshape(-1)[0])
    lines = [f"{branch} of If {nid!r}, which differs from the reference's: its condition "
             f"{cond!r} was {branch != 'then_branch'} on every sample (give feeds that take it)"
             for (nid, branch), cond in todo.items()
             if seen[cond] and (branch == "then_branch") not in {bool(x) for x in seen[cond]}]
    for nid, (trips, cond) in loops.items():
        # a Loop runs 0 times when its trip count is 0 or its first condition is false
        never = [all(x == 0 for x in seen[trips]) and len(seen[trips]) == len(feed_list)
                 if trips else False,
                 not any(bool(x) for x in seen[cond]) and len(seen[cond]) == len(feed_list)
                 if cond else False]
        if any(never):
            why = (f"its trip count {trips!r} was 0" if never[0] else
                   f"its condition {cond!r} was False")
            lines.append(f"body of Loop {nid!r}, which differs from the reference's: it ran 0 "
                         f"times, {why} on every sample (give feeds that run it)")
    return lines


def _graph_bytes(graph: ir.Graph) -> bytes:
    """A branch's computation as bytes: its nodes without their names, metadata and docs
    (every onnx_lab step stamps its provenance on each node: an untouched branch was said to
    differ from the reference's)."""
    proto = ir.serde.serialize_graph(graph)
    todo = [proto]
    while todo:
        g = todo.pop()
        g.ClearField("name")
        g.ClearField("doc_string")
        for n in g.node:
            n.ClearField("name")
            n.ClearField("doc_string")
            del n.metadata_props[:]
            for a in n.attribute:
                if a.type == a.GRAPH:
                    todo.append(a.g)
                todo.extend(a.graphs)
    return proto.SerializeToString(deterministic=True)


def _check_args(atol: Any, rtol: Any, preset: str | None, max_bytes: Any) -> None:
    if not all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)
               for v in (atol, rtol)):
        raise InputError(f"atol and rtol must be non-negative numbers, got {atol!r}, {rtol!r}.",
                         fix="Use e.g. atol=1e-4, rtol=1e-3.")
    if preset is not None:
        get_preset(preset)  # UnknownNameError listing the presets
    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise InputError(f"max_bytes must be a positive int, got {max_bytes!r}.",
                         fix="Use e.g. max_bytes=1 << 30.")


class _Sides(NamedTuple):
    """The two sides of a comparison, loaded and checked against each other."""

    cand: Resolved
    ref: Resolved | None  # None: a dict reference
    ref_dict: dict[str, np.ndarray] | None
    feeds: list[dict[str, np.ndarray]]
    providers: tuple[list[str], list[str]]
    feeds_notes: list[str]  # the branch samples left out, and why


def _sides(reference: Any, candidate: Any, feeds: Any, dims: Mapping[str, int] | None,
           shapes: Mapping[str, Sequence[int]] | None, providers: Any) -> _Sides:
    """Load both sides, check that they take the same inputs and make the feeds.

    The reference's dims (a Lab's own, under ``dims``) size the feeds, as for
    ``ref_lab.compare(candidate)``; each side takes the dims it has."""
    ref_dict: dict[str, np.ndarray] | None = None
    ref_lab: Resolved | None = None
    if isinstance(reference, Mapping):
        cand_lab = _load(candidate, "candidate", dims, shapes)
        _check_known([("candidate", cand_lab)], dims, shapes)
        ref_dict = {str(k): np.asarray(v) for k, v in reference.items()}
        if feeds is None:
            names = [n for n, _, _ in input_specs(cand_lab.model)]
            if all(n in ref_dict for n in names):
                feeds = {n: ref_dict[n] for n in names}
            else:
                raise InputError(
                    "A dict reference needs the inputs it was computed from: pass feeds=... "
                    f"or include {names} in the dict.",
                    fix="compare(ref_dict, cand, feeds={input: array}).")
    else:
        ref_lab = _load(reference, "reference", dims, shapes)
        # The candidate's own dims (a Lab's) under the reference's, under those given.
        cand_lab = _load(candidate, "candidate", {**ref_lab.dims, **dict(dims or {})},
                         {**ref_lab.shapes, **dict(shapes or {})})
        _check_known([("reference", ref_lab), ("candidate", cand_lab)], dims, shapes)
        _check_inputs(ref_lab.model, cand_lab.model)
    split = _split_providers(providers)
    if ref_lab is not None and feeds is None:
        feed_list, feeds_notes = _shared_feeds(ref_lab, cand_lab)
        feeds_notes += _held_constant(ref_lab.model, feed_list)
    else:
        feeds_notes = []
        feed_list = as_feed_list(feeds, cand_lab.model, cand_lab.dims, cand_lab.shapes)
    if ref_dict is not None and len(feed_list) != 1:
        raise InputError(f"A dict reference holds one sample, but {len(feed_list)} feed samples "
                         "were given.", fix="Pass the one sample the dict was computed from.")
    if ref_lab is not None:
        # the reference must accept them
        as_feed_list(feed_list, ref_lab.model, ref_lab.dims, ref_lab.shapes)
    return _Sides(cand_lab, ref_lab, ref_dict, feed_list, split, feeds_notes)


def _pairs(ref_model: LabModel | None, cand_model: LabModel,
           ref_dict: dict[str, np.ndarray] | None, layerwise: bool
           ) -> tuple[Any, list[tuple[str, str]], list[tuple[str, str]]]:
    """(the alignment, the output pairs, every (reference, candidate) tensor pair to compare:
    the outputs first, then the aligned intermediates when ``layerwise``)."""
    if ref_model is not None:
        alignment = align(ref_model, cand_model) if layerwise else None
        out_pairs = _output_pairs(ref_model, cand_model)
    else:
        alignment = align(None, cand_model, ref_tensors=ref_dict)
        outs = [v.name for v in cand_model.graph.outputs]
        out_pairs = [(n, n) for n in outs if n in ref_dict]
    pairs: list[tuple[str, str]] = list(out_pairs)
    if alignment is not None and layerwise:
        seen = set(pairs)
        for r, c in zip(alignment["tensor"], alignment["cand_tensor"]):
            if isinstance(c, str) and (r, c) not in seen:
                seen.add((r, c))
                pairs.append((r, c))
    if ref_dict is not None:
        pairs = [p for p in pairs if p[0] in ref_dict]
    if alignment is None:
        alignment = _outputs_alignment(ref_model, cand_model, out_pairs)
    return alignment, out_pairs, pairs


def _run_metrics(ref_model: LabModel | None, cand_model: LabModel,
                 ref_dict: dict[str, np.ndarray] | None, feed_list: list,
                 pairs: list[tuple[str, str]], out_pairs: list[tuple[str, str]],
                 providers: tuple[list[str], list[str]], max_bytes: int, progress: Any,
                 preset_of: Any, atol: float | None, rtol: float | None
                 ) -> tuple[dict[tuple[str, str], dict], dict[tuple[str, str], tuple[list, list]]]:
    """Run both sides chunk by chunk (at most ``max_bytes`` of activations held) and
    accumulate each pair's metrics under its rule.

    Returns:
        ({pair: metrics and preset}, {output pair: (reference values, candidate values)}).
    """
    ref_prov, cand_prov = providers
    shapes_in = {k: v.shape for k, v in feed_list[0].items() if hasattr(v, "shape")}
    n_samples = len(feed_list)
    c_sizes = estimate_bytes(cand_model, list({c for _, c in pairs}), shapes_in)
    r_sizes = (estimate_bytes(ref_model, list({r for r, _ in pairs}), shapes_in)
               if ref_model is not None else {r: 0 for r, _ in pairs})
    # The reference chunk is held for every sample while the candidate runs one at a time.
    sizes = {p: _size(r_sizes.get(p[0])) * n_samples + _size(c_sizes.get(p[1]))
             for p in pairs}
    chunks = plan_chunks(sizes, max_bytes) if pairs else []
    out_set = set(out_pairs)
    accs: dict[tuple[str, str], MetricAccumulator] = {}
    presets: dict[tuple[str, str], str] = {}

    def acc_of(p: tuple[str, str], ref_value: Any) -> MetricAccumulator:
        if p not in accs:
            presets[p], rule = rule_for(_dtype_name(ref_value), output=p in out_set,
                                        preset=preset_of(p[1]), atol=atol, rtol=rtol)
            accs[p] = MetricAccumulator(rule=rule, key_order=zipmap_labels(ref_model, p[0])
                                        or zipmap_labels(cand_model, p[1]))
        return accs[p]

    kept: dict[tuple[str, str], tuple[list, list]] = {p: ([], []) for p in out_pairs}
    # Two steps per chunk (reference, then candidate) so even one chunk shows progress.
    with Progress(progress, 2 * len(chunks), "compare") as bar:
        for i, chunk in enumerate(chunks):
            r_names = list(dict.fromkeys(r for r, _ in chunk))
            c_names = list(dict.fromkeys(c for _, c in chunk))
            if ref_model is not None:
                ref_vals = _run_all(ref_model, feed_list, r_names, ref_prov, "reference")
            else:
                ref_vals = [{r: ref_dict[r] for r in r_names}]  # type: ignore[index]
            bar.step(f"compare: reference, chunk {i + 1}/{len(chunks)}")
            sess = _session(cand_model, c_names, cand_prov, "candidate")
            for s, f in enumerate(feed_list):
                try:
                    cand_vals = _run(sess, f, c_names, "candidate")
                except RuntimeLoadError as e:
                    raise _candidate_only(e, ref_model, f, ref_prov) from e
                rv = ref_vals[min(s, len(ref_vals) - 1)]
                for p in chunk:
                    acc_of(p, rv[p[0]]).add(rv[p[0]], cand_vals[p[1]])
                    if p in out_set:
                        kept[p][0].append(rv[p[0]])
                        kept[p][1].append(cand_vals[p[1]])
                del cand_vals
            del sess, ref_vals
            bar.step(f"compare: candidate, chunk {i + 1}/{len(chunks)}")
    return {p: {**a.result(), "preset": presets[p]} for p, a in accs.items()}, kept


def _output_accumulator(ref_model: LabModel | None, cand_model: LabModel, preset_of: Any,
                        atol: float | None, rtol: float | None) -> Any:
    """``(pair, reference value) -> MetricAccumulator`` under the rule that judges a graph
    output pair, as :func:`_run_metrics` makes it."""
    def make(p: tuple[str, str], ref_value: Any) -> MetricAccumulator:
        _, rule = rule_for(_dtype_name(ref_value), output=True, preset=preset_of(p[1]),
                           atol=atol, rtol=rtol)
        return MetricAccumulator(rule=rule, key_order=zipmap_labels(ref_model, p[0])
                                 or zipmap_labels(cand_model, p[1]))
    return make


#: What an output row's note says when its values come from a run of the outputs alone.
ALONE_NOTE = ("from a run of the outputs alone: with every compared tensor exposed, "
              "onnxruntime computed other outputs (on CPU an exposed float16 tensor is rounded "
              "where a plain run computes in float32)")


def _outputs_run_alone(ref_model: LabModel | None, cand_model: LabModel, feed_list: list,
                       out_pairs: list[tuple[str, str]], metrics: dict[tuple[str, str], dict],
                       kept: dict[tuple[str, str], tuple[list, list]],
                       providers: tuple[list[str], list[str]], out_acc: Any) -> None:
    """The graph outputs judged again (in place on ``metrics`` and ``kept``) on a run of the
    outputs alone of each side that computes in float16 or bfloat16, where that run gives
    other outputs than the layerwise capture (called when intermediates were captured).

    Exposing a tensor changes what onnxruntime computes: on CPU a float16 model runs many
    ops in float32 between Casts it inserts and drops the Cast pairs between them, and an
    exposed float16 tensor keeps its Cast, so it is rounded where the plain run is not (the
    preset's final check already judges a plain run: ``region._against_plain_run``). A
    scikit-learn GaussianNB in float16 (log-likelihoods near -487, float16 steps of 0.25):
    probabilities 0.107 off captured layerwise, 1.5e-4 off in fresh onnxruntime sessions and
    with ``layerwise=False``; the same models and feeds had two verdicts. A passing
    comparison too: BERT-base in float16 (padded attention masks) read max_abs 0.0084 where
    fresh sessions give 0.0071. The intermediate rows keep the capture's numbers.

    Costs one session and run per sample of each such side, none of the other: a side that
    holds no float16/bfloat16 computes the same outputs with its intermediates exposed (a
    float32 reference is not run again)."""
    if not out_pairs:
        return
    ref_prov, cand_prov = providers
    sides = [(i, m, prov, what) for i, (m, prov, what) in enumerate(
        ((ref_model, ref_prov, "reference"), (cand_model, cand_prov, "candidate")))
        if m is not None and _computing_preset(m) is not None]
    if not sides:
        return
    runs: dict[int, list[dict[str, Any]]] = {}
    try:
        for i, m, prov, what in sides:
            runs[i] = _run_all(m, feed_list, list(dict.fromkeys(p[i] for p in out_pairs)),
                               prov, what)
    except LabError:
        return

    def value(p: tuple[str, str], i: int, s: int) -> Any:
        return runs[i][s][p[i]] if i in runs else kept[p][i][s]

    changed = [p for p in out_pairs if p in metrics and len(kept[p][0]) == len(feed_list)
               and len(kept[p][1]) == len(feed_list) and any(
                   not _same_value(runs[i][s][p[i]], kept[p][i][s])
                   for i in runs for s in range(len(feed_list)))]
    for p in changed:
        refs = [value(p, 0, s) for s in range(len(feed_list))]
        cands = [value(p, 1, s) for s in range(len(feed_list))]
        acc = out_acc(p, refs[0])
        for r, c in zip(refs, cands):
            acc.add(r, c)
        res = acc.result()
        res["note"] = "; ".join(x for x in (res.get("note"), ALONE_NOTE) if x)
        metrics[p] = {**res, "preset": metrics[p]["preset"]}
        kept[p] = (refs, cands)


#: What a layers row's note says when its values come from runs exposing its tensor alone.
LONE_NOTE = ("from runs exposing this tensor alone: with every compared tensor exposed, the "
             "reference held NaN or inf here that a plain run does not (on CPU an exposed "
             "float16 tensor is rounded where a plain run computes in float32, and what reads "
             "it may read it rounded)")

#: At most this many layers rows are judged again on runs of their tensor alone (two
#: sessions each); the others keep the capture's numbers.
_LONE_MAX_ROWS = 8


def _rows_run_alone(ref_model: LabModel, cand_model: LabModel, layers: Any,
                    out_pairs: list[tuple[str, str]], feed_list: list,
                    providers: tuple[list[str], list[str]], preset_of: Any,
                    atol: float | None, rtol: float | None) -> Any:
    """``layers`` with the failing intermediate rows where the reference holds more NaN or
    inf than the candidate judged again, when the reference computes in float16 or bfloat16,
    on runs of each side exposing that tensor alone, where the reference's run holds fewer
    of them than the capture did (the row then says so: :data:`LONE_NOTE`). Unchanged
    otherwise: a reference that holds them in such a run too, a failed run.

    On onnxruntime's CPU a float16 model computes ops without a float16 kernel in float32
    between Casts it inserts; an exposed tensor is rounded to float16, and an op with a
    float16 kernel that reads it (a Reshape, a MaxPool) reads it rounded. Light ZFNet-512 in
    float16 against its own ``ort:basic`` version (onnxruntime's float32 computation
    written out): with its 22 tensors exposed, the reference's Conv outputs beyond 65504 were
    inf from r12 on, its Softmax 1,000 NaN, and the Softmax row failed (max_abs inf) while
    the outputs agreed; fresh sessions exposing the Softmax alone give 0.001 on both sides.
    The candidate's own NaN/inf (an fp16 overflow) are the rule of :func:`_passed`, not
    judged here."""
    if _computing_preset(ref_model) is None:
        return layers

    def count(v: Any) -> int:
        return int(v) if isinstance(v, (int, float, np.number)) and v == v else 0

    outs = set(out_pairs)
    rows = layers.to_dict(orient="records")
    todo = [i for i, r in enumerate(rows)
            if not bool(r["passed"]) and isinstance(r["cand_tensor"], str)
            and (r["tensor"], r["cand_tensor"]) not in outs
            and count(r["nan_ref"]) + count(r["inf_ref"])
            > count(r["nan_cand"]) + count(r["inf_cand"])]
    if not todo:
        return layers
    ref_prov, cand_prov = providers
    changed = False
    for i in todo[:_LONE_MAX_ROWS]:
        row = rows[i]
        r, c = row["tensor"], row["cand_tensor"]
        try:
            refs = [v[r] for v in _run_all(ref_model, feed_list, [r], ref_prov, "reference")]
            if sum(_nonfinite_count(v) for v in refs) >= count(row["nan_ref"]) + \
                    count(row["inf_ref"]):
                continue  # the reference holds them in a plain run too
            cands = [v[c] for v in _run_all(cand_model, feed_list, [c], cand_prov,
                                            "candidate")]
        except LabError:
            continue
        _name, rule = rule_for(_dtype_name(refs[0]), output=False, preset=preset_of(c),
                               atol=atol, rtol=rtol)
        acc = MetricAccumulator(rule=rule)
        for rv, cv in zip(refs, cands):
            acc.add(rv, cv)
        res = acc.result()
        res["note"] = "; ".join(x for x in (res.get("note"), LONE_NOTE) if x)
        row.update({k: v for k, v in res.items() if k in layers.columns and k != "preset"})
        changed = True
    if not changed:
        return layers
    return pd.DataFrame(rows, columns=layers.columns, index=layers.index)


def _nonfinite_count(value: Any) -> int:
    a = np.asarray(value)
    return int((~np.isfinite(a)).sum()) if a.dtype.kind in "fc" else 0


def _same_value(a: Any, b: Any) -> bool:
    """Bit for bit (NaN at the same places); sequences and maps (a ZipMap's) item by item."""
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b) and all(
            _same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _same_value(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _candidate_only(error: RuntimeLoadError, ref_model: LabModel | None, feeds: dict,
                    providers: list[str]) -> RuntimeLoadError:
    """The candidate's run failure, told as the candidate's own when the whole reference runs
    on the same inputs (an encoder that lost a category refused one the reference knows, and
    the fix blamed the seeded inputs and asked for real ones); else ``error`` unchanged."""
    if ref_model is None:
        return error
    try:
        _run_all(ref_model, [feeds], [v.name for v in ref_model.graph.outputs], providers,
                 "reference")
    except LabError:
        return error
    return RuntimeLoadError(error.problem, fix=CANDIDATE_ONLY_FIX)


def zipmap_labels(model: LabModel | None, name: str) -> list | None:
    """The class labels of the ZipMap that computes ``name`` (the order of the columns of the
    tensor it zipped: [2, 0, 1] in a classifier whose labels do not ascend), else None."""
    if model is None:
        return None
    nid = model.index.producer.get(name)
    node = model.index.node(nid) if nid is not None else None
    if node is None or node.op_type != "ZipMap" or node.domain != "ai.onnx.ml":
        return None
    for key in ("classlabels_int64s", "classlabels_strings"):
        a = node.attributes.get(key)
        if a is not None and len(a.value):
            return list(a.value)
    return None


def _failing_samples(model: LabModel, feed_list: list, kept: dict[tuple[str, str], tuple],
                     outputs: Any, preset_of: Any, atol: float | None,
                     rtol: float | None) -> list[str]:
    """With several samples (If branches, a decoder's prefill and decode steps) of which
    some pass: the sentence naming those on which the outputs fail. The verdict is over all
    samples; a user fixing it needs to know which kind of step broke."""
    if len(feed_list) < 2 or not len(outputs) or outputs["passed"].all():
        return []
    skip = {(r["tensor"], r["cand_tensor"]) for r in outputs.to_dict("records") if flipped(r)}
    failing = []
    for s in range(len(feed_list)):
        for p, (refs, cands) in kept.items():
            if len(refs) != len(feed_list) or p in skip:
                continue
            _name, rule = rule_for(_dtype_name(refs[s]), output=True, preset=preset_of(p[1]),
                                   atol=atol, rtol=rtol)
            acc = MetricAccumulator(rule=rule, key_order=zipmap_labels(model, p[0]))
            acc.add(refs[s], cands[s])
            if not acc.result()["passed"]:
                failing.append(s)
                break
    if not failing or len(failing) == len(feed_list):
        return []
    labels = branch_labels(model, feed_list) or [_step_label(model, f) for f in feed_list]
    bad = "; ".join(dict.fromkeys(labels[s] for s in failing))
    good = "; ".join(dict.fromkeys(labels[s] for s in range(len(feed_list))
                                   if s not in failing))
    return [f"the outputs fail on {bad} only; they pass on {good}"]


def _kept_shapes(metrics: dict[tuple[str, str], dict], ref: LabModel, cand: LabModel,
                 out_pairs: list[tuple[str, str]]) -> None:
    """A node that reads the same data as its reference counterpart but gives another shape
    computes something else (a wrong Reshape target: its elements, flattened, are the same):
    fail the pair (in place) instead of comparing it flattened."""
    outs = set(out_pairs)
    for p in out_pairs:  # a graph output is an interface: its readers index it
        m = metrics.get(p)
        if m is None:
            continue
        why = _other_interface(m)
        if why:
            m["passed"] = False
            m["note"] = "; ".join(x for x in (m.get("note"), why) if x)
    for (r, c), m in metrics.items():
        if (r, c) in outs or m.get("shape") is None or m.get("shape") == m.get("cand_shape"):
            continue
        if kept_node(ref, cand, r, c):
            m["passed"] = False
            m["note"] = "; ".join(x for x in (m.get("note"), (
                f"node {cand.index.producer.get(c)!r} reads the same inputs but gives shape "
                f"{m['cand_shape']} instead of {m['shape']}")) if x)


def _other_interface(m: Mapping[str, Any]) -> str | None:
    """Why a graph output pair is another interface (None: it is not): another shape of the
    same size other than dims of 1 added or dropped ([2, 3] against [3, 2] was compared
    flattened and passed), another kind of dtype (float against integer or bool: a float32
    output become int32 was compared as float64 and passed). Float widths (a float16 output
    of a conversion) and integer widths are the same interface."""
    shape, cand_shape = m.get("shape"), m.get("cand_shape")
    if shape is not None and cand_shape is not None and tuple(shape) != tuple(cand_shape) \
            and math.prod(shape) == math.prod(cand_shape) and \
            [d for d in shape if d != 1] != [d for d in cand_shape if d != 1]:
        return (f"the output's shape is {list(cand_shape)} instead of {list(shape)} (the same "
                "elements flattened; a reader indexing it gets others)")
    dt, cand_dt = m.get("dtype"), m.get("cand_dtype")
    if dt and cand_dt and _dtype_kind(dt) != _dtype_kind(cand_dt):
        return f"the output's dtype is {cand_dt} instead of {dt}"
    return None


def _dtype_kind(name: str) -> str:
    """f (any float width, bfloat16 and float8 too), i (any integer), b, or the name itself
    (strings, sequences and maps compare by name)."""
    if name.startswith(("float", "bfloat")):
        return "f"
    if name.startswith(("int", "uint")):
        return "i"
    return "b" if name == "bool" else name


def _tables(metrics: dict[tuple[str, str], dict], out_pairs: list[tuple[str, str]],
            alignment: Any, layerwise: bool) -> tuple[Any, Any, bool]:
    """(the outputs table, the layers table, whether the comparison passed)."""
    outputs = pd.DataFrame([{"tensor": r, "cand_tensor": c, **metrics[(r, c)]}
                            for r, c in out_pairs if (r, c) in metrics], columns=OUTPUT_COLUMNS)
    layer_rows = []
    if layerwise:
        for row in alignment.itertuples(index=False):
            p = (row.tensor, row.cand_tensor)
            if not isinstance(row.cand_tensor, str) or p not in metrics:
                continue
            layer_rows.append({"tensor": row.tensor, "node_id": row.node_id,
                               "op_type": row.op_type, "depth": row.depth,
                               "cand_tensor": row.cand_tensor,
                               "cand_node_id": row.cand_node_id, "match": row.match,
                               **metrics[p]})
    layers = pd.DataFrame(layer_rows, columns=LAYER_COLUMNS)
    return outputs, layers, _passed(outputs, layers)


def _passed(outputs: Any, layers: Any) -> bool:
    """The outputs within tolerance (or every layer, without outputs), and no NaN or inf the
    reference does not hold in a compared tensor that is not downstream of a flip, nor
    absorbed by the candidate (:func:`~onnx_lab.numerics._absorbed.mark_absorbed`)."""
    if len(outputs):
        passed = bool(outputs["passed"].all())
    else:
        passed = bool(layers["passed"].all()) if len(layers) else True
    # NaN or inf where the reference is finite fails the comparison even when the outputs
    # agree (an fp16 overflow that this runtime's next kernel happens to absorb in fp32),
    # unless the candidate fed those values as they are still gives such outputs (Exp(-inf)).
    nonfinite = _nonfinite_rows(layers)
    return passed and all(flipped(r) or absorbed(r)
                          for r in nonfinite.to_dict(orient="records"))


def _selected(df: Any, selections: Selections) -> Any:
    """``df`` (layers or outputs) with the selection judge's verdicts (see
    :meth:`Selections.apply`), keyed by the candidate's tensor."""
    rows = df.to_dict(orient="records")
    selections.apply(rows, key="cand_tensor", ref_key="tensor")
    return pd.DataFrame(rows, columns=df.columns)


def _as_run(outputs: Any, as_run: Any, selections: Selections) -> tuple[Any, list[str]]:
    """(``outputs`` with the note of each output checked on its own below a flip saying what
    the outputs as run differ by, the phrases naming each output below a flip that fails as
    run). An output below a flip is judged on the reference's picks (checked on its own) or
    not at all (not comparable), and its row showed the local max_abs: a KNeighborsClassifier
    in float16 whose TopK flips an exact distance tie (iris, the third neighbour at squared
    distance 0.22 from two training rows of other classes) read 'output_probability:
    max_abs=0.000163 ok' while a fresh session's probabilities of that row moved by 0.333
    and its label changed; nothing said so."""
    before = {r["cand_tensor"]: r for r in as_run.to_dict(orient="records")}
    rows = outputs.to_dict(orient="records")
    moved = []
    for r in rows:
        t = r["cand_tensor"]
        was = before.get(t)
        if was is None or bool(was["passed"]) or not (
                t in selections.alone or t in selections.not_comparable):
            continue
        moved.append(f"{r['tensor']!r} (max_abs {float(was['max_abs']):.3g})")
        if t in selections.alone:
            r["note"] = "; ".join(x for x in (r.get("note"), (
                f"as run, with the candidate's own picks, max_abs {float(was['max_abs']):.3g}"))
                if x)
    return pd.DataFrame(rows, columns=outputs.columns), moved


def _moved_text(moved: list[str]) -> str | None:
    """The sentence saying which outputs a flipped selection moves as run, or None."""
    if not moved:
        return None
    return ("as run, with the candidate's own picks, the outputs below the flip differ: "
            + ", ".join(moved))


def _judge_selections(ref: Resolved, cand: Resolved, alignment: Any,
                      out_pairs: list[tuple[str, str]], layers: Any, outputs: Any,
                      feed_list: list, providers: tuple[list[str], list[str]],
                      preset: str | None, atol: float | None, rtol: float | None
                      ) -> Selections | None:
    """The selections above the failing tensors judged by their inputs (:mod:`onnx_lab.
    numerics.selection`): the reference's values recaptured for the tensors it needs, the
    candidate's nodes that are not the computation of their counterparts (SameQuantity)
    checked on their own downstream of a flip."""
    ref_model, cand_model = ref.model, cand.model
    if not selection_nodes(cand_model):
        return None
    ref_of: dict[str, str] = {}
    same = SameQuantity(ref_model, cand_model)
    for r, c in [*out_pairs, *zip(alignment["tensor"], alignment["cand_tensor"])]:
        if isinstance(c, str) and isinstance(r, str):
            ref_of.setdefault(c, r)
            same.pair(c, r)
    r_names = set(ref_model.index.values) | set(ref_model.graph.initializers)
    for name in [*(v.name for v in cand_model.graph.inputs), *cand_model.graph.initializers]:
        if name in r_names:
            ref_of.setdefault(name, name)
    through_float_casts(cand_model, ref_of)
    verdicts: dict[str, bool] = {}
    for df in (outputs, layers):
        for c, ok in zip(df["cand_tensor"], df["passed"]):
            if isinstance(c, str):
                verdicts[c] = verdicts.get(c, True) and bool(ok)
    ref_prov, cand_prov = providers

    # Values each side gave, per sample: the judge asks again for what it asked before, and
    # the first run also captures the region below the selections when it is small (each
    # group checked on its own asked for new names, and ran both whole models again).
    held: dict[str, list[dict[str, Any]]] = {"candidate": [{} for _ in feed_list],
                                             "reference": [{} for _ in feed_list]}
    region = selection_region(cand_model)
    shapes_in = {k: v.shape for k, v in feed_list[0].items() if hasattr(v, "shape")} \
        if feed_list else {}
    sizes = estimate_bytes(cand_model, region, shapes_in) if region else {}
    known = [v for v in sizes.values() if v is not None]
    # a data-dependent size (what an NMS keeps) counts as the known ones' mean: below a
    # TopK or an NMS the tensors are the picks, small beside what they were picked from
    mean = sum(known) // len(known) if known else 1 << 20
    if sum(known) + (len(sizes) - len(known)) * mean > _REGION_MAX_BYTES:
        region = []
    extra = {"candidate": region, "reference": [ref_of[n] for n in region if n in ref_of]}

    def side(model: LabModel, what: str, prov: list[str], names: list[str]
             ) -> list[dict[str, Any]]:
        sess: dict[tuple[str, ...], Any] = {}
        out = []
        for i, f in enumerate(feed_list):
            have = held[what][i]
            missing = [n for n in names if n not in have]
            if missing:
                ask = list(dict.fromkeys(missing + [n for n in extra[what] if n not in have]))

                def go(ns: list[str], f: dict = f) -> dict[str, Any]:
                    key = tuple(ns)  # one session per side and call, for every sample
                    if key not in sess:
                        sess[key] = _session(model, ns, prov, what)
                    return _run(sess[key], f, ns, what)
                try:
                    have.update(fetch(model, f, ask, go))
                except LabError:  # the region holds what a session cannot return
                    if len(ask) == len(missing):
                        raise
                    extra[what] = []
                    have.update(fetch(model, f, missing, go))
            out.append({n: have[n] for n in names if n in have})
        return out

    def values(names: list[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        wanted = {n: ref_of[n] for n in names if n in ref_of}
        cands = side(cand_model, "candidate", cand_prov, list(dict.fromkeys(names)))
        refs = side(ref_model, "reference", ref_prov, list(dict.fromkeys(wanted.values())))
        return [({n: r[m] for n, m in wanted.items() if m in r}, c)
                for r, c in zip(refs, cands)]

    cidx, ridx = cand_model.index, ref_model.index

    def changed(nid: str) -> bool:
        for v in cidx.entries[nid].node.outputs:
            r = ref_of.get(v.name) if v.name else None
            if r is not None and ridx.producer.get(r) is not None:
                return not same.same_node(ridx.producer[r], nid)
        return True

    sides = Sides(cand_model, ref_model, ref_of.get, values,
                  lambda dt, output=False: rule_for(dt, output=output, preset=preset,
                                                    atol=atol, rtol=rtol)[1],
                  changed, cand_prov)
    return judge_selections(sides, verdicts)


#: The region below the selections is captured with the first judgement up to this many
#: bytes per side and sample (a detector's post-processing: a few MB).
_REGION_MAX_BYTES = 256 << 20

def _size(n: int | None) -> int:
    return 1 << 20 if n is None else n


def _output_pairs(ref: LabModel, cand: LabModel) -> list[tuple[str, str]]:
    r_out = [v.name for v in ref.graph.outputs]
    c_out = [v.name for v in cand.graph.outputs]
    if set(r_out) <= set(c_out):
        return [(n, n) for n in r_out]
    if len(r_out) == len(c_out):
        logger.info("output names differ; pairing outputs by position")
        return list(zip(r_out, c_out))
    # a reference output the candidate does not give is never compared: refused, not passed
    missing = [n for n in r_out if n not in c_out]
    raise InputError(
        f"The candidate does not give the reference's output(s) {clip_text(missing, 300)} "
        f"(reference {clip_text(r_out, 300)}, candidate {clip_text(c_out, 300)}).",
        fix="Compare models with the same outputs: extract the ones both give from the "
            "reference (onnx_lab.open(ref).extract(outputs=[...])), or find why the "
            "candidate lost them.")


def _outputs_alignment(ref: LabModel | None, cand: LabModel,
                       pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """The alignment table of an outputs-only comparison."""
    model = ref if ref is not None else cand
    rows = []
    for r, c in pairs:
        nid = model.index.producer.get(r)
        rows.append({"tensor": r, "node_id": nid,
                     "op_type": model.index.node(nid).op_type if nid else None, "graph": "",
                     "depth": model.index.entries[nid].topo if nid else None, "is_output": True,
                     "cand_tensor": c, "cand_node_id": cand.index.producer.get(c),
                     "match": "exact" if r == c else "position", "reason": None})
    return pd.DataFrame(rows, columns=ALIGN_COLUMNS)


#: Weight-only quantized ops (onnxruntime contrib): a model holding one is judged as int4.
WEIGHT_ONLY_OPS = ("MatMulNBits", "GatherBlockQuantized")


def weight_only_preset(*models: LabModel | None) -> str | None:
    """``int4`` when one of ``models`` holds weight-only quantized ops (MatMulNBits,
    GatherBlockQuantized: its inputs and outputs stay float, so the dtype would pick the
    fp32 preset and call every quantized layer out of tolerance), else None; None too when
    two models both hold them with the same quantized weights: the same attributes and the
    same integers (packed weights, integer zero points, group index). Their rounding is the
    same, so what differs (a float bias, the scales) is no quantization noise: the int4 rule,
    8 dB, passed a float bias 60 % too large between two such builds, and one MatMulNBits'
    scales 1.5x too large (6.02 dB against 6)."""
    held = [_weight_only(m) for m in models if m is not None]
    if not any(held):
        return None
    if len(held) == 2 and all(held) and _same_arrays(held[0], held[1]):
        return None
    return "int4"


def _weight_only(model: LabModel) -> list[list[Any]]:
    """The attributes (bits, block size, ``accuracy_level``: 4 computes with int8
    activations) and the stored integer inputs (packed weights, packed zero points, a group
    index; GatherBlockQuantized's data is its input 0) of each weight-only op."""
    def integers(v: ir.Value | None) -> np.ndarray | None:
        a = const_array(v, stored=True) if v is not None else None
        return a if a is not None and a.dtype.kind in "iu" else None

    return [[repr(sorted((k, a.value) for k, a in e.node.attributes.items())),
             *(integers(v) for v in e.node.inputs)]
            for e in model.index.entries.values() if e.node.op_type in WEIGHT_ONLY_OPS]


def _same_arrays(a: list[list[Any]], b: list[list[Any]]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if len(x) != len(y):
            return False
        for u, v in zip(x, y):
            if isinstance(u, str) or isinstance(v, str):
                if u != v:
                    return False
            elif (u is None) != (v is None) or (u is not None and (
                    u.shape != v.shape or u.dtype != v.dtype or not np.array_equal(u, v))):
                return False
    return True


#: Activation quantization ops: a candidate holding them where the reference holds none is an
#: int8 version of it.
INT8_OPS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                      "QLinearMatMul", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul",
                      "MatMulIntegerToFloat", "QLinearAdd", "QLinearMul"})


def int8_preset(candidate: LabModel, reference: LabModel | None) -> str | None:
    """``int8`` when ``candidate`` quantizes activations (QDQ, dynamic quantization, QLinear
    ops) and ``reference``, given, does not: its float tensors carry int8 rounding, which
    float32's rule calls out of tolerance on a healthy model (47 dB)."""
    def quantizes(m: LabModel) -> bool:
        return any(e.node.op_type in INT8_OPS for e in m.index.entries.values())

    if reference is None or not quantizes(candidate) or quantizes(reference):
        return None
    return "int8"


def default_preset(candidate: LabModel, reference: LabModel | None = None, *,
                   quantized: bool = True) -> str | None:
    """The preset :func:`compare` judges ``candidate`` by when none is given: ``int4`` for
    weight-only quantized ops, ``int8`` for a candidate that quantizes activations where the
    reference does not, ``fp16``/``bf16`` when the candidate computes in that type, else None
    (each tensor's dtype picks its own preset: float32's for float32 tensors). Widgets show its
    numbers in their tolerance boxes, so the boxes hold the values in force. ``quantized=False``
    (atol/rtol given by hand, element-wise numbers) leaves the SQNR presets out, int8 and
    int4: a given atol was ignored against a MatMulNBits candidate, which passed at max_abs
    0.8 under atol=1e-6."""
    return ((weight_only_preset(candidate, reference) if quantized else None)
            or (int8_preset(candidate, reference) if quantized else None)
            or _computing_preset(candidate))


def preset_scope(candidate: LabModel, preset: str | None) -> set[str] | None:
    """The candidate's main-graph tensors a default ``preset`` judges: those computed
    through what made it the default (a weight-only op for int4, an activation quantization
    op for int8, a float16/bfloat16 value or weight for fp16/bf16; an If or Loop counting
    for what its bodies hold). The others are judged by the preset of their dtype: a QDQ pair
    on one output put a float32 output beside it on the int8 rule (26 dB passed a 5 % weight
    error). None: every tensor (another preset)."""
    idx = candidate.index
    if preset in ("int4", "int8"):
        # (and the DequantizeLinear of quantized weights: a dynamic quantizer's embedding
        # Gather of int8 weights, a blocked int4 weight, compute nothing else quantized)
        ops = {*(WEIGHT_ONLY_OPS if preset == "int4" else INT8_OPS), "DequantizeLinear"}

        def cause(node: ir.Node) -> bool:
            return node.op_type in ops
    elif preset in ("fp16", "bf16"):
        want = ir.DataType.FLOAT16 if preset == "fp16" else ir.DataType.BFLOAT16
        types = candidate.types()

        def typed(v: ir.Value | None) -> bool:
            if v is None or not v.name:
                return False
            info = types.get(v.name) if v.dtype is None else None
            return v.dtype == want or (info is not None and info.dtype == want.name.lower())

        def cause(node: ir.Node) -> bool:
            return any(typed(v) for v in node.outputs) or any(
                typed(v) and v.const_value is not None for v in node.inputs)
    else:
        return None
    return downstream(candidate, [
        nid for nid in idx.topo_order("")
        if cause(idx.entries[nid].node) or any(
            cause(n) for attr in idx.entries[nid].node.attributes.values()
            if attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
            for g in (attr.value if attr.type == ir.AttributeType.GRAPHS else [attr.value])
            for n in ir.traversal.RecursiveGraphIterator(g))])


def _computing_preset(model: LabModel) -> str | None:
    """``fp16``/``bf16`` when ``model`` computes in that type (weights a node reads, or
    values), else None (each tensor is then judged by the preset of its own dtype)."""
    found = set()
    untyped: list[str] = []
    for g in model.ir.graphs():
        for v in g.initializers.values():
            if v.dtype is not None and v.uses():  # (an unused float16 weight computes nothing)
                found.add(v.dtype)
        for n in g:
            for v in n.outputs:
                if v.dtype is not None:
                    found.add(v.dtype)
                elif v.name:
                    untyped.append(v.name)
    if not found & {ir.DataType.FLOAT16, ir.DataType.BFLOAT16} and untyped:
        # values the file declares no type for (a float16 model without value_info, whose
        # weights are ConstantOfShape -> Cast): their inferred dtypes (95 float16 tensors
        # were judged by float32's rule, "53 out of tolerance")
        types = model.types()
        names = {types[n].dtype for n in untyped if n in types}
        found |= {ir.DataType.FLOAT16 for d in names if d == "float16"}
        found |= {ir.DataType.BFLOAT16 for d in names if d == "bfloat16"}
    if ir.DataType.FLOAT16 in found:
        return "fp16"
    if ir.DataType.BFLOAT16 in found:
        return "bf16"
    return None
