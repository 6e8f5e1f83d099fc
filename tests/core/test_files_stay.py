"""Issue 32: a model's files stay where they were at open (chdir, swapped folder links), and
external data locations with ``..`` are refused in every body, local functions' included."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from models import big_weight_model, save_external
from onnx import TensorProto, helper

import onnx_lab
from onnx_lab.errors import ExternalDataError


def _weights(seed: int) -> onnx.ModelProto:
    return big_weight_model(seed=seed)


@pytest.fixture
def folders(tmp_path, monkeypatch):
    """``a/m.onnx`` and ``b/m.onnx`` (other weights, same names), and ``c/a/m.onnx`` (a
    third copy where ``a`` would be after ``chdir c``); cwd = tmp_path."""
    save_external(_weights(1), tmp_path / "a" / "m.onnx")
    save_external(_weights(2), tmp_path / "b" / "m.onnx")
    save_external(_weights(3), tmp_path / "c" / "a" / "m.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _w_mean(seed: int) -> float:
    w = onnx.numpy_helper.to_array(_weights(seed).graph.initializer[0])
    return float(w.astype(np.float64).mean())


def _run(lab) -> bool:
    """A comparison of the model with itself (onnxruntime reads the data files)."""
    x = np.ones((2, 256), np.float32)
    return onnx_lab.compare(lab, lab, feeds={"x": x}).passed


def test_a_relative_open_keeps_reading_its_folder_after_chdir(folders):
    lab = onnx_lab.open("a/m.onnx")
    assert lab.path.is_absolute() and lab.model.base_dir == folders.resolve() / "a"
    os.chdir("c")  # c/a/m.onnx.data would be read if the folder were relative
    stats = lab.weight_stats().set_index("name")
    assert stats.loc["w", "mean"] == pytest.approx(_w_mean(1), rel=1e-4, abs=1e-6)
    out = lab.save(folders / "out.onnx")
    saved = onnx.load(str(out))
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(saved.graph.initializer[0]),
                                  onnx.numpy_helper.to_array(_weights(1).graph.initializer[0]))
    assert _run(lab)


def test_a_folder_replaced_by_a_link_after_open_is_refused(folders):
    lab = onnx_lab.open("a/m.onnx")
    os.rename("a", "a.old")
    os.symlink("b", "a")  # same names, other weights
    for op in (lambda: lab.weight_stats(), lambda: lab.save(folders / "o.onnx"),
               lambda: _run(lab)):
        with pytest.raises(ExternalDataError, match="replaced since the model was opened"):
            op()
    assert not (folders / "o.onnx").exists()


def test_a_swapped_folder_link_changes_nothing(folders):
    os.symlink("a", "link")
    lab = onnx_lab.open("link/m.onnx")
    os.unlink("link")
    os.symlink("b", "link")
    stats = lab.weight_stats().set_index("name")
    assert stats.loc["w", "mean"] == pytest.approx(_w_mean(1), rel=1e-4, abs=1e-6)
    assert _run(lab)


def test_a_vanished_data_file_is_a_clear_error(folders):
    lab = onnx_lab.open("a/m.onnx")
    os.unlink("a/m.onnx.data")
    with pytest.raises(ExternalDataError, match="is gone"):
        lab.weight_stats()


def test_dotdot_in_an_if_body_of_a_local_function_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16)
    t = onnx.TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "16")):
        e = t.external_data.add()
        e.key, e.value = k, v
    body = helper.make_graph([helper.make_node("Constant", [], ["o"], value=t)], "then", [],
                             [helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])])
    fn = helper.make_function(
        "local", "f", ["cond"], ["y"],
        [helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body)],
        [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("f", ["cond"], ["y"], domain="local")], "g",
                          [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, functions=[fn], opset_imports=[helper.make_opsetid("", 17),
                                                            helper.make_opsetid("local", 1)])
    folder = tmp_path / "m"
    folder.mkdir()
    onnx.save(m, str(folder / "m.onnx"))
    with pytest.raises(ExternalDataError, match="outside the model's folder"):
        onnx_lab.open(folder / "m.onnx")
    with pytest.raises(ExternalDataError, match="outside the model's folder"):
        onnx_lab.open(m.SerializeToString(), base_dir=folder)


def test_an_ordinary_model_is_unaffected(tmp_path):
    """No false alarm: a model read, saved and run with nothing moved."""
    p = save_external(_weights(1), tmp_path / "m.onnx")
    lab = onnx_lab.open(p)
    assert lab.weight_stats().shape[0] == 2
    assert _run(lab)
    lab.save(tmp_path / "copy.onnx")
    assert onnx_lab.open(tmp_path / "copy.onnx").weight_stats().shape[0] == 2


@pytest.fixture
def home_and_cwd(tmp_path, monkeypatch):
    """(the home folder, the current folder): two empty folders, HOME set to the first."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    return home, cwd


