"""``onnx-lab audit --out DIR`` into a folder no audit wrote: a site's ``index.html`` (or
someone's ``audit.csv``) there was replaced without a word. Refused now, before any model runs;
a new, an empty or an earlier audit's folder is written as before."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from onnx_lab.cli import main


@pytest.fixture
def model(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    p = tmp_path / "zoo" / "m.onnx"
    p.parent.mkdir()
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(p))
    return p


@pytest.mark.parametrize("theirs", ["index.html", "audit.csv"])
def test_audit_never_replaces_files_of_a_folder_it_did_not_write(capsys, model, tmp_path,
                                                                   theirs):
    site = tmp_path / "site"
    site.mkdir()
    (site / theirs).write_text("<h1>mine</h1>")
    code = main(["audit", str(model), "--out", str(site), "--budget", "0.2"])
    err = capsys.readouterr().err
    assert code == 2 and theirs in err and "manifest.jsonl" in err, err
    assert (site / theirs).read_text() == "<h1>mine</h1>"
    assert sorted(p.name for p in site.iterdir()) == [theirs]


def test_audit_writes_new_empty_and_earlier_audit_folders(capsys, model, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for out in (tmp_path / "new", empty, empty):  # the second run into `empty` resumes it
        assert main(["audit", str(model), "--out", str(out), "--budget", "0.2"]) == 0
        capsys.readouterr()
        assert (out / "index.html").is_file() and (out / "manifest.jsonl").is_file()
