"""The precision doctor's search: :func:`find_precision`, from the ranking to a minimal plan.

After the reference run and the full conversion (one trial), the sensitivity ranking
(:mod:`.ranking`) orders the candidates; :func:`_search_order` brings each standout's
producers (int8: and readers) forward; :func:`_bisect` finds the shortest passing prefix;
:func:`_prune` cuts it to a minimal set by group testing; :func:`_confirm` judges the plan once
more with onnxruntime's optimizations on both sides, as a deployment runs it. Every trial is a
row of the plan's table (:mod:`.trials`).

Example:
    >>> plan = find_precision("sample:convnet", "fp16", atol=1e-3, rtol=1e-2)
    >>> plan.kept, plan.trials[["phase", "n_kept", "score", "passed"]]
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.model import LabModel
from onnx_lab.errors import LabError
from onnx_lab.numerics.load_blockers import load_blocker
from onnx_lab.numerics.metrics import RULES, Rule
from onnx_lab.numerics.precision import trials
from onnx_lab.numerics.precision.plan import OUTPUT_COLUMNS, PrecisionPlan
from onnx_lab.numerics.precision.ranking import (
    absorbed_overflows,
    below_selections,
    estimate,
    layerwise,
    overflows,
    rank,
    rank_candidates,
)
from onnx_lab.numerics.precision.trials import (
    TRIAL_COLUMNS,
    PrecisionCancelled,
    Search,
    ToleranceUnreachable,
    start_search,
)
from onnx_lab.numerics.weight_only import find_weight_only
from onnx_lab.runtime.session import default_load_regression

__all__ = ["find_precision", "WEAK_RANGE"]


def find_precision(source: Any, target: str = "fp16", feeds: Any = None, *,
                   metric: str | None = None, tolerance: Any = None, atol: float | None = None,
                   rtol: float | None = None, calibration: Any = None, n_calibration: int = 8,
                   recheck: int = 5, max_trials: int = 48, dims: Mapping[str, int] | None = None,
                   shapes: Mapping[str, Sequence[int]] | None = None, max_bytes: int = 1 << 30,
                   progress: Any = None, should_stop: Callable[[], bool] | None = None,
                   confirm: bool = True, keep: Sequence[str] | None = None) -> PrecisionPlan:
    """The smallest set of nodes to keep in higher precision so the outputs meet a tolerance.

    Args:
        source: a Lab, path, ModelProto, ``"sample:NAME"``... (the float32 reference).
        target: ``"fp16"``, ``"bf16"`` (emulated, see the module doc) or ``"int8"`` (static
            QDQ; kept nodes are excluded from quantization).
        feeds: the inputs the outputs are judged on (dict, list of dicts, ``.npz``; None: one
            seeded sample).
        metric, tolerance, atol, rtol: how outputs are judged
            (:func:`~onnx_lab.numerics.precision.trials.make_tolerance`). Default:
            the target's preset (fp16/bf16: element-wise atol/rtol; int8: SQNR >= 20 dB);
            ``atol``/``rtol`` switch to element-wise with those numbers.
        calibration: int8 calibration data (feeds, an ``.npz`` file or folder) or a
            :class:`~onnx_lab.numerics.quantize.Calibration`; None: ``feeds`` when given,
            else ``n_calibration`` seeded samples. Calibration runs once and is cached.
        recheck: how many top-ranked nodes are re-checked exactly.
        max_trials: bound on the number of trials of the pruning stage (past it, the
            smallest passing set found so far is the plan).
        max_bytes: bound on captured activations held at once.
        progress: None (tqdm when interactive), False, or a callable(done, total, label).
        should_stop: called between trials; True stops the search and returns the best plan
            found so far (``cancelled=True``); PrecisionCancelled when none passed yet.
        confirm: after a search, judge the plan once more with onnxruntime's graph
            optimizations on both sides, as a default session deploys it (``confirm`` trials;
            see :attr:`PrecisionPlan.confirmed`). False for runtimes that run the graph as
            written (TensorRT honours QDQ placement).
        keep: node ids that stay in the higher precision (int8: out of quantization) in
            every trial and in the plan, whatever the search finds: a node you know must stay
            (one whose conversion breaks the model). An id the model does not have raises
            InputError with close matches; one the conversion does not change gets a note.

    Returns:
        A :class:`PrecisionPlan`.

    Raises:
        UnknownNameError: unknown target or metric. InputError: no float node; a tolerance
        that the model misses even with every node kept (the fix names the error reached).

    Example:
        >>> plan = find_precision("sample:convnet", "fp16", atol=1e-3, rtol=1e-2)
        >>> plan.kept, plan.trials[["phase", "n_kept", "score", "passed"]]
    """
    if target == "int4":  # weight-only LLM quantization: its own search (numerics/weight_only)
        return find_weight_only(source, target, feeds, tolerance=tolerance, dims=dims,
                                max_trials=max_trials, max_bytes=max_bytes, progress=progress,
                                should_stop=should_stop)
    t_all = time.perf_counter()
    s, cands = start_search(source, target, feeds, calibration, n_calibration, dims, shapes,
                            metric, tolerance, atol, rtol, should_stop, keep=keep)
    model, feed_list, conv, tol = s.model, s.feed_list, s.conv, s.tol
    n = len(cands)
    est_total = 3 + recheck + max(1, math.ceil(math.log2(n + 1))) + min(max_trials, 16)
    with Progress(progress, est_total, f"find_precision {target}") as bar:
        s.bar = bar
        # Quick exit: when the full conversion already passes, the candidate is never
        # captured. fp16 first captures the reference alone (an overflow beyond 65504 may
        # hide behind CPU kernels that compute in float32 and must be kept anyway); the
        # others need only the reference outputs.
        stats: dict[str, dict] = {}
        t = time.perf_counter()
        if target == "fp16":
            s.ref_values = [{} for _ in feed_list]
            stats, s.ref_outputs = layerwise(model, None, feed_list, target, max_bytes,
                                             keep=s.ref_values)
            overflows(s, stats, cands)
        else:
            s.ref_outputs = trials.run_outputs(model, feed_list, s.out_names, original=True)
        t = s.clock("reference run", t)
        full = None
        if s.required:
            # an overflow the model's own arithmetic absorbs (Exp(-inf) = 0) needs no node
            # kept: judged on the full conversion fed inf there
            try:
                full = conv.convert(s.key(()))
            except LabError:  # the full trial says why
                full = None
            if full is not None:
                absorbed_overflows(s, full)
            t = s.clock("overflow check", t)
        first = s.trial((), "full", model=full, keep_model=True)
        t = s.clock("full conversion", t)
        sens = None
        if first["passed"]:
            sens = rank(estimate(model, cands, stats, target, conv.calibration), target)
        else:
            sens, _ = rank_candidates(s, cands, recheck, max_bytes, s.models.get(s.key(())))
        t = s.clock("sensitivity", t)
        ranked = list(sens["node_id"])
        best: tuple[str, ...] | None = None
        if s.rows[0]["passed"]:
            best = ()
        else:
            singles = [r for r in s.rows if r["phase"] == "recheck" and r["passed"]]
            if singles:
                best = tuple(min(singles, key=lambda r: r["score"])["kept"])
        order = _search_order(model, ranked, readers=target == "int8",
                              expand=None if target == "int8" else _standouts(sens))
        # The bar follows the trials: each phase re-estimates what is left (the bisection
        # ~2·log2 of the order, the pruning up to max_trials, the confirmation one).
        left_after = 1 if confirm else 0
        if best is None and not s.stopped():
            bar.expect(2 * max(1, math.ceil(math.log2(len(order) + 1)))
                       + min(max_trials, 16) + left_after)
            flagged = int(np.isinf(sens["est_drop"].astype(float)).sum())
            best = _bisect(s, order, flagged)
        t = s.clock("bisect", t)
        if best is None:
            raise PrecisionCancelled("The search was cancelled before any plan met "
                                     f"{tol.describe()}.", fix="Run it again to the end.")
        if len(best) > 1 and not s.stopped():
            # The bisection's last node is necessary when the prefix without it failed.
            needed = [best[-1]] if s.known(best[:-1]) is False else []
            bar.expect(min(max_trials, 2 * len(best) * max(1, math.ceil(math.log2(
                len(best) + 1)))) + left_after)
            best = _prune(s, order, list(best), max_trials, needed)
        t = s.clock("prune", t)
        best, loads = (best, True) if s.stopped() else _loads_as_deployed(s, best, cands)
        t = s.clock("load check", t)
        confirmed = None if loads else False
        if confirm and loads and not s.rows[0]["passed"] and not s.stopped() and \
                not s.flips_when_optimized:  # (then the notes say why it is not confirmed)
            best, confirmed = _confirm(s, best)
        s.clock("confirm", t)
        bar.finish()
    kept = sorted(s.forced) + [nid for nid in ranked if nid in set(best)]
    key = s.key(best)
    final = s.models.get(key) or conv.convert(key)
    conv.close()
    before, after = s.outputs_of[s.key(())], s.outputs_of[key]
    # The fp16 overflow constraint fails a side whatever this CPU run measured (its kernels
    # may compute in float32 where a GPU stores the inf): the outputs table says so too.
    ok_before, ok_after = not s.required, all(r in key for r in s.required)
    outputs = pd.DataFrame([{
        "tensor": name, "max_abs_before": before[name]["max_abs"],
        "max_abs_after": after[name]["max_abs"], "sqnr_db_before": before[name]["sqnr_db"],
        "sqnr_db_after": after[name]["sqnr_db"],
        "score_before": before[name]["score"] if ok_before else math.inf,
        "score_after": after[name]["score"] if ok_after else math.inf,
        "passed_before": before[name]["passed"] and ok_before,
        "passed_after": after[name]["passed"] and ok_after} for name in s.out_names],
        columns=OUTPUT_COLUMNS)
    passed = bool(outputs["passed_after"].all())
    sens = sens.assign(kept=sens["node_id"].isin(set(kept)))
    return PrecisionPlan(target=target, kept=kept, passed=passed, model=final,
                         trials=pd.DataFrame(s.rows, columns=TRIAL_COLUMNS), sensitivity=sens,
                         outputs=outputs, tolerance=tol, n_candidates=n + len(s.forced),
                         seconds=time.perf_counter() - t_all, calibration=conv.calibration,
                         cancelled=s.stopped(), feeds=feed_list, source=model,
                         required=dict(s.required), confirmed=confirmed,
                         notes=s.notes + _broken_notes(s) + _weak_reference_notes(s.ref_outputs, s.out_names,
                                                               tol),
                         forced=sorted(s.forced),
                         timings=dict(s.timings))


def _broken_notes(s: Search) -> list[str]:
    """A note when candidates failed to run (failed trials, their nodes kept)."""
    bad = [r for r in s.rows if s.failed_to_run(r)]
    if not bad:
        return []
    return [f"{len(bad)} of {len(s.rows)} trials failed to run, counted as failed (the search "
            f"kept nodes until a candidate ran); the first: {bad[0]['note']}"]


#: An output whose reference values span less than this (times max(1, its magnitude)) on the
#: judged inputs "barely varies": a relative metric judges rounding noise there.
WEAK_RANGE = 1e-3


def _weak_reference_notes(ref_outputs: list[dict], out_names: Sequence[str],
                          tol: Rule) -> list[str]:
    """A note per output that barely varies on the judged inputs, when the metric is relative
    (sqnr, cosine).

    PP-OCRv4's text detector on seeded random images outputs a probability map of ~0
    everywhere (at most 5.9e-05): int8 rounds it to 0, its SQNR is 0 dB, and the search
    kept 289 of 296 nodes out of int8 — a verdict on noise, which real images would not give.
    """
    if not RULES[tol.kind].statistics:
        return []
    notes = []
    for name in out_names:
        arrays = [np.asarray(r[name]) for r in ref_outputs if name in r]
        arrays = [a[np.isfinite(a)] for a in arrays if a.dtype.kind == "f" and a.size]
        arrays = [a for a in arrays if a.size]
        if not arrays:
            continue
        lo, hi = min(float(a.min()) for a in arrays), max(float(a.max()) for a in arrays)
        if hi - lo <= WEAK_RANGE * max(1.0, abs(lo), abs(hi)):
            notes.append(
                f"output {name!r} barely varies on these inputs (from {lo:.3g} to {hi:.3g}): "
                f"{tol.kind} there judges rounding noise, not the model (a plan may keep far "
                "more nodes than real inputs need, or pass what they would fail); judge on "
                "representative inputs (feeds=..., an .npz of real samples)")
    return notes


def _loads_as_deployed(s: Search, best: tuple[str, ...], cands: Sequence[str]
                       ) -> tuple[tuple[str, ...], bool]:
    """The plan, checked to load as a deployment loads it (onnxruntime's default options,
    in a child process: the trials run with the optimizations off, and a float16 opset-20
    Gelu crashes onnxruntime with them on). When it does not while the model does, the
    nodes of the first op type whose keeping makes it load are added (judged by a ``load``
    trial) and a note says so; (plan, whether it loads). Before ``confirm``, which runs the
    plan with the optimizations in this process."""
    key = s.key(best)
    model = s.models.get(key) or s.conv.convert(key)
    problem = default_load_regression(model, s.model)
    if problem is None:
        return best, True
    rest = [c for c in cands if c not in set(key)]
    found = load_blocker(lambda ids: s.conv.convert(s.key((*key, *ids))), s.model, rest)
    if found is None:
        s.notes.append(f"the plan's model does not load at onnxruntime's default options "
                       f"({problem}); keeping all the nodes of any one of the op types tried did "
                       "not help: save refuses it")
        return best, False
    new = s.key((*key, *found.node_ids))
    s.models[new] = found.model
    row = s.trial(new, "load", model=found.model, keep_model=True)
    if not row["passed"]:  # it loads so, but misses the tolerance: the plan stays as it was
        s.notes.append(f"the plan's model does not load at onnxruntime's default options "
                       f"({problem}); with its {len(found.node_ids)} {found.op_type} node(s) "
                       "also kept it loads but misses the tolerance (trial "
                       f"{row['trial']}): save refuses the plan")
        return best, False
    s.notes.append(f"{len(found.node_ids)} {found.op_type} node(s) kept in higher precision "
                   f"so that the result loads at onnxruntime's default options: without "
                   f"them {problem}")
    return new, True


def _confirm(s: Search, best: tuple[str, ...], tries: int = 4
             ) -> tuple[tuple[str, ...], bool | None]:
    """The plan judged once more as a deployment runs it: both sides with onnxruntime's
    graph optimizations (fusions reorder float arithmetic; QDQ pairs become int8 kernels). A
    plan that only just passed without them can miss with them (BERT-base fp16, whose full
    conversion misses by 4%, is at the noise of the fusions). When it misses, the next
    smallest passing sets of the search are confirmed, ``tries`` in all; the first that holds
    is the plan. Returns (plan, whether it held; None: it cannot be told, every output the
    plan misses with them is below a selection that picks, whose near-ties the fusions flip:
    the outputs alone cannot tell a plan's error from a flip, and a detector's plan was
    "NOT with onnxruntime's optimizations" for its float32 ties)."""
    best = s.key(best)
    others = {}
    for r in s.rows:
        key = tuple(r["kept"])
        if r["passed"] and r["phase"] != "confirm" and len(key) > len(best):
            others.setdefault(key, r["score"])
    order = [best] + sorted(others, key=lambda k: (len(k), others[k]))
    for key in order[:tries]:
        if s.stopped():
            break
        if s.trial(key, "confirm", optimized=True)["passed"]:
            return key, True
        missed = [n for n, m in s.last_outputs.items() if not m["passed"]]
        if key == best and missed and set(missed) <= below_selections(s.model):
            s.notes.append(
                f"not confirmed with onnxruntime's optimizations: the outputs that miss there "
                f"({', '.join(map(repr, missed))}) are below selections (TopK, NMS, ArgMax) "
                "whose near-ties its fusions flip, and the outputs alone cannot tell a plan's "
                "error from a flip")
            return best, None
    return best, False


def _search_order(model: LabModel, ranked: list[str], readers: bool = True,
                  expand: set[str] | None = None) -> list[str]:
    """The ranked nodes, each followed by the producers of its inputs and (``readers``, int8)
    the readers of its outputs (those the search can keep), at their first appearance.
    ``expand``: only these nodes bring their neighbours forward (None: every node).

    Rounding error lives on tensors. int8: the QDQ quantizer quantizes a tensor for its
    producer and for each reader it quantizes: excluding only the node whose output shows
    the error (a Relu after a conv with an outlier channel) leaves that tensor quantized for
    the next conv (on ResNet-50 with a planted outlier, the two convs around the top-ranked
    Relu ranked 68th and 97th). fp16: a node that shows the error (a Sub that centres values
    near 1000) only recovers when the tensor it reads stays float32 too, which takes its
    producer; the producer's own relative error is small, so it ranks far down (on ResNet-50
    with three such centring Subs the bisection needed a prefix of 115 of 125 nodes). Its
    readers are not needed there, and adding them bloats the prefixes of models that need
    many nodes (PP-OCRv4 rec: 505 of 768 kept with readers, the pruning out of trials)."""
    idx = model.index
    cset = set(ranked)
    out: dict[str, None] = {}
    for nid in ranked:
        out.setdefault(nid)
        if expand is not None and nid not in expand:
            continue
        node = idx.entries[nid].node
        for v in node.inputs:
            p = idx.producer.get(v.name) if v is not None else None
            if p in cset:
                out.setdefault(p)
        if not readers:
            continue
        for v in node.outputs:
            for c in idx.consumers.get(v.name, []) if v is not None else []:
                if c in cset:
                    out.setdefault(c)
    return list(out)


def _standouts(sens: pd.DataFrame, share: float = 0.5, most: int = 16) -> set[str]:
    """fp16/bf16: the nodes whose estimated drop stands out (at least ``share`` of the largest
    finite estimate, or infinite; the ``most`` best ranked of them): only those bring their
    producers forward in the search order. A centring Sub stands out and needs its conv; on a
    model whose error is spread (PP-OCRv4 rec) pulling every node's producers forward bloated
    the prefixes (423 of 768 kept instead of 139, the pruning out of trials)."""
    est = sens["est_drop"].astype(float)
    finite = est[np.isfinite(est)]
    top = float(finite.max()) if len(finite) else 0.0
    keep = ~np.isfinite(est) | ((est >= share * top) & (est > 0))
    return set(sens.loc[keep, "node_id"].head(most))


def _bisect(s: Search, ranked: list[str], flagged: int = 0) -> tuple[str, ...] | None:
    """Shortest passing prefix of ``ranked`` (assumes keeping more never hurts)."""
    n = len(ranked)
    top = s.trial(ranked, "all_kept")
    if s.failed_to_run(top):
        raise ToleranceUnreachable(
            f"The candidate fails to run even with all {n} nodes kept in the higher precision "
            f"({top['note']}).", fix="Check that the float32 model runs on these feeds "
            "(lab.run(feeds)); report the model if it does.")
    if not top["passed"]:
        raise ToleranceUnreachable(
            f"The tolerance ({s.tol.describe()}) is missed even with all {n} nodes kept in "
            f"the higher precision (score {top['score']:.3g}, max_abs {top['max_abs']:.3g}): "
            "the reference itself does not reproduce within it.",
            fix=f"Loosen the tolerance (e.g. atol >= {max(top['max_abs'], 1e-12) * 2:.2g}) "
            "or check that the feeds give finite outputs.")
    lo, hi = 0, n  # prefix lo fails, prefix hi passes
    # A first guess: the nodes flagged with certain trouble (overflow / non-finite); then
    # prefixes of doubling length (a good ranking puts the answer near the top: about
    # 2·log2(answer) trials instead of log2(n)), then the bisection between the last two.
    guess = flagged if 0 < flagged < n else 0
    if guess and not s.stopped():
        if s.passes(ranked[:guess], "guess"):
            hi = guess
        else:
            lo = guess
    size = max(2 * lo, 1)
    while size < hi and not s.stopped():
        if s.passes(ranked[:size], "bisect"):
            hi = size
            break
        lo = size
        size *= 2
    while hi - lo > 1 and not s.stopped():
        mid = (lo + hi) // 2
        if s.passes(ranked[:mid], "bisect"):
            hi = mid
        else:
            lo = mid
    return tuple(ranked[:hi])


def _prune(s: Search, ranked: list[str], kept: list[str], max_trials: int,
           needed: Sequence[str] = ()) -> tuple[str, ...]:
    """A minimal passing subset of ``kept`` (no node can be dropped alone), by group testing.

    ``kept`` passes. Repeatedly: the shortest prefix of the remaining nodes (most sensitive
    first) that passes together with the nodes found necessary so far is bisected; its last
    node is necessary (without it the prefix failed) and every node after it is dropped at
    once. That costs about ``k·log2(n)`` trials for ``k`` necessary nodes among ``n``, where
    dropping nodes one at a time costs ``n``. ``needed``: nodes already known necessary (the
    last node of the bisection's prefix; fp16 overflow constraints). Every trial is a row
    of the table; past ``max_trials`` the smallest passing set found so far is returned.
    """
    order = {nid: i for i, nid in enumerate(ranked)}
    need = [n for n in sorted(set(needed) | (set(s.required) & set(kept)), key=order.get)
            if n in set(kept)]
    rest = [n for n in sorted(kept, key=order.__getitem__) if n not in set(need)]
    start = len(s.rows)

    def budget() -> bool:
        return len(s.rows) - start < max_trials and not s.stopped()

    while rest and budget():
        # Does what is known necessary pass alone? (Known to fail without any node.)
        if need and s.passes(need, "prune"):
            return tuple(need)
        lo, hi = 0, len(rest)  # need + rest[:lo] fails, need + rest[:hi] passes
        while hi - lo > 1 and budget():
            mid = (lo + hi) // 2
            if s.passes(need + rest[:mid], "prune"):
                hi = mid
            else:
                lo = mid
        if hi - lo > 1:  # out of trials: the passing prefix
            return tuple(need + rest[:hi])
        need.append(rest[hi - 1])
        rest = rest[:hi - 1]
    return tuple(need + rest)
