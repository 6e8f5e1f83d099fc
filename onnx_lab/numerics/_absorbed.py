"""NaN or inf the candidate holds where the reference is finite, and that its own computation
absorbs (``mark_absorbed``). Importable from :mod:`onnx_lab.numerics.compare`.

A comparison fails on such values even when its outputs agree: on onnxruntime's CPU a float16
model computes many ops in float32 between Casts it inserts, so an overflow that an exposed
float16 tensor shows may not reach the outputs on CPU while it does where float16 is computed
(a GPU). Some overflows are absorbed by the model's own arithmetic, on every device: a
scikit-learn GaussianProcessRegressor's squared distances beyond 65504 are inf in float16,
``Exp(-inf)`` is 0 as ``Exp(-7e8)`` is, and the outputs are the same (max_abs 0 in fresh
onnxruntime sessions). Fed those values as they are (every non-finite tensor a given input of
the rest of the candidate), the candidate's outputs still within tolerance tell the two apart:
the CPU's float32 absorption gives the overflow back (``big * 1e-3`` is inf again).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.subgraph import reached_inputs
from onnx_lab.errors import LabError
from onnx_lab.numerics._compare_runs import _run, _session
from onnx_lab.numerics._divergence import _nonfinite_rows
from onnx_lab.numerics.metrics import MetricAccumulator
from onnx_lab.numerics.selection import flipped, run_cut

#: What a row's note says of non-finite values the candidate absorbs (``absorbed``).
ABSORBED_NOTE = ("absorbed by the candidate: fed these values as they are, its outputs stay "
                 "within tolerance")


# the mark is the note's last part, as mark_absorbed writes it: a model string a note quotes
# (a tensor name holding the sentence) is no mark (it sits in an earlier part, or ends in the
# quote repr gives it)
_MARK = re.compile("(?:^|; )" + re.escape(ABSORBED_NOTE) + r" \(max_abs [0-9a-z.+-]+\)$")


def absorbed(row: Mapping[str, Any]) -> bool:
    """Whether a layers row holds non-finite values the candidate's computation absorbs."""
    return bool(_MARK.search(str(row.get("note") or "")))


def _nonfinite(value: Any) -> bool:
    a = np.asarray(value)
    return a.dtype.kind in "fc" and not np.isfinite(a).all()


def mark_absorbed(cand: LabModel, layers: pd.DataFrame, out_pairs: Sequence[tuple[str, str]],
                  kept: Mapping[tuple[str, str], tuple[list, list]], feed_list: list,
                  providers: list[str],
                  accumulator: Callable[[tuple[str, str], Any], MetricAccumulator]
                  ) -> pd.DataFrame:
    """``layers`` with its non-finite rows (more NaN or inf in the candidate than in the
    reference, not below a flipped near-tie) noted as absorbed when the candidate, fed those
    values as they are in place of the nodes that made them, gives outputs within tolerance
    of the reference's (``kept``: the outputs of each sample) on every sample that shows
    them (an overflow may reach only some samples). Unchanged when one does not, when no run
    shows them, when a non-finite tensor is a graph output, or when the run fails.

    ``accumulator(pair, reference value)`` gives a fresh accumulator under the rule that
    judged an output pair.
    """
    rows = [r for r in _nonfinite_rows(layers).to_dict(orient="records") if not flipped(r)]
    if not rows or not out_pairs:
        return layers
    outs = [c for _, c in out_pairs]
    names = list(dict.fromkeys(r["cand_tensor"] for r in rows))
    idx = cand.index
    if set(names) & set(outs) or any(n not in idx.producer or idx.entries[idx.producer[n]].graph
                                     for n in names):
        return layers  # an output itself, or a value inside a body: nothing to feed
    accs: dict[tuple[str, str], MetricAccumulator] = {}
    worst = 0.0
    try:
        sess = _session(cand, names, providers, "candidate")
        ins = reached_inputs(cand, names, outs)
        for s, f in enumerate(feed_list):
            values = _run(sess, f, names, "candidate")
            if not any(_nonfinite(values[n]) for n in names):
                # this sample does not show them (an overflow on some samples only): its
                # outputs were judged already
                continue
            got = run_cut(cand, {**{n: f[n] for n in ins if n in f}, **values}, outs,
                          providers=providers)
            for p in out_pairs:
                ref = kept[p][0][s]
                if p not in accs:
                    accs[p] = accumulator(p, ref)
                accs[p].add(ref, got[p[1]])
    except (LabError, ValueError, KeyError):
        return layers
    if not accs:
        return layers  # no run shows them: nothing to judge
    for acc in accs.values():
        res = acc.result()
        if not res["passed"]:
            return layers
        worst = max(worst, float(res["max_abs"]))
    note = f"{ABSORBED_NOTE} (max_abs {worst:.3g})"
    out = layers.copy()
    mark = out["cand_tensor"].isin(names) & out.index.isin(
        _nonfinite_rows(layers).index)
    out.loc[mark, "note"] = [f"{n}; {note}" if isinstance(n, str) and n else note
                             for n in out.loc[mark, "note"]]
    return out
