"""The audit reads every model of a folder as hostile input before any worker starts.

Found by a security sweep: a model whose external data location was ``/dev/zero`` (or a FIFO
named ``*.onnx``) hung ``onnx-lab audit`` whatever ``--timeout`` said, ``../SECRET.txt`` was
read and hashed into the manifest, a model naming its neighbour as its data file hid that
model, and ``x/y.onnx`` and ``x__y.onnx`` shared one report.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_lab
from onnx_lab.cli import main
from onnx_lab.errors import ExternalDataError, InputError, ModelLoadError
from onnx_lab.zoo._store import external_files, file_hash, find_models, slug


def _external(location: str) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for k, v in (("location", location), ("offset", "0"), ("length", "16")):
        w.external_data.add(key=k, value=v)
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _plain() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("location", ["/dev/zero", "../SECRET.txt", "sub/../../SECRET.txt",
                                      "fifo.bin"])
def test_only_data_files_open_would_read_are_hashed(tmp_path, location):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (tmp_path / "SECRET.txt").write_text("secret")
    os.mkfifo(zoo / "fifo.bin")
    onnx.save(_external(location), zoo / "evil.onnx")
    found = {f.name: f for f in find_models([zoo])}
    assert list(found) == ["evil.onnx"]
    assert found["evil.onnx"].files == (found["evil.onnx"].path,)  # nothing else is read
    file_hash(found["evil.onnx"].files)  # returns: never reads /dev/zero or the FIFO


@pytest.mark.parametrize("location", ["/dev/zero", "../SECRET.txt", "fifo.bin", "sub",
                                      "link.bin", "ok.bin"])
def test_the_audit_hashes_exactly_what_open_reads(tmp_path, location):
    # One location rule (core._location.data_file) for open and the audit's manifest.
    zoo = tmp_path / "zoo"
    (zoo / "sub").mkdir(parents=True)
    (tmp_path / "SECRET.txt").write_bytes(b"\0" * 16)
    (zoo / "ok.bin").write_bytes(np.ones(4, np.float32).tobytes())
    os.symlink(tmp_path / "SECRET.txt", zoo / "link.bin")
    os.mkfifo(zoo / "fifo.bin")
    onnx.save(_external(location), zoo / "m.onnx")
    try:
        onnx_lab.open(zoo / "m.onnx")
        opened = True
    except ExternalDataError as e:
        opened = False
        if location == "fifo.bin":
            assert "not a regular file" in e.problem  # not "missing"
    hashed = [f.name for f in external_files(zoo / "m.onnx")]
    assert opened == (location == "ok.bin")
    assert hashed == (["ok.bin"] if opened else [])


def test_a_fifo_or_device_named_onnx_never_blocks(tmp_path):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    os.mkfifo(zoo / "pipe.onnx")
    onnx.save(_plain(), zoo / "good.onnx")
    assert [f.name for f in find_models([zoo])] == ["good.onnx"]
    with pytest.raises(InputError, match="not a regular file"):
        find_models([zoo / "pipe.onnx"])
    assert file_hash([zoo / "pipe.onnx"])[1] == 0


def test_a_model_named_as_data_by_another_is_still_audited(tmp_path):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(_plain(), zoo / "victim.onnx")
    onnx.save(_external("victim.onnx"), zoo / "evil.onnx")
    assert sorted(f.name for f in find_models([zoo])) == ["evil.onnx", "victim.onnx"]


def test_report_names_never_collide(tmp_path, capsys):
    assert slug("conv_bn.onnx") == "conv_bn.onnx"  # a plain name is kept as it is
    names = ["a b.onnx", "a_b.onnx", "x/y.onnx", "x__y.onnx", "a?b.onnx", "a*b.onnx"]
    assert len({slug(n) for n in names}) == len(names)
    zoo = tmp_path / "zoo"
    (zoo / "x").mkdir(parents=True)
    onnx.save(_plain(), zoo / "x" / "y.onnx")
    onnx.save(_plain(), zoo / "x__y.onnx")
    assert main(["audit", str(zoo), "--out", str(tmp_path / "out"), "--budget", "0.2"]) == 0
    reports = sorted(p.name for p in (tmp_path / "out" / "reports").iterdir())
    assert len(reports) == 2, reports


def test_a_data_file_with_an_unusual_name_is_still_hashed(tmp_path):
    # '~w.bin' is an ordinary name on Linux that open reads: left out of the hash, a
    # truncated data file was "unchanged since the last audit"
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "~w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    onnx.save(_external("~w.bin"), zoo / "m.onnx")
    found = find_models([zoo])
    assert [f.name for f in found[0].files[1:]] == ["~w.bin"]


def test_a_link_loop_is_a_row_that_says_so(tmp_path):
    # A *.onnx link looping to itself (or two looping to each other) was skipped without a
    # row, and open() said the file "does not exist".
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    onnx.save(_plain(), zoo / "good.onnx")
    os.symlink("loop.onnx", zoo / "loop.onnx")
    os.symlink("b.onnx", zoo / "a.onnx")
    os.symlink("a.onnx", zoo / "b.onnx")
    found = find_models([zoo])
    assert sorted(f.name for f in found) == ["a.onnx", "b.onnx", "good.onnx", "loop.onnx"]
    file_hash(next(f for f in found if f.name == "loop.onnx").files)  # no raise
    assert [f.name for f in find_models([zoo / "loop.onnx"])] == ["loop.onnx"]
    with pytest.raises(ModelLoadError, match="symbolic link that leads to no file"):
        onnx_lab.open(zoo / "loop.onnx")
