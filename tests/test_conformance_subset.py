"""A deterministic subset of the ONNX backend conformance sweep (``make conformance`` runs them
all; see scripts/conformance.py and docs/core.md's "Conformance yardstick").

Each case (onnx's generated node cases and the model folders its wheel ships) goes through
open, tables, summary, check, cost, render, patterns, ``apply_preset("safe")``, save, a fresh
onnxruntime session of the saved file against the case's expected outputs, and
``onnx_lab.compare`` of the original and the optimized model. The subset must have no
exception that is not a LabError, no false alarm (a flagged difference where the saved model's
outputs match the expected ones), no wrong result after ``safe``, no crash and no case over
its memory limit; refusals (LabErrors) are allowed and counted, and only where onnxruntime
itself cannot run the original.

``ONNX_LAB_CONFORMANCE_CASES`` (default 200), ``ONNX_LAB_CONFORMANCE_SEED`` (default 0) and
``ONNX_LAB_CONFORMANCE_JOBS`` (default 2) change the run.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = int(os.environ.get("ONNX_LAB_CONFORMANCE_CASES", "200"))
SEED = int(os.environ.get("ONNX_LAB_CONFORMANCE_SEED", "0"))
JOBS = int(os.environ.get("ONNX_LAB_CONFORMANCE_JOBS", "2"))
# Case id -> why it is allowed to end badly (a defect reported, not yet fixed).
KNOWN: dict[str, str] = {}

pytestmark = pytest.mark.slow  # a few hundred child processes: `make test`, not `make check`


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "conformance.py"), "--subset", str(CASES),
         "--seed", str(SEED), "--jobs", str(JOBS), "--out", str(out), "--known", ",".join(KNOWN)],
        capture_output=True, text=True, env=env, timeout=900)
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "cases.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return proc, summary, rows


def test_subset_has_no_defects(sweep):
    proc, summary, rows = sweep
    bad = [f"{b['class']} {b['id']} [{b['stage']}] {b['error_type']}: {b['error']}"
           for b in summary["bad"]]
    assert not bad, "\n".join(bad)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_subset_is_what_it_says(sweep):
    _, summary, rows = sweep
    assert summary["cases"] == len(rows) == CASES
    assert len({r["id"] for r in rows}) == CASES
    classes = summary["classes"]
    # most cases go all the way through: a sweep where everything is refused proves nothing
    assert classes.get("ok", 0) >= 0.6 * CASES, classes
    for r in rows:
        if r["class"] == "ok":
            assert r["saved_matches"] == "True" and r["compare_passed"] == "True", r
        if r["class"] == "refused":
            assert r["error_type"] and r["stage"], r  # a LabError, with where it stopped
            # only where onnxruntime itself cannot run the original (the full sweep: all of
            # its refusals); a refusal of a model onnxruntime runs is a defect
            assert r["ort_original"].startswith("fails"), r
    assert not classes.get("timeout"), [r["id"] for r in rows if r["class"] == "timeout"]


def test_matches_rule_catches_a_real_difference():
    """The yardstick's own comparison flags what onnx's backend test would (both ways)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from conformance import all_match, matches
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    assert matches(x, x * (1 + 1e-5), 1e-3, 1e-7)[0]
    assert not matches(x, x + 1e-2, 1e-3, 1e-7)[0]
    assert matches(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]), 1e-3, 1e-7)[0]
    assert not matches(np.array(["a", "b"], dtype=object), np.array(["a", "c"], dtype=object),
                       1e-3, 1e-7)[0]
    assert not matches([x, x], [x, x + 1], 1e-3, 1e-7)[0]
    assert not matches([x], [x, x], 1e-3, 1e-7)[0]
    assert not all_match([x], [x.reshape(4, 3)], 1e-3, 1e-7)[0]
    assert matches(None, None, 1e-3, 1e-7)[0] and not matches(None, x, 1e-3, 1e-7)[0]
