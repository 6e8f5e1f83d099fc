"""parse_trace: Chrome-trace events -> kernels/runs/session frames, warm-up dropped by time."""

from __future__ import annotations

import json

import pytest

from onnx_lab.errors import InputError
from onnx_lab.profiling.parse import parse_trace


def _events(runs: int = 3) -> list[dict]:
    ev = [{"cat": "Session", "name": "model_loading_array", "ts": 0, "dur": 1500, "args": {}},
          {"cat": "Session", "name": "session_initialization", "ts": 1600, "dur": 2500,
           "args": {}}]
    t = 10_000
    for r in range(runs):
        ev.append({"cat": "Session", "name": "model_run", "ts": t, "dur": 300, "args": {}})
        for i, (name, op) in enumerate((("conv", "Conv"), ("relu", "Relu"))):
            ev.append({"cat": "Node", "name": f"{name}_fence_before", "ts": t + 1, "dur": 0,
                       "args": {"op_name": op}})
            ev.append({"cat": "Node", "name": f"{name}_kernel_time", "ts": t + 10 + 100 * i,
                       "dur": 50 + r + 10 * i, "args": {"op_name": op, "node_index": str(i),
                                                        "provider": "CPUExecutionProvider"}})
        t += 1000
    return ev


def test_parse_drops_warmup_runs():
    t = parse_trace(_events(3), warmup=1)
    k = t.kernels
    assert list(k.columns) == ["ort_name", "op_type", "provider", "node_index", "run", "ts_us",
                               "dur_us"]
    assert sorted(k.run.unique()) == [1, 2]
    assert len(k) == 4 and set(k.ort_name) == {"conv", "relu"}
    assert k.loc[k.ort_name == "conv", "dur_us"].tolist() == [51, 52]
    assert t.runs.warmup.tolist() == [True, False, False]
    assert t.runs.dur_ms.tolist() == [0.3, 0.3, 0.3]
    assert t.load_ms == 1.5 and t.init_ms == 2.5
    assert t.notes == []


def test_parse_file_and_trace_object_form(tmp_path):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"traceEvents": _events(2)}))
    t = parse_trace(p, warmup=0)
    assert len(t.kernels) == 4


def test_no_run_events_keeps_everything_with_note():
    ev = [e for e in _events(2) if e["name"] != "model_run"]
    t = parse_trace(ev, warmup=1)
    assert len(t.kernels) == 4
    assert any("no model_run" in n for n in t.notes)


def test_warmup_covering_all_runs():
    t = parse_trace(_events(2), warmup=5)
    assert len(t.kernels) == 0
    assert any("covers all 2 runs" in n for n in t.notes)


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        parse_trace(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not a Chrome-trace JSON"):
        parse_trace(bad)
    num = tmp_path / "num.json"
    num.write_text("42")
    with pytest.raises(InputError, match="no event list"):
        parse_trace(num)
    with pytest.raises(InputError, match="warmup"):
        parse_trace(_events(1), warmup=-1)
