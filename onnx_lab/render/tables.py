"""HTML formatting of tables and summaries (on copies; the data stays untouched)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnx_lab._pandas import pd
from onnx_lab.core.units import format_bytes
from onnx_lab.render._html import esc_text

__all__ = ["summary_html", "frame_html", "format_bytes", "changes_frame"]


def _shape(shape: Any) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def frame_html(df: pd.DataFrame, *, max_rows: int = 50, page: int = 0,
               caption: str | None = None) -> str:
    """One page of a DataFrame as HTML (never a dump of thousands of rows)."""
    total = len(df)
    start = page * max_rows
    view = df.iloc[start:start + max_rows].copy()
    note = ""
    if total > max_rows:
        note = (f"<div style='color:#666;font-size:90%'>rows {start + 1:d}–"
                f"{min(start + max_rows, total):d} of {total:d}</div>")
    cap = f"<div style='font-weight:bold'>{esc_text(caption)}</div>" if caption else ""
    return cap + view.to_html(index=False, escape=True, border=0, classes="onnx-lab-table") + note


def summary_html(summary: Mapping[str, Any]) -> str:
    """HTML view of :class:`onnx_lab.analysis.summary.Summary`."""
    s = summary
    rows = [
        ("IR version", s["ir_version"]),
        ("Opsets", ", ".join(f"{d or 'ai.onnx'}: {v}" for d, v in s["opsets"].items())),
        ("Producer", s["producer"] or "—"),
        ("Nodes", f"{s['num_nodes']} ({s['num_nodes_main']} in the main graph, "
                  f"{s['subgraphs']} subgraphs)"),
        ("Weights", f"{s['num_initializers']} initializers, {s['num_constant_tensors']} "
                    f"Constant tensors, {s['num_params']:,} params, "
                    f"{format_bytes(s['param_bytes'])}"
                    + (" (external data)" if s["external_data"] else "")
                    + (f"; plus {s['constant_computed_tensors']} tensors "
                       f"({format_bytes(s['constant_computed_bytes'])}) computed from "
                       "constants at run time (lab.apply('fold_constants') stores them)"
                       if s.get("constant_computed_bytes") else "")),
        ("Dynamic dims", ", ".join(f"{k} ← {', '.join(v)}" for k, v in s["dynamic_dims"].items())
         or "none"),
    ]
    if s.get("derived_dims"):
        rows.append(("Derived dims", "; ".join(
            f"{k} = {d['value']} ({d['source']})" for k, d in s["derived_dims"].items())))
    body = "".join(f"<tr><th style='text-align:left'>{esc_text(k)}</th><td>{esc_text(v)}</td></tr>"
                   for k, v in rows)
    io = "".join(
        f"<tr><td>{kind}</td><td>{esc_text(x['name'])}</td><td>{esc_text(x['dtype'])}</td>"
        f"<td>{esc_text(_shape(x['shape']))}</td></tr>"
        for kind in ("input", "output") for x in s[kind + "s"])
    ops = ", ".join(f"{esc_text(k)}×{esc_text(v)}" for k, v in list(s["op_counts"].items())[:20])
    fams = ", ".join(f"{esc_text(k)}: {esc_text(v)}" for k, v in s["op_families"].items())
    return (
        "<div class='onnx-lab-summary'>"
        f"<table>{body}</table>"
        f"<table><tr><th>kind</th><th>name</th><th>dtype</th><th>shape</th></tr>{io}</table>"
        f"<p><b>Op families:</b> {fams}</p><p><b>Ops:</b> {ops}</p></div>"
    )


def changes_frame(result: Any, before: Any = None) -> pd.DataFrame:
    """What one pass result changed, one row per node: for display of a step.

    Columns: ``node_id``, ``change`` ('fused' when made from several nodes, 'rewritten' from
    one, 'new' from none known, 'removed'), ``op_type`` (of the new node; of the removed one
    when ``before``, the step's input LabModel, is given), ``from`` (the node ids it came from).
    Reads ``result.provenance`` and ``result.removed`` (whole-model tools such as onnxsim and
    the ORT levels fill them too).
    """
    rows: list[dict[str, Any]] = []
    after = getattr(result, "model", None)
    entries = getattr(getattr(after, "index", None), "entries", {}) or {}
    old = getattr(getattr(before, "index", None), "entries", {}) or {}
    prov = dict(getattr(result, "provenance", None) or {})
    for nid, src in prov.items():
        src = list(src or [])
        if src == [nid]:
            continue  # an attribute changed in place: listed as rewritten below only if fused
        kind = "fused" if len(src) > 1 else "rewritten" if src else "new"
        e = entries.get(nid)
        rows.append({"node_id": nid, "change": kind,
                     "op_type": e.node.op_type if e is not None else "", "from": src})
    made_from = {s for src in prov.values() for s in (src or [])}
    for nid in getattr(result, "removed", None) or []:
        if nid in made_from:
            continue  # shown as the source of a fused/rewritten node
        e = old.get(nid)
        rows.append({"node_id": nid, "change": "removed",
                     "op_type": e.node.op_type if e is not None else "", "from": []})
    df = pd.DataFrame(rows, columns=["node_id", "change", "op_type", "from"])
    order = {"fused": 0, "rewritten": 1, "new": 2, "removed": 3}
    return df.sort_values("change", key=lambda s: s.map(order), kind="stable").reset_index(
        drop=True)
