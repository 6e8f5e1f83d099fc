"""The result of :func:`onnx_lab.numerics.compare.compare`: :class:`Comparison`, its tables,
its values recaptured on demand and its views. Importable from
:mod:`onnx_lab.numerics.compare`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.branches import unexercised
from onnx_lab.core.source import Resolved
from onnx_lab.core.source_map import group_by_module, module_at
from onnx_lab.errors import InputError, unknown_name
from onnx_lab.numerics._absorbed import absorbed
from onnx_lab.numerics._compare_runs import _run_once
from onnx_lab.numerics._divergence import _nonfinite_rows
from onnx_lab.numerics.metrics import (
    PRESETS,
)
from onnx_lab.numerics.repro import write_repro


# ---------------------------------------------------------------------------- result
class Comparison:
    """The result of :func:`compare`.

    Attributes:
        outputs: one row per graph output — tensor, cand_tensor and the metric columns of
            :data:`onnx_lab.numerics.metrics.METRIC_COLUMNS` (shape, cand_shape, dtype,
            cand_dtype, max_abs, mean_abs, max_rel, cosine, sqnr_db, passed, n_fail, numel,
            nan_ref, nan_cand, inf_ref, inf_cand, note).
        layers: one row per compared tensor in the reference's topological order — tensor,
            node_id, op_type, depth, cand_tensor, cand_node_id, match, and the metric columns.
        alignment: every reference tensor with its match or the reason it has none (see
            :func:`onnx_lab.numerics.align.align`).
        passed: the final outputs are within tolerance, and no compared tensor holds NaN or
            inf values the reference does not (unless the candidate absorbs them: fed them
            as they are, its outputs stay within tolerance; the row's note says so).
        first_divergence: None, or {tensor, node_id, op_type, max_abs, reaches_outputs,
            cand_node_id, cause, message}: the first tensor out of tolerance whose producer's
            inputs are all within tolerance. ``cause`` is ``weights`` (a weight differs: a
            Constant node's divergence is reported on the node that consumes it, with
            ``constant``, ``constant_tensor`` and ``constant_max_abs``), ``computation`` (its
            inputs agree, its output does not) or ``inputs`` (an input has no counterpart, so
            it may only receive different inputs; ``upstream``: the reference nodes where the
            uncompared values start, named in the message with the alignment's reason).
            ``overflow`` ({dtype, inf_cand, max_ref}) when the candidate's float16 or
            bfloat16 output there holds infinities the reference does not, which the
            message names. With ``compare(confirm=True)``:
            ``confirmed``, ``local_max_abs``, ``local_passed`` and ``confirm_note`` (see
            :func:`onnx_lab.numerics.confirm.local_check`).
        first_nonfinite: None, or {tensor, node_id, op_type, nan_cand, inf_cand, absorbed}:
            the first tensor where the candidate holds NaN/inf the reference does not
            (property).
        atol, rtol: the numbers of the float32 output rule used (the preset's or yours).
        preset: the tolerance preset (``"by dtype"`` when each tensor's dtype chose).
        unexercised: the If branches no sample ran (property; see :func:`compare`'s feeds).
        selections: the selections (TopK, ArgMax, NMS, NonZero, comparisons) that picked
            otherwise on near-tied inputs, one dict each (node_id, op_type, tensor, differ,
            total, gap, allowed, inputs_max_abs, downstream, message): the tensors
            downstream of one are not compared (``passed`` True, the reason in ``note``); see
            :mod:`onnx_lab.numerics.selection`.
        selection_note: one sentence saying so, or None.
        feeds_notes: one sentence per seeded branch sample left out and why (a candidate
            whose inputs were fixed to the first sample's sizes cannot take the other
            branch's empty past); the branch is then also in ``unexercised``. For a KV-cache
            decoder without a cache switch, which past lengths were judged (a decode and a
            prefill step) or why only one; and when some samples fail and others pass, the
            samples that fail.
    """

    def __init__(self, *, outputs: pd.DataFrame, layers: pd.DataFrame, alignment: pd.DataFrame,
                 passed: bool, first_divergence: dict | None, atol: float, rtol: float,
                 preset: str = "by dtype",
                 reference: Resolved | None, candidate: Resolved, feeds: list,
                 providers: tuple,
                 reference_values: dict | None, output_values: dict,
                 selections: list[dict] | None = None, selection_note: str | None = None,
                 feeds_notes: Sequence[str] = (), untaken: Sequence[str] = ()) -> None:
        self.outputs = outputs
        self.layers = layers
        self.alignment = alignment
        self.passed = passed
        self.first_divergence = first_divergence
        self.atol = atol
        self.rtol = rtol
        self.preset = preset
        self.reference = reference
        self.candidate = candidate
        self.feeds = feeds
        self.providers = providers
        self.selections = list(selections or [])
        self.selection_note = selection_note
        self.feeds_notes = list(feeds_notes)
        self._untaken = list(untaken)
        self._ref_values = reference_values
        self._output_values = output_values
        # The last recaptured pair: hist() and scatter() of the same layer (what the drift
        # debugger shows on a click) share one capture instead of two sessions per model.
        self._last_values: tuple[tuple, tuple[np.ndarray, np.ndarray]] | None = None

    # -- data
    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``onnx-lab compare --json``: passed, outputs, layers, first_divergence,
        unexercised, feeds_notes, selections."""
        def records(df: pd.DataFrame) -> list[dict]:
            out = []
            for rec in df.to_dict(orient="records"):
                out.append({k: (None if isinstance(v, float) and math.isnan(v) else v)
                            for k, v in rec.items()})
            return out

        return {"passed": self.passed, "atol": self.atol, "rtol": self.rtol,
                "preset": self.preset,
                "outputs": records(self.outputs), "layers": records(self.layers),
                "first_divergence": self.first_divergence, "unexercised": self.unexercised,
                "feeds_notes": self.feeds_notes, "selections": self.selections}

    def _pair(self, tensor: str) -> tuple[str, str]:
        for df in (self.outputs, self.layers):
            for col in ("tensor", "cand_tensor"):
                hit = df.loc[df[col] == tensor]
                if len(hit):
                    return hit["tensor"].iloc[0], hit["cand_tensor"].iloc[0]
        raise unknown_name("compared tensor", tensor,
                           list(self.layers["tensor"]) + list(self.outputs["tensor"]),
                           fix="Use a tensor of comparison.layers (aligned tensors only).")

    def values(self, tensor: str, sample: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(reference, candidate) arrays of one compared tensor for one sample (recaptured)."""
        ref_name, cand_name = self._pair(tensor)
        if not 0 <= sample < len(self.feeds):
            raise InputError(f"sample {sample} does not exist ({len(self.feeds)} samples).",
                             fix=f"Use 0..{len(self.feeds) - 1}.")
        kept = self._output_values.get((ref_name, cand_name))
        if kept is not None and len(kept[1]) > sample:
            return kept[0][min(sample, len(kept[0]) - 1)], kept[1][sample]
        key = (ref_name, cand_name, sample)
        if self._last_values is not None and self._last_values[0] == key:
            return self._last_values[1]
        feeds = self.feeds[sample]
        if self.reference is not None:
            ref = _run_once(self.reference.model, feeds, ref_name, self.providers[0],
                            "reference")
        else:
            ref = self._ref_values[ref_name]  # type: ignore[index]
        cand = _run_once(self.candidate.model, feeds, cand_name, self.providers[1], "candidate")
        self._last_values = (key, (ref, cand))
        return ref, cand

    # -- views (drawn by onnx_lab.render.results, reached through onnx_lab._display)
    def plot(self):
        """Error per layer along depth (log scale), tolerance line, divergence marked."""
        return _display.draw(self, "plot")

    def hist(self, tensor: str, sample: int = 0, bins: int = 100):
        """Histograms of reference and candidate values and of their difference."""
        return _display.draw(self, "hist", tensor, sample, bins=bins)

    def scatter(self, tensor: str, sample: int = 0, max_points: int = 50_000):
        """Candidate vs reference values of one tensor (subsampled), with the y = x line."""
        return _display.draw(self, "scatter", tensor, sample, max_points=max_points)

    def error_series(self, column: str = "max_abs") -> pd.Series:
        """``column`` of :attr:`layers` keyed by the reference node id (for overlays)."""
        df = self.layers.dropna(subset=["node_id"])
        return pd.Series(df[column].to_numpy(), index=df["node_id"].to_numpy(),
                         name=column).groupby(level=0).max()

    def render(self, column: str = "max_abs", **kw: Any):
        """The reference graph (the candidate's for a dict reference) coloured by error.

        Centred on the first divergence when there is one; keywords go to
        :func:`onnx_lab.render.render_model`.
        """
        return _display.draw(self, "render", column, **kw)

    def repro(self, folder: Any, divergence: dict[str, Any] | None = None, *,
              overwrite: bool = False):
        """Write a minimal repro of the first divergence (or ``divergence``) into ``folder``:
        see :func:`onnx_lab.numerics.repro.write_repro`."""
        return write_repro(self, folder, divergence, overwrite=overwrite)

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        """The layerwise error per PyTorch module of the reference (see
        :mod:`onnx_lab.core.source_map`), in model order.

        Columns: module ('?' for nodes of unknown source), module_class, n_nodes (compared
        tensors), first_topo, max_abs, max_rel, min_cosine, n_failed (tensors out of
        tolerance), first_divergence (bool: the module holding the first divergence).

        Example:
            >>> cmp.by_module(depth=2).query("n_failed > 0")
        """
        model = (self.reference or self.candidate).model
        df = self.layers.loc[self.layers.node_id.notna()].assign(
            failed=lambda d: ~d.passed.astype(bool))
        out = group_by_module(df, model, {"max_abs": "max", "max_rel": "max",
                                          "min_cosine": ("cosine", "min"),
                                          "n_failed": ("failed", "sum")}, depth=depth)
        first = self.first_divergent_module(depth)
        out["first_divergence"] = out.module.eq(first) if first is not None else False
        return out

    def first_divergent_module(self, depth: int | None = None) -> str | None:
        """The PyTorch module (cut to ``depth`` levels) of the first divergence: None when
        nothing diverged or its node's source is unknown."""
        div = self.first_divergence
        if not div or not div.get("node_id"):
            return None
        return module_at((self.reference or self.candidate).model, depth).get(div["node_id"])

    @property
    def unexercised(self) -> list[str]:
        """The If branches a boolean input decides (optimum's ``use_cache_branch``) that no
        sample of :attr:`feeds` ran: never compared (``"use_cache_branch=False
        (optimum::if/else_branch)"``). Seeded feeds run them all; given feeds may not. Also
        the branches of Ifs whose condition the model computes that differ from the
        reference's and that no sample took."""
        return unexercised((self.reference or self.candidate).model, self.feeds) + self._untaken

    @property
    def first_nonfinite(self) -> dict[str, Any] | None:
        """The first compared tensor (topological order) where the candidate holds more NaN or
        inf values than the reference: where an fp16 overflow starts.

        With tight tolerances ``first_divergence`` names the first rounding difference, many
        layers before the overflow that turns the outputs into NaN; this names the overflow.

        Returns:
            None, or {tensor, node_id, op_type, nan_cand, inf_cand, absorbed}: ``absorbed``
            True when the candidate, fed its non-finite values as they are, still gives
            outputs within tolerance (``Exp(-inf)`` is 0): they do not fail the comparison.

        Example:
            >>> onnx_lab.compare(lab, onnx_lab.to_fp16(lab)).first_nonfinite
        """
        hit = _nonfinite_rows(self.layers)
        if not len(hit):
            return None
        row = hit.iloc[0]
        return {"tensor": row["tensor"], "node_id": row["node_id"], "op_type": row["op_type"],
                "nan_cand": int(row["nan_cand"]), "inf_cand": int(row["inf_cand"]),
                "absorbed": absorbed(row)}

    def summary_text(self) -> str:
        """A few lines for terminals."""
        n_fail = int((~self.layers["passed"].astype(bool)).sum()) if len(self.layers) else 0
        p = PRESETS.get(self.preset)
        rules = (f"outputs {p.outputs.describe()}, intermediates {p.intermediates.describe()}"
                 if p is not None and p.outputs.kind == "sqnr" else
                 f"atol={self.atol:g}, rtol={self.rtol:g}; outputs element-wise, intermediates "
                 "against their own scale")
        out_fail = int((~self.outputs["passed"].astype(bool)).sum()) if len(self.outputs) \
            else 0
        # (a failing output whose layers were not compared: "FAILED ... 0 out of tolerance")
        failing = f" ({out_fail} failing)" if out_fail else ""
        lines = [f"{'PASSED' if self.passed else 'FAILED'} (preset {self.preset}, {rules}): "
                 f"{len(self.outputs)} outputs{failing}, {len(self.layers)} layers compared, "
                 f"{n_fail} out of tolerance"]
        for r in self.outputs.itertuples(index=False):
            # (a default preset judges what is computed through its cause, the rest by dtype)
            other = getattr(r, "preset", None)
            other = f" [judged by {other}]" if isinstance(other, str) and other != self.preset \
                and self.preset != "by dtype" and other != "exact" else ""
            lines.append(f"  output {r.tensor}: max_abs={r.max_abs:.3g} cosine={r.cosine:.6f} "
                         f"{'ok' if r.passed else 'FAIL'}{other}"
                         + (f" ({r.note})" if r.note else ""))
        d = self.first_divergence
        if d is not None:
            # (with every output within tolerance, the outputs may still have moved: "does
            # not reach the outputs" read as if they had not)
            reach = "reaches the failing outputs" if d["reaches_outputs"] else \
                "does not reach the failing outputs" if out_fail else \
                "the outputs stay within tolerance"
            lines.append(f"first divergence: {d['tensor']} (node {d['node_id']}, {d['op_type']}),"
                         f" max_abs={d['max_abs']:.3g}, {reach}; cause: {d.get('cause', '?')}")
            if d.get("message"):
                lines.append(f"  {d['message']}")
            if d.get("confirm_note"):
                lines.append(f"  {d['confirm_note']}")
        elif not self.passed and not len(self.layers):
            # the outputs alone were compared: where the models part was not searched
            lines.append("first divergence not searched: only the outputs were compared "
                         "(compare(..., layerwise=True), onnx-lab compare --layerwise)")
        elif not self.passed:
            lines.append("no first divergence: no failing tensor whose inputs all agree (see "
                         "c.layers and c.alignment for the tensors without a counterpart)")
        else:
            lines.append("no divergence")
        f = self.first_nonfinite
        if f is not None:
            lines.append(f"first non-finite values: {f['tensor']} (node {f['node_id']}, "
                         f"{f['op_type']}), {f['inf_cand']} inf and {f['nan_cand']} NaN in the "
                         "candidate only"
                         + ("; absorbed by the candidate: fed them as they are, its outputs stay "
                            "within tolerance" if f.get("absorbed") else
                            "; they fail the comparison though the outputs agree here: fed "
                            "these values as they are, the candidate's outputs leave the "
                            "tolerance or could not be checked (onnxruntime's CPU computes many "
                            "float16 ops in float32 past an overflow; float16 arithmetic, a "
                            "GPU's, does not)"
                            if not self.passed and not out_fail else ""))
        if self.selection_note:
            lines.append(self.selection_note)
        missed = self.unexercised
        if missed:
            lines.append("not exercised by the feeds (never compared): " + "; ".join(missed))
        lines += self.feeds_notes
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<onnx_lab.Comparison {self.summary_text().splitlines()[0]}>"

    def to_html(self, max_rows: int = 30) -> str:
        """HTML report: verdict, divergence, outputs, the worst layers and the error plot."""
        return _display.draw(self, "html", max_rows=max_rows)

    def _repr_html_(self) -> str:
        return _display.notebook_html(self.to_html())
