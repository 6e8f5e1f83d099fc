"""The HTML index of a model-zoo audit: one self-contained page (inline style and a few lines
of script to sort by a column), one row per model, linked to the model's report where one was
written, failures in red with their error, and the regression gate's findings on top."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from onnx_lab._pandas import pd
from onnx_lab.core.units import format_bytes
from onnx_lab.render._html import (
    csp_meta,
    esc_attr,
    esc_text,
    inline_script,
    inline_style,
    safe_url,
)
from onnx_lab.render.results import _si

__all__ = ["audit_index_html"]

_STATUS_COLOURS = {"ok": "#1a7f37", "error": "#cf222e", "timeout": "#bc4c00",
                   "memory": "#8250df", "crashed": "#cf222e"}

_STYLE = """
body{font:14px system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1f2328}
h1{font-size:20px;margin:0 0 4px} .sub{color:#59636e;margin-bottom:16px}
table{border-collapse:collapse;width:100%} th,td{padding:4px 8px;border-bottom:1px solid #d1d9e0;
text-align:left;vertical-align:top} th{background:#f6f8fa;cursor:pointer;font-size:13px;
position:sticky;top:0} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.err{color:#cf222e;min-width:18em;max-width:36em;font-size:12px;overflow-wrap:anywhere} .st{font-weight:600}
.gate{border:1px solid #d1d9e0;border-radius:6px;padding:8px 12px;margin:0 0 16px}
.gate.bad{border-color:#cf222e;background:#fff5f5} .gate.good{background:#f0fff4}
"""

_SCRIPT = """
document.querySelectorAll('table.audit th').forEach((th, i) => th.onclick = () => {
  const body = th.closest('table').tBodies[0], rows = [...body.rows];
  const key = r => { const c = r.cells[i]; const v = c.dataset.v ?? c.textContent;
                     const n = parseFloat(v); return isNaN(n) ? v.toLowerCase() : n; };
  const dir = th.dataset.dir = th.dataset.dir === 'asc' ? 'desc' : 'asc';
  rows.sort((a, b) => { const x = key(a), y = key(b);
    const c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
    return dir === 'asc' ? c : -c; });
  rows.forEach(r => body.appendChild(r));
});
"""


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))


def _num(v: Any, fmt: str = "{:,}") -> tuple[str, str]:
    """(text, sort value) of a number; blank when missing."""
    if _missing(v):
        return "", ""
    return fmt.format(v), str(v)


def _cells_html(r: Mapping[str, Any], link: str | None) -> str:
    """The ``<td>`` of each column of one row (its html, css class and sort value)."""
    name = esc_text(r["model"])
    model = f"<a href='{safe_url(link, relative=True)}'>{name}</a>" if link else name
    # the sizes the figures were measured at (dims and shapes given, the audit's batch)
    sizes = [str(r[k]) for k in ("dims_given", "shapes_given") if not _missing(r.get(k))]
    if sizes:
        model += f"<br><small class='at'>at {esc_text('; '.join(sizes))}</small>"
    status = str(r["status"])
    colour = _STATUS_COLOURS.get(status, "#59636e")
    err = ""
    if not _missing(r.get("error_type")):
        stage = "" if _missing(r.get("error_stage")) else f"[{r['error_stage']}] "
        msg = str(r.get("error") or "")
        err = esc_text(f"{stage}{r['error_type']}: {msg[:400]}{'…' if len(msg) > 400 else ''}")
    fb = r.get("file_bytes")
    flops = r.get("flops")
    lat = r.get("latency_ms")
    lat_txt = ""
    if not _missing(lat):
        lo, hi = r.get("latency_ci_low_ms"), r.get("latency_ci_high_ms")
        lat_txt = f"{lat:.4g}" + ("" if _missing(lo) or _missing(hi)
                                  else f" <small>[{lo:.3g}–{hi:.3g}]</small>")
    steps = ""
    if r.get("optimize_steps") == 0:
        steps = "nothing to do"
    elif not _missing(r.get("optimize_steps")):
        steps = esc_text(f"{r['optimize_verified']}/{r['optimize_steps']} steps verified")
        if not _missing(r.get("optimize_failed")):
            steps += f" <b style='color:#cf222e'>failed: {esc_text(r['optimize_failed'])}</b>"
    nodes = _num(r.get("num_nodes"))
    after = _num(r.get("nodes_after"))
    fp16 = ""
    if not _missing(r.get("fp16_passed")):
        fp16 = (f"keep {r['fp16_kept']}" if r["fp16_passed"] and not _missing(r.get("fp16_kept"))
                else "no plan")
    checks = "" if _missing(r.get("check_errors")) else \
        f"{r['check_errors']} / {r['check_warnings']}"
    # a FLOPs total that leaves nodes of unknown cost out says how many (a custom op early
    # in a model left most of it uncounted: 2.03 M shown for 22.5 M)
    unknown = r.get("unknown_cost_nodes")
    n_unknown = 0 if _missing(unknown) or not unknown else int(unknown)
    partial = (f" <small title='{esc_attr(f'{n_unknown} nodes of unknown cost are not counted')}'"
               f">+ {esc_text(str(n_unknown))} unknown</small>") if n_unknown else ""
    cells = [
        (model, "", str(r["model"])),
        (f"<span class='st' style='color:{esc_attr(colour)}'>{esc_text(status)}</span>"
         + (" <small>(reused)</small>" if r.get("reused") is True else ""), "", status),
        ("" if _missing(fb) else esc_text(format_bytes(fb)), "num", "" if _missing(fb) else str(fb)),
        (esc_text(nodes[0]) + (f" → {esc_text(after[0])}" if after[0] else ""), "num",
         nodes[1]),
        ("" if _missing(flops) else esc_text(_si(flops)) + partial, "num",
         "" if _missing(flops) else str(flops)),
        (esc_text(checks), "num", "" if _missing(r.get("check_errors")) else str(r["check_errors"])),
        (steps, "", "" if _missing(r.get("optimize_steps")) else str(r["optimize_steps"])),
        (lat_txt, "num", "" if _missing(lat) else str(lat)),
        (esc_text(fp16), "", fp16),
        ("" if _missing(r.get("seconds")) else f"{r['seconds']:.1f}", "num",
         "" if _missing(r.get("seconds")) else str(r["seconds"])),
        (err, "err", err),
    ]
    return "".join(f"<td class='{esc_attr(cls)}' data-v='{esc_attr(v)}'>{h}</td>"
                   for h, cls, v in cells)


_HEADERS = ["model", "status", "size", "nodes → after safe", "FLOPs", "check errors / warnings",
            "safe preset", "latency ms [95% CI]", "fp16 plan", "seconds", "error"]


def audit_index_html(table: pd.DataFrame, *, title: str = "onnx_lab audit",
                     links: Mapping[str, str] | None = None,
                     gate: pd.DataFrame | None = None, note: str | None = None) -> str:
    """The audit's ``index.html``.

    Args:
        table: the audit table (:data:`onnx_lab.zoo.COLUMNS`).
        links: model name -> relative href of its report (models without one are not linked).
        gate: the regression gate's findings (:func:`onnx_lab.zoo.gate.regressions`), if any.
        note: a line under the title (the options, an interruption).
    """
    links = links or {}
    counts = table.status.value_counts() if len(table) else pd.Series(dtype=int)
    sub = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no models"
    parts = ["<!doctype html><html><head><meta charset='utf-8'>", csp_meta([_SCRIPT]),
             f"<title>{esc_text(title)}</title>", inline_style(_STYLE), "</head><body>",
             f"<h1>{esc_text(title)}</h1><div class='sub'>{len(table)} models: {esc_text(sub)}"
             + (f"<br>{esc_text(note)}" if note else "") + "</div>"]
    if gate is not None:
        worse = gate.loc[gate.worse]
        if len(worse):
            items = "".join(f"<li><b>{esc_text(r.model)}</b> — {esc_text(r.check)}: {esc_text(r.detail)}</li>"
                            for r in worse.itertuples())
            parts.append(f"<div class='gate bad'><b>{len(worse)} regression(s) against the "
                         f"earlier audit</b><ul>{items}</ul></div>")
        else:
            parts.append("<div class='gate good'>No regression against the earlier audit."
                         "</div>")
    parts.append("<table class='audit'><thead><tr>"
                 + "".join(f"<th>{esc_text(h)}</th>" for h in _HEADERS) + "</tr></thead><tbody>")
    for r in table.to_dict(orient="records"):
        parts.append("<tr>" + _cells_html(r, links.get(r["model"])) + "</tr>")
    parts.append("</tbody></table>" + inline_script(_SCRIPT) + "</body></html>")
    return "".join(parts)
