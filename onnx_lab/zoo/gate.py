"""The regression gate of an audit: what got worse per model since an earlier audit.

Compared per model name (the path relative to the audited folder) between two manifests:

- ``status``: the model audited cleanly before and now fails (an error, a timeout, a crash,
  the memory limit);
- ``verification``: a step of the preset that verified before no longer does;
- ``latency``: the model takes longer beyond the noise: :func:`~onnx_lab.profiling.stats.
  compare_samples` on the two runs' latency samples (a Mann-Whitney test, the bootstrap
  interval of the ratio, and at least ``latency_effect`` apart: 10% by default). Not counted
  as a regression (listed, with the reason) when the two audits profiled with other options
  (threads, providers, budget, dims, shapes, feeds) or either run looked disturbed
  (:func:`~onnx_lab.profiling.stats.busy_note`: a wide spread of the runs, or a load average
  above one per core): a slower machine is not a slower model;
- ``check``: error codes of ``check()`` that the earlier audit did not have;
- ``size``: the model's files grew by more than ``size_tolerance``;
- ``fp16``: an fp16 plan met the tolerance before and does not now.

Models only in one of the two audits, latencies that got faster beyond the noise, and models
whose files changed (``content``: another sha256, the same name) are listed too, as
information (``worse`` False).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnx_lab._pandas import pd
from onnx_lab.profiling.stats import compare_samples

__all__ = ["regressions", "GATE_COLUMNS", "SIZE_TOLERANCE", "LATENCY_EFFECT"]

GATE_COLUMNS = ["model", "check", "worse", "old", "new", "detail"]
#: Growth of a model's files (model and external data) reported as a regression.
SIZE_TOLERANCE = 0.01
#: The smallest latency change the gate calls real. Twice :data:`onnx_lab.profiling.stats.
#: MIN_EFFECT` (5%, the drift between two sessions of one machine): two audits are two
#: sessions, hours apart, each profiling with other models' processes running beside it.
LATENCY_EFFECT = 0.10
#: Fewest latency runs on each side for a latency verdict.
MIN_RUNS = 5


def _codes(value: Any) -> set[str]:
    return set(str(value).split(";")) if value else set()


def _row(model: str, check: str, worse: bool, old: Any, new: Any, detail: str) -> dict:
    return {"model": model, "check": check, "worse": worse, "old": None if old is None
            else str(old), "new": None if new is None else str(new), "detail": detail}


def compare_entries(model: str, old: Mapping[str, Any], new: Mapping[str, Any], *,
                    latency_effect: float = LATENCY_EFFECT,
                    size_tolerance: float = SIZE_TOLERANCE) -> list[dict[str, Any]]:
    """The findings of one model: ``old`` and ``new`` are manifest entries ({"row",
    "samples"})."""
    a, b = old.get("row") or {}, new.get("row") or {}
    out: list[dict[str, Any]] = []
    if a.get("status") == "ok" and b.get("status") != "ok":
        out.append(_row(model, "status", True, "ok", b.get("status"),
                        f"now fails in the {b.get('error_stage')} stage: "
                        f"{b.get('error_type')}: {b.get('error')}"))
    was_failing = _codes(a.get("optimize_failed"))
    newly = sorted(_codes(b.get("optimize_failed")) - was_failing)
    if newly and a.get("optimize_steps") is not None:
        out.append(_row(model, "verification", True, a.get("optimize_failed"),
                        b.get("optimize_failed"),
                        f"{', '.join(newly)} no longer verif{'ies' if len(newly) == 1 else 'y'}"))
    xs, ys = old.get("samples") or [], new.get("samples") or []
    if len(xs) >= MIN_RUNS and len(ys) >= MIN_RUNS:
        d = compare_samples(xs, ys, labels=("the old audit", "this audit"),
                            min_effect=latency_effect)
        if d.different:
            # Not the model's doing: other options, or runs measured on a busy machine.
            excuse = _settings_changed(old.get("settings"), new.get("settings")) or "; ".join(
                f"{side}: {note}" for side, note in (("old audit", a.get("latency_busy")),
                                                     ("this audit", b.get("latency_busy")))
                if note)
            detail = d.text + (f"; not counted as a regression: {excuse}" if excuse else "")
            out.append(_row(model, "latency", d.ratio > 1 and not excuse,
                            f"{d.median_a_ms:.4g} ms", f"{d.median_b_ms:.4g} ms", detail))
    new_codes = sorted(_codes(b.get("check_error_codes")) - _codes(a.get("check_error_codes")))
    if new_codes and a.get("status") is not None and a.get("check_errors") is not None:
        out.append(_row(model, "check", True, a.get("check_error_codes"),
                        b.get("check_error_codes"), f"new check errors: {', '.join(new_codes)}"))
    sa, sb = a.get("file_bytes"), b.get("file_bytes")
    if sa and sb and sb > sa * (1 + size_tolerance):
        out.append(_row(model, "size", True, sa, sb,
                        f"the model's files grew by {sb / sa - 1:.1%} ({sa} -> {sb} bytes)"))
    ha, hb = old.get("sha256") or a.get("sha256"), new.get("sha256") or b.get("sha256")
    if ha and hb and ha != hb:
        # not worse by itself: the figures above compare two versions of the model
        same = a.get("num_nodes") is not None and a.get("num_nodes") == b.get("num_nodes")
        out.append(_row(model, "content", False, str(ha)[:12], str(hb)[:12],
                        "the model's files changed since the old audit"
                        + (" (the same number of nodes: its weights or attributes changed)"
                           if same else "")))
    if a.get("fp16_passed") is True and b.get("fp16_passed") is False:
        out.append(_row(model, "fp16", True, True, False,
                        "no fp16 plan meets the tolerance any more"
                        + (f": {b.get('fp16_note')}" if b.get("fp16_note") else "")))
    return out


def _settings_changed(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> str:
    """The options two audits of a model differ in, in words ("" when none or unknown)."""
    if not a or not b:
        return ""
    diff = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]
    return f"the audits ran with other options ({', '.join(diff)})" if diff else ""


def regressions(old: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]], *,
                latency_effect: float = LATENCY_EFFECT, size_tolerance: float = SIZE_TOLERANCE
                ) -> pd.DataFrame:
    """What got worse from the ``old`` audit's entries to the ``new`` one's (by model name).

    Args:
        old, new: model name -> manifest entry ({"row": {...}, "samples": [...]}).
        latency_effect: the smallest latency ratio change called real
            (:data:`LATENCY_EFFECT`, 10%).
        size_tolerance: the smallest growth of the files called real.

    Returns:
        DataFrame(model, check ('status', 'verification', 'latency', 'check', 'size', 'fp16',
        'content', 'missing', 'added'), worse (bool: a regression), old, new (the figures compared, as
        text), detail (in words)); regressions first.

    Example:
        >>> df = regressions(read_manifest(old_dir), read_manifest(new_dir))
        >>> df.loc[df.worse]
    """
    rows: list[dict[str, Any]] = []
    for model in sorted(set(old) | set(new)):
        if model not in new:
            rows.append(_row(model, "missing", False, "audited", None, "not in this audit"))
        elif model not in old:
            rows.append(_row(model, "added", False, None, "audited", "not in the old audit"))
        else:
            rows += compare_entries(model, old[model], new[model],
                                    latency_effect=latency_effect,
                                    size_tolerance=size_tolerance)
    df = pd.DataFrame(rows, columns=GATE_COLUMNS)
    df = df.astype({"worse": bool})
    return df.sort_values("worse", ascending=False, kind="stable").reset_index(drop=True)
