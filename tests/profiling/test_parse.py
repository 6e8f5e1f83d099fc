"""parse_trace: Chrome-trace events -> kernels/runs/session frames, warm-up dropped by time."""

from __future__ import annotations

import json
from pathlib import Path

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
                               "dur_us", "tid", "parent"]
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


def test_a_trace_under_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "trace.json").write_text(json.dumps({"traceEvents": _events(2)}))
    assert len(parse_trace("~/trace.json", warmup=0).kernels) == 4


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


def test_fast_reader_matches_json_on_a_real_trace(tmp_path):
    from onnx_lab.profiling import profile
    from onnx_lab.profiling.parse import _fast_columns, _json_columns, load_events

    p = profile("sample:convnet", runs=2, warmup=1, providers="cpu", keep_trace=True)
    path = Path(p.trace_paths["CPUExecutionProvider"])
    fast = _fast_columns(path.read_bytes())
    assert fast is not None  # ORT's own layout takes the fast path
    ref = _json_columns(load_events(path))
    for key in ref:
        assert list(fast[key]) == list(ref[key]), key
    path.unlink()
    path.parent.rmdir()


def test_other_layouts_fall_back_to_json(tmp_path):
    from onnx_lab.profiling.parse import _fast_columns

    ev = _events(2)
    # Keys in another order (a re-saved trace): not ORT's layout, read with json.
    shuffled = [{k: e[k] for k in sorted(e)} for e in ev]
    p = tmp_path / "resaved.json"
    p.write_text(json.dumps(shuffled))
    assert _fast_columns(p.read_bytes()) is None
    t = parse_trace(p, warmup=1)
    assert len(t.kernels) == 2 and set(t.kernels.op_type) == {"Conv", "Relu"}
    # ORT's order with escaped quotes in a node name.
    ev[4]["name"] = 'we\\"ird_kernel_time'
    p2 = tmp_path / "escaped.json"
    ort = [{"cat": e["cat"], "pid": 1, "tid": 1, "dur": e["dur"], "ts": e["ts"], "ph": "X",
            "name": e["name"], "args": e["args"]} for e in ev]
    p2.write_text("[\n" + ",\n".join(json.dumps(e) for e in ort) + "\n]\n")
    assert _fast_columns(p2.read_bytes()) is not None
    t = parse_trace(p2, warmup=0)
    assert 'we\\"ird' in set(t.kernels.ort_name)


def test_control_flow_rows_hold_their_own_time():
    # onnxruntime's event of a Loop spans its body's kernels, which are events of their own:
    # summed, a Loop of MatMuls took half the kernel time and the MatMuls the other half
    def kernel(name, op, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op, "node_index": "0", "provider": "CPUExecutionProvider"}}

    ev = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 2000, "args": {}},
          kernel("loop", "Loop", 100, 1000),
          kernel("mm", "MatMul", 110, 400), kernel("mm", "MatMul", 520, 300),
          kernel("inner_if", "If", 830, 200), kernel("neg", "Neg", 840, 150),
          kernel("relu", "Relu", 1200, 50)]
    k = parse_trace(ev).kernels
    own = k.groupby("ort_name").dur_us.sum().to_dict()
    assert own == {"loop": 100, "mm": 700, "inner_if": 50, "neg": 150, "relu": 50}
    assert sum(own.values()) == 1050  # the run's kernels, each counted once
    assert "hold their own time" in parse_trace(ev).notes[0]


def test_a_call_on_another_thread_is_not_nested_in_an_if():
    # a body's calls run on the If's thread; the main graph's node another thread runs while
    # the If runs (parallel execution) is not in its body, and its time stays its own
    def kernel(name, op, ts, dur, tid):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "tid": tid,
                "args": {"op_name": op, "node_index": "0", "provider": "CPUExecutionProvider"}}

    ev = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 2000, "args": {}},
          kernel("Mul_0", "Mul", 110, 100, 1), kernel("Mul_0", "Mul", 120, 300, 2),
          kernel("If_1", "If", 100, 500, 1)]
    k = parse_trace(ev).kernels
    assert k.parent.tolist() == [2, -1, -1]
    assert k.dur_us.tolist() == [100, 300, 400]
