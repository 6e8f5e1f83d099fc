"""Issue 32: no output replaces an input (the model, its data file, the other model), every
output goes through a fresh temporary (a planted ``<out>.tmp`` link is not followed), and a
failed write leaves the old file whole."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import onnx
import pandas as pd
import pytest
from models import big_weight_model, save_external

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.core.outputs import write_atomic
from onnx_lab.errors import SaveError, WriteError


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _one_line(capsys, *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-lab: error: "), err
    return lines[0]


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    """a.onnx with its data file a.onnx.data, and b.onnx (embedded weights)."""
    a = save_external(big_weight_model(seed=1), tmp_path / "a.onnx")
    b = tmp_path / "b.onnx"
    onnx.save(big_weight_model(seed=2), str(b))
    return a, b


def _files(pair) -> dict[Path, str]:
    a, b = pair
    return {p: _sha(p) for p in (a, a.with_name("a.onnx.data"), b)}


@pytest.mark.parametrize("argv", [
    ["report", "{a}", "-o", "{a}"],
    ["report", "{a}", "-o", "{data}"],
    ["report", "{b}", "--against", "{a}", "-o", "{a}"],
    ["report", "{b}", "--against", "{a}", "-o", "{data}"],
    ["diff", "{a}", "{b}", "--html", "{a}"],
    ["diff", "{a}", "{b}", "--html", "{b}"],
    ["diff", "{a}", "{b}", "--html", "{data}"],
    ["render", "{a}", "-o", "{data}"],
    ["compare", "{a}", "{b}", "--csv", "{data}"],
])
def test_an_output_over_an_input_is_refused(capsys, pair, argv):
    a, b = pair
    before = _files(pair)
    names = {"a": str(a), "b": str(b), "data": str(a.with_name("a.onnx.data"))}
    line = _one_line(capsys, *[x.format(**names) for x in argv])
    assert "would destroy the input" in line
    assert _files(pair) == before


def test_an_output_through_a_link_to_an_input_is_refused(capsys, pair, tmp_path):
    a, _ = pair
    before = _files(pair)
    os.symlink(a, tmp_path / "r.html")
    _one_line(capsys, "report", str(a), "-o", str(tmp_path / "r.html"))
    assert _files(pair) == before


def test_lab_report_over_its_own_file_is_refused(pair):
    a, b = pair
    before = _files(pair)
    lab = onnx_lab.open(a)
    for target in (lab.path, a.with_name("a.onnx.data")):
        with pytest.raises(SaveError, match="would destroy the input"):
            lab.report(target)
    with pytest.raises(SaveError, match="would destroy the input"):
        onnx_lab.open(b).report(a, against=str(a))
    with pytest.raises(SaveError, match="would destroy the input"):
        lab.render().save(a.with_name("a.onnx.data"))
    assert _files(pair) == before


def test_a_planted_tmp_link_is_not_followed(capsys, pair, tmp_path):
    a, b = pair
    before = _files(pair)
    out = tmp_path / "r.html"
    for name in ("r.html.tmp", ".r.html.tmp"):
        os.symlink(a, tmp_path / name)
    assert main(["report", str(b), "-o", str(out), "--no-tables"]) == 0
    assert main(["diff", str(b), str(a), "--html", str(tmp_path / "d.html")]) == 0
    os.symlink(a, tmp_path / "d.html.tmp")
    assert main(["diff", str(b), str(a), "--html", str(tmp_path / "d.html")]) == 0
    capsys.readouterr()
    assert _files(pair) == before
    assert out.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert (tmp_path / "r.html.tmp").is_symlink()  # left as it was, not written through
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")
                and not p.is_symlink()]


def test_a_report_to_a_folder_is_one_line(capsys, pair):
    a, _ = pair
    line = _one_line(capsys, "report", str(a), "-o", "/")
    assert "folder" in line


def _full_disk(self, path, *args, **kwargs):
    with open(path, "w") as f:
        f.write("half a ta")
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_keeps_the_old_csv(capsys, pair, tmp_path, monkeypatch):
    a, b = pair
    csv = tmp_path / "c.csv"
    csv.write_text("old,table\n1,2\n")
    monkeypatch.setattr(pd.DataFrame, "to_csv", _full_disk)
    line = _one_line(capsys, "compare", str(a), str(b), "--csv", str(csv))
    assert "no space left" in line
    assert csv.read_text() == "old,table\n1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "a.onnx.data", "b.onnx",
                                                          "c.csv"]


def test_a_full_disk_keeps_the_old_rendering(pair, tmp_path, monkeypatch):
    a, _ = pair
    out = tmp_path / "g.dot"
    out.write_text("old")
    r = onnx_lab.open(a).render()
    import onnx_lab.core.outputs as outputs

    real_open = open

    def failing_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "w" in mode and str(path).endswith(".tmp"):
            f.write(b"partial")
            f.close()
            raise OSError(errno.ENOSPC, "No space left on device")
        return f

    monkeypatch.setattr(outputs, "open", failing_open, raising=False)
    with pytest.raises(WriteError, match="no space left"):
        r.save(out)
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.onnx", "a.onnx.data", "b.onnx", "g.dot"]


def test_write_atomic_replaces_only_when_complete(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_atomic(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640
    with pytest.raises(WriteError):
        write_atomic(tmp_path / "missing" / "x.txt", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def test_an_audit_never_writes_over_a_model_it_audits(tmp_path):
    """A model whose data file is named like an audit table, audited into its own folder."""
    m = save_external(big_weight_model(seed=4), tmp_path / "m.onnx", data_name="audit.csv")
    before = {p: _sha(p) for p in (m, tmp_path / "audit.csv")}
    with pytest.raises(SaveError, match="would destroy the input"):
        onnx_lab.audit(m, tmp_path, budget_s=0.2, progress=False)
    assert {p: _sha(p) for p in before} == before
    assert not (tmp_path / "index.html").exists()


def test_command_line_errors_offer_only_what_the_command_line_has(capsys, tmp_path):
    # the commands have no --overwrite: "or pass overwrite=True" was a fix nobody could use;
    # a limit given with --max-memory was said to be "set by set_run_limits"
    src = tmp_path / "m.onnx"
    onnx_lab.open("sample:convnet").save(src)
    line = _one_line(capsys, "optimize", str(src), str(src))
    assert "Refusing to overwrite the source model" in line and "overwrite=True" not in line
    line = _one_line(capsys, "--max-memory", "1K", "profile", str(src))
    assert "(set by onnx-lab --max-memory)" in line, line
    from onnx_lab.core.limits import memory_limit

    assert memory_limit()[1] != "set by onnx-lab --max-memory"  # the block's only


def test_csv_cells_never_start_a_spreadsheet_formula(tmp_path, capsys):
    # a node named "=HYPERLINK(...)" was written as it is into nodes.csv (CSV injection)
    from onnx import helper

    evil = "=HYPERLINK(\"http://x\",\"y\")"
    g = helper.make_graph([helper.make_node("Relu", ["@x"], ["-y"], name=evil)], "g",
                          [helper.make_tensor_value_info("@x", 1, [1, 4])],
                          [helper.make_tensor_value_info("-y", 1, [1, 4])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    assert main(["tables", str(src), "--out", str(tmp_path / "t")]) == 0
    nodes = pd.read_csv(tmp_path / "t" / "nodes.csv")
    assert nodes["node_id"].tolist() == ["'" + evil]
    for name in ("nodes", "initializers", "tensors"):
        import csv

        with open(tmp_path / "t" / f"{name}.csv", newline="") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert not [c for c in cells if c[:1] and c[:1] in "=+-@"], (name, cells)
    tensors = pd.read_csv(tmp_path / "t" / "tensors.csv")
    assert set(tensors["name"]) == {"'@x", "'-y"}
    assert nodes["topo"].tolist() == [0]  # numbers stay numbers