def test_a_path_under_the_home_folder_is_read_and_written_there(home_and_cwd):
    """``~/x.onnx`` is the home folder's file, as pandas and the shell read it: open, save,
    the report, an initializer from a file and the audit went to a folder named ``~`` in the
    current one (``lab.save("~/out.onnx")`` created ``./~/out.onnx``)."""
    home, cwd = home_and_cwd
    save_external(_weights(1), home / "m.onnx")
    lab = onnx_lab.open("~/m.onnx")
    assert lab.model.path == home / "m.onnx"
    w = onnx.numpy_helper.to_array(_weights(1).graph.initializer[0])
    np.save(home / "w.npy", (w * 2).astype(w.dtype))
    lab.replace_initializer(_weights(1).graph.initializer[0].name, "~/w.npy")
    out = lab.save("~/out/m2.onnx")
    assert out == home / "out" / "m2.onnx" and out.is_file()
    assert onnx_lab.write_report(lab, "~/r.html", graph=False) == home / "r.html"
    assert (home / "r.html").stat().st_size > 0
    assert not (cwd / "~").exists()
    # what was written is what a fresh onnxruntime session runs
    import onnxruntime as ort
    x = np.ones((2, 256), np.float32)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], x @ (2 * w) + 1, rtol=1e-4,
                               atol=1e-3)
    # the source is still refused under its home spelling
    with pytest.raises(onnx_lab.errors.SaveError, match="source"):
        lab.save("~/m.onnx")


def test_a_lab_made_from_a_home_path_protects_that_file(home_and_cwd):
    """A conversion or merge of '~/m.onnx' remembers the home folder's file as its source:
    it remembered Path('~/m.onnx') (./~/m.onnx), and its save over the file it was made from
    replaced it without overwrite=True."""
    home, cwd = home_and_cwd
    save_external(_weights(1), home / "m.onnx")
    save_external(_weights(2), home / "n.onnx")
    before = (home / "m.onnx").read_bytes()
    fp16 = onnx_lab.to_fp16("~/m.onnx")
    assert fp16.version_history.source_path == home / "m.onnx"
    with pytest.raises(onnx_lab.errors.SaveError, match="source"):
        fp16.save("~/m.onnx")
    assert (home / "m.onnx").read_bytes() == before
    both = onnx_lab.merge("~/m.onnx", "~/n.onnx", io_map=[("z", "x")], prefix1="a_",
                          prefix2="b_")
    for name in ("m.onnx", "n.onnx"):
        with pytest.raises(onnx_lab.errors.SaveError):
            both.save(f"~/{name}")
    assert (home / "m.onnx").read_bytes() == before


def test_a_home_path_of_calibration_or_audit_feeds_is_read(home_and_cwd):
    """Two doors that still read '~' as a folder of that name: a calibration folder
    ('Feeds file .../calib does not exist', of a folder that exists) and an audit's
    model_options feeds ('feeds file '~/f.npz' does not exist')."""
    home, cwd = home_and_cwd
    (home / "calib").mkdir()
    onnx.save(_weights(1), home / "m.onnx")
    rng = np.random.default_rng(0)
    for i in range(2):
        np.savez(home / "calib" / f"{i}.npz", x=rng.random((2, 256), np.float32))
    np.savez(home / "f.npz", x=rng.random((2, 256), np.float32))
    from onnx_lab.numerics.quantize import calibration_samples

    got = calibration_samples("~/m.onnx", "~/calib")
    assert len(got) == 2 and got[0]["x"].shape == (2, 256)
    from onnx_lab import zoo

    done = zoo.audit(["~/m.onnx"], "~/audit", model_options={"m*": {"feeds": "~/f.npz"}})
    assert len(done.table) == 1 and not (cwd / "~").exists()
    manifest = (home / "audit" / "manifest.jsonl").read_text()
    assert str(home / "f.npz") in manifest
