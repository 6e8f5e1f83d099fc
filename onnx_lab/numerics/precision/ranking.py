"""The precision doctor's sensitivity analysis: which nodes lose most in the narrow type.

One layerwise capture of the reference and of the fully converted candidate
(:func:`layerwise`, memory-bounded chunks) gives every tensor's error statistics; each
candidate node's *estimated drop* is the error it adds beyond the worst error of its inputs,
relative to its tensor's scale (int8: noise energy over the bulk of the signal), ``inf`` for
an fp16 overflow or a NaN/inf the node creates (:func:`estimate`). :func:`rank` orders the
nodes; :func:`rank_candidates` re-checks the top few exactly (a trial with that node alone
kept). :func:`sensitivity` is the public door; the search (:mod:`.search`) walks the ranking.

Example:
    >>> from onnx_lab.numerics.precision import sensitivity
    >>> sensitivity("sample:convnet", "int8").head(3)
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core.index import node_scope
from onnx_lab.core.model import LabModel
from onnx_lab.core.source_map import module_at
from onnx_lab.core.subgraph import reached_inputs
from onnx_lab.errors import LabError, unknown_name
from onnx_lab.numerics.metrics import MetricAccumulator, Rule, judge
from onnx_lab.numerics.precision import trials
from onnx_lab.numerics.precision.trials import (
    CONVERTED,
    FP16_MAX,
    TRIAL_COLUMNS,
    Search,
    ToleranceUnreachable,
    start_search,
)
from onnx_lab.numerics.quantize import Calibration
from onnx_lab.numerics.selection import downstream, picking_nodes, run_cut
from onnx_lab.runtime.capture import capturable_tensors, estimate_bytes, plan_chunks

__all__ = ["sensitivity", "SENSITIVITY_COLUMNS", "layerwise", "estimate", "rank",
           "rank_candidates", "overflows", "absorbed_overflows"]

#: Columns of the sensitivity table (``by="node"``).
SENSITIVITY_COLUMNS = ["rank", "node_id", "op_type", "graph", "scope", "est_drop", "rel_err",
                       "overflow", "nonfinite", "score_alone", "drop", "tensor", "ref_abs_max",
                       "outlier_ratio", "cal_min", "cal_max", "saturation"]

# Any rule with statistics: the layerwise capture reads the accumulator's sums, not a verdict.
_SUMS = Rule("sqnr", min_sqnr_db=0.0)


def _is_float(v: ir.Value | None) -> bool:
    # A tensor: a sequence or map of floats reports its element's dtype, but is no tensor
    # the search measures.
    return v is not None and (v.type is None or isinstance(v.type, ir.TensorType)) and \
        v.dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16,
                    ir.DataType.DOUBLE)


def _float_array(value) -> np.ndarray | None:
    """``value`` as a float array, None for what the search does not measure (strings,
    sequences, maps: never converted to float)."""
    if value is None or isinstance(value, (list, tuple, dict)):
        return None
    a = np.asarray(value)
    return a if a.dtype.kind in "fiub" else None



def layerwise(ref: LabModel, cand: LabModel | None, feed_list: list[dict], target: str,
               max_bytes: int, keep: list[dict] | None = None
               ) -> tuple[dict[str, dict], list[dict]]:
    """Per reference tensor: error stats of the candidate (and the reference's own stats);
    plus the reference outputs. One run of each model per chunk.

    ``cand=None``: the reference alone (its magnitude and non-finite counts, float32
    arithmetic, no error): what the fp16 overflow constraint needs before any candidate runs.

    ``keep``: the reference's captured values, one dict per feed. With ``cand=None`` they are
    filled when the whole capture fits one chunk of ``max_bytes``; with a candidate, a chunk
    whose tensors are all there does not run the reference again (the reference activations
    are captured once per search).
    """
    ref_names = [n for n in capturable_tensors(ref)]
    cand_set = set(capturable_tensors(cand)) if cand is not None else set()
    pairs: list[tuple[str, str | None]] = []
    for n in ref_names:
        v = ref.index.values.get(n)
        if v is not None and v.dtype is not None and not _is_float(v):
            continue
        if cand is None:
            pairs.append((n, None))
            continue
        dq = f"{n}_DequantizeLinear_Output"
        c = dq if dq in cand_set else (n if n in cand_set else None)
        if c is not None:
            pairs.append((n, c))
    out_names = [v.name for v in ref.graph.outputs]
    shapes_in = {k: np.asarray(v).shape for k, v in feed_list[0].items()
                 if v is not None and not isinstance(v, (list, tuple, dict))}
    sizes = estimate_bytes(ref, [p[0] for p in pairs], shapes_in)
    per_sample = 1 if cand is None else 2
    sizes = {p: (sizes.get(p[0]) or (1 << 20)) * (len(feed_list) * per_sample)
             for p in pairs}
    stats: dict[str, dict] = {}
    ref_out: list[dict] = [{} for _ in feed_list]
    for chunk in plan_chunks(sizes, max_bytes) if pairs else []:
        r_names = list(dict.fromkeys([p[0] for p in chunk]))
        # The outputs ride along in the first chunk (no separate run for them).
        if not stats:
            r_names += [n for n in out_names if n not in r_names]
        if keep and all(n in keep[0] for n in r_names):
            rv = keep
        else:
            rv = trials.run_outputs(ref, feed_list, r_names, original=True)
            if keep is not None and cand is None and len(sizes) == len(chunk) and \
                    sum(sizes.values()) <= max_bytes // 2:
                for i, values in enumerate(rv):
                    keep[i].update(values)
        if cand is None:
            for r, _ in chunk:
                stats[r] = _ref_stats([rv[s][r] for s in range(len(feed_list))])
        else:
            c_names = list(dict.fromkeys([p[1] for p in chunk]))
            cv = trials.run_outputs(cand, feed_list, c_names, converted=CONVERTED.get(target))
            for r, c in chunk:
                stats[r] = _pair_stats([rv[s][r] for s in range(len(feed_list))],
                                       [cv[s][c] for s in range(len(feed_list))], target)
            del cv
        for s in range(len(feed_list)):
            for n in out_names:
                if n in rv[s]:
                    ref_out[s][n] = rv[s][n]
        del rv
    missing = [n for n in out_names if n not in ref_out[0]]
    if missing:
        extra = trials.run_outputs(ref, feed_list, missing, original=True)
        for s in range(len(feed_list)):
            ref_out[s].update(extra[s])
    return stats, ref_out


def _ref_stats(values: list[np.ndarray]) -> dict:
    """The reference's own statistics of one tensor (no candidate): error fields are zero."""
    st = {"max_abs": 0.0, "max_ref": 0.0, "s_rr": 0.0, "s_ee": 0.0, "numel": 0, "nf_ref": 0,
          "nf_cand": 0, "values": None, "floating": False}
    for a in values:
        a = _float_array(a)
        if a is None or not a.size:
            continue
        st["floating"] = st["floating"] or a.dtype.kind == "f"
        if a.dtype.kind != "f":
            a = a.astype(np.float64)
        hi, lo = float(a.max()), float(a.min())  # NaN and inf show here: then count them
        if math.isfinite(hi) and math.isfinite(lo):
            st["numel"] += int(a.size)
            st["max_ref"] = max(st["max_ref"], hi, -lo)
            continue
        finite = np.isfinite(a)
        nf = int(a.size - np.count_nonzero(finite))
        st["nf_ref"] += nf
        st["numel"] += int(a.size) - nf
        if nf < a.size:
            st["max_ref"] = max(st["max_ref"], float(np.abs(a[finite]).max()))
    st["nf_cand"] = st["nf_ref"]
    st["max_computed"] = _computed_max(values) if st["max_ref"] > FP16_MAX else st["max_ref"]
    return st


def _pair_stats(refs: list[np.ndarray], cands: list[np.ndarray], target: str) -> dict:
    """Error statistics of one tensor, the candidate's values against the reference's (sums
    from :class:`~onnx_lab.numerics.metrics.MetricAccumulator`): max_abs (over positions
    finite on both sides), max_ref, s_rr, s_ee, numel (finite pairs), nf_ref, nf_cand
    (NaN/inf counts); int8: a sample of the reference's values for the outlier ratio."""
    acc = MetricAccumulator(rule=_SUMS)
    values = None
    floating = False
    for ra, ca in zip(refs, cands):
        a, b = _float_array(ra), _float_array(ca)
        if a is None or b is None or a.size != b.size:
            continue
        floating = floating or a.dtype.kind == "f"
        acc.add(a, b.reshape(a.shape))
        if target == "int8" and a.size and (values is None or values.size < 1 << 20):
            a, b = a.reshape(-1).astype(np.float64), b.reshape(-1)
            a = a[np.isfinite(a) & np.isfinite(b)]
            values = a if values is None else np.concatenate([values, a])[: 1 << 20]
    st = {"max_abs": acc.max_abs_finite, "max_ref": acc.max_ref, "s_rr": acc.sum_r2,
          "s_ee": acc.sum_e2, "numel": acc.n_finite, "nf_ref": acc.nan_ref + acc.inf_ref,
          "nf_cand": acc.nan_cand + acc.inf_cand, "values": values, "floating": floating,
          "max_computed": _computed_max(refs) if acc.max_ref > FP16_MAX else acc.max_ref}
    if values is not None and values.size:
        # int8: noise against the bulk of the signal (|ref| clipped at its 99th percentile),
        # so an outlier that stretches the range cannot hide the resolution it costs every
        # other value.
        a = np.abs(values)
        p99 = float(np.quantile(a, 0.99))
        st["p99"] = p99
        st["s_rr_bulk"] = float(np.mean(np.minimum(a, p99) ** 2)) * st["numel"]
    return st


def _rel(st: dict | None, target: str) -> float:
    if st is None:
        return 0.0
    if st["nf_cand"] > st["nf_ref"]:
        return math.inf
    if target == "int8":
        bulk = st.get("s_rr_bulk", st["s_rr"])
        return st["s_ee"] / bulk if bulk > 0 else (0.0 if st["s_ee"] == 0 else math.inf)
    return st["max_abs"] / st["max_ref"] if st["max_ref"] > 0 else (
        0.0 if st["max_abs"] == 0 else math.inf)


def estimate(model: LabModel, candidates: list[str], stats: dict[str, dict], target: str,
              calibration: Calibration | None) -> pd.DataFrame:
    """The estimated sensitivity of every candidate (no exact columns yet)."""
    idx = model.index
    rows = []
    owner_est: dict[str, float] = {}
    for nid in candidates:
        e = idx.entries[nid]
        node = e.node
        outs = [v.name for v in node.outputs if v is not None and v.name in stats]
        ins = [v.name for v in node.inputs if v is not None and v.name in stats]
        rel_out = max((_rel(stats[n], target) for n in outs), default=0.0)
        rel_in = max((_rel(stats[n], target) for n in ins), default=0.0)
        nonfinite = any(stats[n]["nf_cand"] > stats[n]["nf_ref"] for n in outs) and not any(
            stats[n]["nf_cand"] > stats[n]["nf_ref"] for n in ins)
        overflow = target == "fp16" and any(_beyond_fp16(stats[n]) for n in outs + ins)
        if math.isinf(rel_out) and math.isinf(rel_in):
            est = 0.0
        else:
            est = max(0.0, rel_out - rel_in)
        if overflow or nonfinite:
            est = math.inf
        tensor = outs[0] if outs else None
        row = {"node_id": nid, "op_type": node.op_type, "graph": e.graph,
               "scope": node_scope(node), "est_drop": est, "rel_err": rel_out,
               "overflow": overflow, "nonfinite": nonfinite, "score_alone": math.nan,
               "drop": math.nan, "tensor": tensor, "ref_abs_max": math.nan,
               "outlier_ratio": math.nan, "cal_min": math.nan, "cal_max": math.nan,
               "saturation": math.nan, "_topo": e.topo}
        if tensor is not None:
            st = stats[tensor]
            row["ref_abs_max"] = st["max_ref"]
            vals = st.get("values")
            if vals is not None and vals.size:
                a = np.abs(vals)
                p = st.get("p99", float(np.quantile(a, 0.99)))
                row["outlier_ratio"] = float(a.max() / p) if p > 0 else (
                    0.0 if a.max() == 0 else math.inf)
                if calibration is not None:
                    rng = calibration.range_of(tensor)
                    if rng is not None:
                        row["cal_min"], row["cal_max"] = rng
                        row["saturation"] = float(((vals < rng[0]) | (vals > rng[1])).mean())
        if not e.graph:
            owner_est[nid] = est
        rows.append(row)
    # Body nodes cannot be captured: they take the estimate of their outermost owner. An
    # owner none of whose outputs was measured (integer picks: torchvision's batched NMS in
    # an If, its box offsets computed in the branch) ranks its body first among the finite
    # estimates: at 0, a RetinaNet's plan kept 698 of 718 nodes where its NMS branch's 31
    # were enough.
    top = max((r["est_drop"] for r in rows if not r["graph"] and math.isfinite(r["est_drop"])),
              default=0.0) or 1.0
    for row in rows:
        if row["graph"] and row["est_drop"] == 0.0:
            graph, owner = row["graph"], None
            while graph:  # graph paths are "{owner node id}/{attribute}", nested ones chain
                owner = graph.rsplit("/", 1)[0]
                graph = idx.entries[owner].graph if owner in idx.entries else ""
            owner_node = idx.entries.get(owner) if owner else None
            if owner_node is not None:
                # (an output whose sides have other sizes compares nothing: numel 0)
                outs = [v.name for v in owner_node.node.outputs if v is not None
                        and v.name in stats and (stats[v.name].get("numel") or
                                                 stats[v.name].get("nf_cand"))]
                row["est_drop"] = max((_rel(stats[n], target) for n in outs), default=0.0)
                row["rel_err"] = row["est_drop"]
                if not outs and stats:
                    row["est_drop"], row["rel_err"] = top, math.nan
    df = pd.DataFrame(rows)
    return df


def rank(df: pd.DataFrame, target: str) -> pd.DataFrame:
    if not len(df):
        return pd.DataFrame(columns=SENSITIVITY_COLUMNS)
    key = df["est_drop"].astype(float)
    if target == "int8":
        # Outliers make per-tensor quantization coarse: break ties (and near-ties) with it.
        key = key + 1e-6 * df["outlier_ratio"].fillna(0.0).astype(float)
    df = df.assign(_key=key).sort_values(["_key", "_topo"], ascending=[False, True],
                                         kind="stable")
    # The exactly re-checked rows (top few) are ordered among themselves by measured drop.
    checked = df["drop"].notna()
    if checked.any():
        # Measured drops reorder the re-checked rows; drops within 5% of the fully converted
        # score are noise and keep the estimated order.
        top = df.loc[checked]
        base = float((top["score_alone"] + top["drop"]).max())
        big = top["drop"].astype(float) > 0.05 * abs(base) if math.isfinite(base) else (
            top["drop"].astype(float) > 0)
        top = top.assign(_big=big, _d=top["drop"].where(big, 0.0))
        top = top.sort_values(["_big", "_d", "_key"], ascending=False, kind="stable")
        df = pd.concat([top.drop(columns=["_big", "_d"]), df.loc[~checked]])
    df = df.drop(columns=["_key", "_topo"]).reset_index(drop=True)
    df.insert(0, "rank", range(1, len(df) + 1))
    return df[SENSITIVITY_COLUMNS]


def _group(df: pd.DataFrame, by: str) -> pd.DataFrame:
    if by == "node":
        return df
    if by not in ("op_type", "scope", "module"):
        raise unknown_name("sensitivity grouping", by, ["node", "op_type", "scope", "module"],
                           fix="by='node', by='op_type', by='scope' or by='module'.")
    g = df.groupby(by, sort=False, dropna=False)
    out = g.agg(n_nodes=("node_id", "size"), est_drop=("est_drop", "sum"),
                max_est_drop=("est_drop", "max"), overflow=("overflow", "any"),
                nonfinite=("nonfinite", "any"), outlier_ratio=("outlier_ratio", "max"),
                best_rank=("rank", "min"), node_ids=("node_id", list)).reset_index()
    out = out.sort_values(["est_drop", "best_rank"], ascending=[False, True], kind="stable")
    out = out.reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


def sensitivity(source: Any, target: str = "fp16", feeds: Any = None, *, by: str = "node",
                recheck: int = 5, calibration: Any = None, n_calibration: int = 8,
                metric: str | None = None, tolerance: Any = None, atol: float | None = None,
                rtol: float | None = None, dims: Mapping[str, int] | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None, max_bytes: int = 1 << 30,
                progress: Any = None, depth: int | None = None) -> pd.DataFrame:
    """Rank nodes by how much the output error drops when that node alone stays in the
    higher precision.

    The estimate (``est_drop``) comes from one layerwise capture of the reference and the fully
    converted model: the error a node adds beyond the worst error of its inputs, relative to
    its tensor's scale (int8: noise energy over signal energy); ``inf`` for an fp16 overflow
    (a reference value beyond 65504 in or out: ``overflow``) or NaN/inf the node creates
    (``nonfinite``). The top ``recheck`` rows are checked exactly: ``score_alone`` is the
    output score (<= 1 passes) with that node (group) alone kept, ``drop`` the fall from the
    fully converted score; they are ordered by ``drop``. Body nodes (If/Loop/Scan), which
    cannot be captured, take their owner's output error.

    Columns (``by="node"``): rank, node_id, op_type, graph, scope, est_drop, rel_err (the
    node's output error), overflow, nonfinite, score_alone, drop, tensor (its first output),
    ref_abs_max, and for int8: outlier_ratio (max|x| / 99th percentile of |x|), cal_min,
    cal_max (calibrated range), saturation (fraction of reference values outside it).
    ``by="module"`` groups by the PyTorch module each node comes from (cut to ``depth``
    levels; see :mod:`onnx_lab.core.source_map`).
    ``by="op_type"``/``"scope"``/``"module"``: rank, the key, n_nodes, est_drop (sum), max_est_drop,
    overflow, nonfinite, outlier_ratio, best_rank, node_ids, score_alone, drop.

    Example:
        >>> sensitivity("sample:convnet", "int8").head(3)
    """
    t_all = time.perf_counter()
    s, cands = start_search(source, target, feeds, calibration, n_calibration, dims, shapes,
                            metric, tolerance, atol, rtol)
    with Progress(progress, 2 + recheck, f"sensitivity {target}") as bar:
        s.bar = bar
        df, _ = rank_candidates(s, cands, recheck, max_bytes)
    if by == "module":
        mods = module_at(s.model, depth)
        # '?' for nodes of unknown source, as every other by-module view (NaN keys before)
        df = df.assign(module=df.node_id.map(lambda n: mods.get(n)).fillna("?"))
    if by != "node":
        grouped = _group(df, by)
        if recheck:
            grouped["score_alone"] = math.nan
            grouped["drop"] = math.nan
            base = s.rows[0]["score"]
            for i in range(min(recheck, len(grouped))):
                row = s.trial(grouped.loc[i, "node_ids"], f"recheck {by}")
                grouped.loc[i, "score_alone"] = row["score"]
                grouped.loc[i, "drop"] = _drop(base, row["score"])
        df = grouped
    s.conv.close()
    df.attrs["trials"] = pd.DataFrame(s.rows, columns=TRIAL_COLUMNS)
    df.attrs["seconds"] = time.perf_counter() - t_all
    return df


def _check_reachable(s: Search) -> None:
    """InputError when the float32 model itself misses the tolerance once onnxruntime
    optimizes it (fusions reorder float arithmetic): no precision plan can do better."""
    opt = trials.run_outputs(s.model, s.feed_list, s.out_names, opt_level="all")
    s.ref_optimized = opt
    per = [judge(s.tol, [r[n] for r in s.ref_outputs], [o[n] for o in opt]) for n in s.out_names]
    worst = max(per, key=lambda m: m["score"])
    failing = [n for n, m in zip(s.out_names, per) if not m["passed"]]
    below = below_selections(s.model)
    if failing and all(n in below for n in failing):
        # a fusion's reordered rounding can flip a near-tie of a TopK or an NMS, whose picks
        # then differ by as much as the data: no bound on what a plan can reach (the
        # unoptimized trials judge those flips by their inputs)
        s.notes.append(
            f"the float32 model's output(s) {', '.join(map(repr, failing))} change when "
            "onnxruntime optimizes it, downstream of selections (TopK, NMS, ArgMax, "
            "comparisons) whose near-ties a reordered rounding flips: the trials are judged "
            "without optimizations, and the plan is not confirmed with them")
        s.flips_when_optimized = True
        return
    if not worst["passed"]:
        raise ToleranceUnreachable(
            f"The float32 model itself misses the tolerance ({s.tol.describe()}): run with "
            f"onnxruntime's optimizations it differs from its unoptimized run by max_abs "
            f"{worst['max_abs']:.3g} (score {worst['score']:.3g}); no precision plan can meet "
            "it.", fix=f"Loosen the tolerance (e.g. atol >= {max(worst['max_abs'], 1e-7) * 10:.2g}"
            ", rtol >= 1e-4), or use metric='sqnr'/'cosine'.")


def below_selections(model: LabModel) -> set[str]:
    """Main-graph tensors downstream of a selection that picks elements (a TopK, an NMS,
    an ArgMax, a NonZero; an If holding one): a merged decoder's If, which holds only the
    comparisons of its masks, is none (everything it computes is below it)."""
    return downstream(model, picking_nodes(model))


def overflows(s: Search, stats: dict[str, dict], cands: list[str]) -> None:
    """fp16: the producer and the readers of every tensor beyond float16's range must be
    kept (``s.required``)."""
    if s.target != "fp16":
        return
    cset = set(cands)
    idx = s.model.index
    for t, st in stats.items():
        if _beyond_fp16(st) and t not in s.absorbed:
            for nid in [idx.producer.get(t), *idx.consumers.get(t, [])]:
                if nid in cset:
                    s.required.setdefault(nid, t)


def absorbed_overflows(s: Search, full: LabModel) -> None:
    """fp16: drop the overflow constraints (``s.required``) the full conversion ``full``
    absorbs, in place, with a note.

    Each tensor beyond float16's range is fed to the rest of ``full`` as a float16 device
    stores it (its captured values, inf of the reference's sign wherever the reference
    passes 65504: onnxruntime's CPU may compute it in float32 and show no inf), every such
    tensor at once, as :func:`~onnx_lab.numerics._absorbed.mark_absorbed` judges compare's
    rows. Outputs within the search's tolerance on every sample: the model's own arithmetic
    absorbs the overflow on any device, and keeping its nodes in float32 buys nothing. A
    scikit-learn GaussianProcessRegressor's squared distances reach 7e8 and ``Exp(-inf)``
    gives the 0 ``Exp(-7e8)`` gives: its plan kept 4 nodes in float32 while the full
    conversion passes compare. Unchanged when a tensor is an output, not in the main graph
    of ``full``, or the run fails (the constraints stand)."""
    names = sorted(set(s.required.values()))
    if not names or not s.ref_outputs:
        return
    idx = full.index
    outs = list(s.out_names)
    if set(names) & set(outs) or any(n not in idx.producer or idx.entries[idx.producer[n]].graph
                                     for n in names):
        return
    try:
        refs = s.ref_values if s.ref_values and all(n in s.ref_values[0] for n in names) \
            else trials.run_outputs(s.model, s.feed_list, names, original=True)
        cands = trials.run_outputs(full, s.feed_list, names, converted=CONVERTED.get(s.target))
        ins = reached_inputs(full, names, outs)
        got = []
        for i, f in enumerate(s.feed_list):
            fed = {}
            for n in names:
                r = np.asarray(refs[i][n])
                c = np.array(cands[i][n])
                if c.dtype.kind != "f" or r.shape != c.shape:
                    return
                with np.errstate(invalid="ignore"):
                    beyond = np.isfinite(r) & (np.abs(r) > FP16_MAX)
                c[beyond] = np.copysign(np.inf, r[beyond])
                fed[n] = c
            got.append(run_cut(full, {**{n: f[n] for n in ins if n in f}, **fed}, outs))
    except (LabError, ValueError, KeyError):
        return
    per = {o: judge(s.tol, [r[o] for r in s.ref_outputs], [g[o] for g in got]) for o in outs}
    if not all(m["passed"] for m in per.values()):
        return
    s.absorbed |= set(names)
    nodes = sorted(s.required)
    s.required.clear()
    worst = max(float(m["max_abs"]) for m in per.values())
    s.notes.append(
        f"fp16 overflow absorbed: {len(names)} tensor(s) beyond 65504 ({', '.join(map(repr, names[:3]))}"
        + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        + f"), fed to the full conversion as inf, give outputs within the tolerance (max_abs "
        f"{worst:.3g}) on the {len(got)} sample(s) searched: the model's own arithmetic "
        f"absorbs them there, so {len(nodes)} node(s) that produce or read them are not kept "
        "(a reduction over a row that overflows whole on other inputs is not covered: search "
        "on the inputs you deploy on)")


def _beyond_fp16(st: dict) -> bool:
    """A float tensor with a computed reference value beyond float16's range. Integer
    tensors are never stored in float16 (an int64 Slice end of INT64_MAX, as rotate_half
    writes, is not an overflow), nor is a float type's own extreme one
    (:func:`_computed_max`)."""
    return st.get("floating", True) and st.get("max_computed", st["max_ref"]) > FP16_MAX


def _computed_max(values: Sequence[Any]) -> float:
    """The largest finite magnitude of the float arrays ``values``, leaving out their type's
    own extreme (float32's ±3.4028235e38).

    That extreme is how exporters write minus infinity into an attention mask (torch.export's
    scaled_dot_product_attention: ``Where(mask, 0, -3.4028235e38)``, then an Add to the
    scores, whose sum rounds back to it), and no computed quantity lands on it. The float16
    conversion writes it as float16's extreme, -65504, the fill transformers itself uses in a
    float16 model (``torch.finfo(torch.float16).min``); the Softmax gives the same zeros. Kept
    as an overflow, it held every layer's mask Where, score Add and Softmax in float32 for
    nothing (a torch.export Llama: 5 nodes, the outputs of either plan within 0.00097 of the
    reference). A value beyond 65504 that is not the fill (a sum of squares, the fill halved)
    is still one."""
    top = 0.0
    for v in values:
        a = _float_array(v)
        if a is None or a.dtype.kind != "f" or not a.size:
            continue
        a = np.abs(a[np.isfinite(a)])
        a = a[a != np.finfo(a.dtype).max]
        if a.size:
            top = max(top, float(a.max()))
    return top


def _drop(base: float, alone: float) -> float:
    if math.isinf(base) and math.isinf(alone):
        return 0.0
    return float(base - alone)


def rank_candidates(s: Search, cands: list[str], recheck: int, max_bytes: int,
                 full: LabModel | None = None) -> tuple[pd.DataFrame, LabModel]:
    """Layerwise capture + estimate + exact re-check; fills s.ref_outputs and trial 0.

    When the full conversion fails to run (its trial's note says why), nothing of it can be
    captured: the estimates are 0 but for the node onnxruntime named (``inf``, first in the
    order), and the search keeps nodes until a candidate runs."""
    stats: dict[str, dict] = {}
    if not s.rows or not s.failed_to_run(s.rows[0]):
        try:
            if full is None:
                full = s.conv.convert(s.key(()))
            stats, ref_out = layerwise(s.model, full, s.feed_list, s.target, max_bytes,
                                        keep=s.ref_values)
            s.ref_outputs = ref_out
        except LabError:  # the candidate does not convert or run: its trial says why
            full, stats = None, {}
    if not s.ref_outputs:
        s.ref_outputs = trials.run_outputs(s.model, s.feed_list, s.out_names, original=True)
    s.ref_values = None
    if s.bar is not None:
        s.bar.step("layerwise capture")
    overflows(s, stats, cands)
    if not s.rows:
        s.trial((), "full", model=full, keep_model=True)
    if not s.rows[0]["passed"]:
        _check_reachable(s)
    df = estimate(s.model, cands, stats, s.target, s.conv.calibration)
    if s.broken_at is not None and len(df):
        df.loc[df["node_id"] == s.broken_at, "est_drop"] = math.inf
    df = rank(df, s.target)
    base = s.rows[0]["score"]
    if recheck and not s.rows[0]["passed"]:
        df = df.assign(_topo=0)
        for i in range(min(recheck, len(df))):
            if s.stopped():
                break
            row = s.trial([df.loc[i, "node_id"]], "recheck")
            df.loc[i, "score_alone"] = row["score"]
            df.loc[i, "drop"] = _drop(base, row["score"])
        df = rank(df.drop(columns=["rank"]), s.target)
    return df, full
