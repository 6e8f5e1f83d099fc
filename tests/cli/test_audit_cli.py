"""onnx-lab audit: JSON and text output, the --against gate's exit code, Ctrl-C keeping the
finished models (and killing the running ones), one-line errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pandas as pd
import pytest
from zoo_helpers import conv_bn, endless_loop

from onnx_lab.cli import main

FAST = ["--budget", "0.3", "--workers", "2"]


@pytest.mark.slow
def test_audit_json_text_and_gate(tmp_path, capsys):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(conv_bn(0), zoo / "a.onnx")
    onnx.save(conv_bn(1), zoo / "b.onnx")
    out = tmp_path / "audit"
    assert main(["audit", str(zoo), "--out", str(out), "--json", *FAST]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["models"] == 2 and doc["counts"] == {"ok": 2} and doc["reused"] == 0
    assert doc["regressions"] is None and not doc["regressed"]
    rows = {r["model"]: r for r in doc["rows"]}
    assert rows["a.onnx"]["optimize_passed"] is True and rows["a.onnx"]["latency_ms"] > 0
    assert {"csv", "parquet", "html"} <= {p.suffix[1:] for p in out.iterdir()}

    # again, gated against itself: everything reused, nothing worse, exit 0, text output
    assert main(["audit", str(zoo), "--out", str(out), "--against", str(out), *FAST]) == 0
    text = capsys.readouterr().out
    assert "2 models (2 ok); 2 unchanged since the last audit" in text
    assert "no regression against the earlier audit" in text

    # b is replaced by a broken file: exit 1, the regression named
    shutil.copytree(out, tmp_path / "old")
    (zoo / "b.onnx").write_bytes(conv_bn(1).SerializeToString()[:64])
    assert main(["audit", str(zoo), "--out", str(out), "--against", str(tmp_path / "old"),
                 "--json", *FAST]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["regressed"] and doc["counts"] == {"ok": 1, "error": 1}
    worse = [f for f in doc["regressions"] if f["worse"]]
    assert [(f["model"], f["check"]) for f in worse] == [("b.onnx", "status")]
    assert "ModelLoadError" in worse[0]["detail"]


@pytest.mark.slow
def test_ctrl_c_keeps_finished_models_and_kills_running_ones(tmp_path):
    psutil = pytest.importorskip("psutil")
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(conv_bn(0), zoo / "a.onnx")  # the larger file: audited first
    onnx.save(endless_loop(), zoo / "endless.onnx")
    out = tmp_path / "audit"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "onnx_lab.cli", "audit", str(zoo), "--out",
                             str(out), "--timeout", "300", "--budget", "0.3"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Every wait below is on an event (a manifest line, a child process, the file the child
    # writes when it enters a stage), not on a time: on a loaded machine any of them can take
    # long. The deadline only turns a hang into a failure.
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:  # a.onnx finished
            manifest = out / "manifest.jsonl"
            if manifest.exists() and manifest.read_text().count("\n") >= 1:
                break
            time.sleep(0.2)
        else:
            pytest.fail("a.onnx did not finish within 300 s")
        stage = None
        while time.monotonic() < deadline and stage is None:  # endless.onnx in a stage
            children = psutil.Process(proc.pid).children(recursive=True)
            stage = _worker_stage(children)
            time.sleep(0.2)
        assert stage is not None, "the child auditing endless.onnx never entered a stage"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=max(60.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    table = pd.read_csv(out / "audit.csv")
    assert table.model.tolist() == ["a.onnx"] and table.status.tolist() == ["ok"]
    _, alive = psutil.wait_procs(children, timeout=30)
    assert children and not [c for c in alive if c.status() != psutil.STATUS_ZOMBIE]


def _worker_stage(children) -> str | None:
    """The stage an audit child reports in its result file (it writes the file as it enters
    each stage), or None while it has not entered one."""
    import psutil

    for c in children:
        try:
            cmd = c.cmdline()
        except psutil.Error:  # the child ended meanwhile
            continue
        if "onnx_lab.zoo._worker" in cmd and cmd[-1].endswith("task.json"):
            try:
                doc = json.loads((Path(cmd[-1]).parent / "result.json").read_text())
            except (OSError, ValueError):
                continue
            return doc.get("running") or "finished"
    return None


@pytest.mark.parametrize("argv, message", [
    (["audit", "nowhere/", "--out", "OUT"], "does not exist"),
    (["audit", "ZOO", "--out", "OUT", "--workers", "0"], "workers must be a positive int"),
    (["audit", "ZOO", "--out", "OUT", "--timeout", "0"], "--timeout 0.0"),
    (["audit", "ZOO", "--out", "OUT", "--model-options", "OPTS"], "is not valid JSON"),
    (["audit", "ZOO", "--out", "OUT", "--against", "ZOO"], "No audit manifest"),
    (["audit", "ZOO", "--out", "OUT", "--batch", "0"], "'0' is not a size >= 1 or 'none'"),
])
def test_errors_are_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "zoo").mkdir()
    onnx.save(conv_bn(0), tmp_path / "zoo" / "a.onnx")
    (tmp_path / "opts.json").write_text("{not json")
    subst = {"ZOO": str(tmp_path / "zoo"), "OUT": str(tmp_path / "out"),
             "OPTS": str(tmp_path / "opts.json")}
    assert main([subst.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("onnx-lab: error:") and message in err and "\n" not in err


@pytest.mark.slow
def test_batch_sizes_an_unnamed_leading_dim(tmp_path, capsys):
    from zoo_helpers import matmul_add

    onnx.save(matmul_add(batch_dim=None), tmp_path / "skl.onnx")
    for i, (flag, want) in enumerate((([], "x=1x16"), (["--batch", "3"], "x=3x16"),
                                      (["--batch", "none"], None))):
        main(["audit", str(tmp_path / "skl.onnx"), "--out", str(tmp_path / f"out{i}"),
              "--json", "--budget", "0.3", *flag])
        row = json.loads(capsys.readouterr().out)["rows"][0]
        assert row["shapes_given"] == want
        assert (row["status"] == "ok") == (want is not None), row["error"]


@pytest.mark.slow
def test_engine_dask_starts_its_own_cluster(tmp_path, capsys):
    pytest.importorskip("distributed")
    onnx.save(conv_bn(0), tmp_path / "a.onnx")
    assert main(["audit", str(tmp_path / "a.onnx"), "--out", str(tmp_path / "out"),
                 "--engine", "dask", "--budget", "0.3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"ok": 1} and doc["rows"][0]["optimize_passed"] is True


@pytest.mark.slow
def test_a_model_name_never_begins_a_line_of_its_own(tmp_path, capsys):
    # A file named with a newline printed a forged "REGRESSION ..." line (and a carriage
    # return wrote over the start of the line): the text output keeps each model on one line.
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "x.onnx: ok\nREGRESSION y.onnx: status: forged\rz.onnx").write_text("not a model")
    assert main(["audit", str(zoo), "--out", str(tmp_path / "out"), "--budget", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.splitlines()
    assert not [ln for ln in lines if ln.startswith("REGRESSION")], lines
    assert lines[0].startswith("x.onnx: ok\\nREGRESSION y.onnx: status: forged\\rz.onnx: "
                               "error in the open stage: ModelLoadError: ")
