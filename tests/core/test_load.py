"""Opening models from every kind of source, and every kind of bad input."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from models import big_weight_model, fp16_model, function_reading_default, save_external

import onnx_lab
from onnx_lab.core.load import load_model
from onnx_lab.core.model import LabModel
from onnx_lab.errors import (
    DimError,
    ExternalDataError,
    InputError,
    LabError,
    ModelLoadError,
    UnknownNameError,
)


def _write(path: Path, model: onnx.ModelProto) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


def _snapshot(folder: Path) -> dict[str, str]:
    """File name -> sha256 of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _touch_everything(lab: onnx_lab.Lab) -> None:
    lab.nodes, lab.initializers, lab.tensors, lab.inputs, lab.outputs  # noqa: B018
    lab.summary()._repr_html_()
    lab.weight_stats()


# --------------------------------------------------------------------------- sources
def test_open_every_source_kind(tmp_path):
    proto = fp16_model()
    path = _write(tmp_path / "m.onnx", proto)
    sources = [path, str(path), proto, proto.SerializeToString(),
               bytearray(proto.SerializeToString()), ir.serde.deserialize_model(proto)]
    for src in sources:
        lab = onnx_lab.open(src)
        assert lab.summary()["num_nodes"] == 7, type(src)
    assert onnx_lab.open(path).path == path
    assert onnx_lab.open(proto).path is None
    # A Lab and a LabModel are accepted as they are.
    lab = onnx_lab.open(path)
    assert onnx_lab.open(lab).model is lab.model
    assert load_model(lab.model) is lab.model



def test_an_ir_model_whose_function_reads_an_attribute_by_reference_opens():
    # A Constant of a local function whose value is the function's attribute (value=@w, the
    # default given inline): the in-memory check read the reference's missing tensor and
    # raised AttributeError ('NoneType' object has no attribute 'name').
    from onnx import numpy_helper

    proto = function_reading_default(numpy_helper.from_array(np.ones(2, np.float32), "w"))
    for src in (proto, ir.serde.deserialize_model(proto)):
        lab = onnx_lab.open(src)
        assert lab.summary()["num_nodes"] == 1, type(src)

def test_open_sample_names():
    lab = onnx_lab.open("sample:convnet")
    assert lab.path is not None and lab.path.suffix == ".onnx"
    with pytest.raises(UnknownNameError, match="convnett.*convnet"):
        onnx_lab.open("sample:convnett")


def test_open_wrong_type():
    with pytest.raises(InputError, match="int"):
        onnx_lab.open(42)


def test_lab_repr_names_the_file(tmp_path):
    path = _write(tmp_path / "m.onnx", fp16_model())
    lab = onnx_lab.open(path)
    assert "m.onnx" in repr(lab) and "7 nodes" in repr(lab)
    assert "m.onnx" in lab._repr_html_()
    assert "LabModel(" in repr(lab.model)


# --------------------------------------------------------------------------- bad files
def test_missing_path(tmp_path):
    with pytest.raises(ModelLoadError, match="nope.onnx.*does not exist"):
        onnx_lab.open(tmp_path / "nope.onnx")


def test_directory(tmp_path):
    _write(tmp_path / "inside.onnx", fp16_model())
    with pytest.raises(ModelLoadError, match="is a directory.*inside.onnx"):
        onnx_lab.open(tmp_path)


def test_empty_file(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty.onnx.*empty \\(0 bytes\\)"):
        onnx_lab.open(tmp_path / "empty.onnx")


def test_random_bytes(tmp_path):
    p = tmp_path / "random.onnx"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(ModelLoadError, match="random.onnx.*not a valid ONNX"):
        onnx_lab.open(p)


def test_protobuf_that_is_not_a_model(tmp_path):
    # A valid protobuf of another message: parses, but has no graph/opset/ir_version.
    p = tmp_path / "tensor.onnx"
    p.write_bytes(onnx.numpy_helper.from_array(np.arange(50, dtype=np.float32),
                                               "t").SerializeToString())
    with pytest.raises(ModelLoadError, match="tensor.onnx|not an ONNX model|not a valid"):
        onnx_lab.open(p)


def test_truncated_protobuf(tmp_path):
    data = onnx_lab.samples.build("convnet").SerializeToString()
    p = tmp_path / "trunc.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="trunc.onnx.*truncated or corrupted"):
        onnx_lab.open(p)


def test_zip_renamed(tmp_path):
    p = tmp_path / "model.onnx"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("model.onnx", fp16_model().SerializeToString())
    with pytest.raises(ModelLoadError, match="zip archive.*Unzip"):
        onnx_lab.open(p)


def test_text_file(tmp_path):
    p = tmp_path / "lfs.onnx"
    p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 10\n")
    with pytest.raises(ModelLoadError, match="text file.*git-lfs"):
        onnx_lab.open(p)


def test_bad_bytes():
    with pytest.raises(ModelLoadError, match="empty"):
        onnx_lab.open(b"")
    with pytest.raises(ModelLoadError, match="not a valid ONNX"):
        onnx_lab.open(onnx_lab.samples.build("convnet").SerializeToString()[:200])


def test_proto_without_graph():
    with pytest.raises(ModelLoadError, match="not an ONNX model"):
        onnx_lab.open(onnx.ModelProto())


# --------------------------------------------------------------------------- external data
def test_external_data_not_read_at_open(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx")
    lab = onnx_lab.open(path)
    ext = lab.model.external_tensors()
    assert len(ext) == 4 and lab.model.has_external_data
    assert all(t.raw is None for t in ext)  # nothing mapped or read yet
    lab.nodes, lab.initializers, lab.tensors, lab.summary()  # noqa: B018
    assert all(t.raw is None for t in ext)
    table = lab.initializers.set_index("name")
    assert table.loc["fc.weight", "external"]
    assert table.loc["fc.weight", "location"] == "m.onnx.data"
    assert lab.summary()["external_data"] is True
    # Values are read on use, and are right.
    stats = lab.weight_stats("fc.bias").iloc[0]
    want = onnx.numpy_helper.to_array(fp16_model().graph.initializer[3]).astype(np.float64)
    assert stats["max"] == pytest.approx(want.max())


def test_external_data_missing_file(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx", data_name="weights.bin")
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ExternalDataError, match="'weights.bin'.*conv.weight.*is missing"):
        onnx_lab.open(path)


def test_external_data_truncated(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx")
    data = tmp_path / "m.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(ExternalDataError, match="m.onnx.data.*truncated"):
        onnx_lab.open(path)


def _external_model(location: str) -> onnx.ModelProto:
    m = fp16_model()
    t = m.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    return m


@pytest.mark.parametrize("kind", ["relative", "absolute", "nested"])
def test_external_data_escaping_folder_is_refused(tmp_path, kind):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\x00" * 4096)
    location = {"relative": "../secret.bin", "absolute": str(secret),
                "nested": "sub/../../secret.bin"}[kind]
    path = _write(tmp_path / "model" / "m.onnx", _external_model(location))
    with pytest.raises(ExternalDataError, match="conv.weight.*outside the model's folder"):
        onnx_lab.open(path)


def test_external_data_from_bytes_is_refused(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx")
    with pytest.raises(ExternalDataError, match="Pass the path"):
        onnx_lab.open(path.read_bytes())


def test_external_data_without_location(tmp_path):
    path = _write(tmp_path / "m.onnx", _external_model(""))
    with pytest.raises(ExternalDataError, match="conv.weight.*no location"):
        onnx_lab.open(path)


# --------------------------------------------------------------------------- dims at open
def test_unknown_dims_name():
    with pytest.raises(DimError, match="'bacth'.*Did you mean 'batch'"):
        onnx_lab.open(fp16_model(), dims={"bacth": 1})


def test_bad_dim_value():
    with pytest.raises(DimError, match="'batch' must be an int >= 0, got -1"):
        onnx_lab.open(fp16_model(), dims={"batch": -1})
    with pytest.raises(DimError, match="'batch' must be an int >= 0, got 1.5"):
        onnx_lab.open(fp16_model(), dims={"batch": 1.5})
    assert onnx_lab.open(fp16_model(), dims={"batch": 0}).dims == {"batch": 0}


def test_shapes_for_unknown_input():
    with pytest.raises(UnknownNameError, match="input 'y'.*\\['x'\\]"):
        onnx_lab.open(fp16_model(), shapes={"y": [1, 2, 4, 4]})


def test_shapes_wrong_rank():
    with pytest.raises(DimError, match="rank 3.*rank 4"):
        onnx_lab.open(fp16_model(), shapes={"x": [1, 2, 4]})


def test_shapes_conflicting_fixed_dim():
    with pytest.raises(DimError, match="dim 1 is fixed to 2"):
        onnx_lab.open(fp16_model(), shapes={"x": [1, 3, 4, 4]})


def test_every_error_is_a_lab_error():
    for cls in (ModelLoadError, ExternalDataError, DimError, UnknownNameError, InputError):
        assert issubclass(cls, LabError)


# --------------------------------------------------------------------------- never touch
def test_open_writes_nothing_and_keeps_bytes(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx")
    before = _snapshot(tmp_path)
    mtime = os.stat(path).st_mtime_ns
    _touch_everything(onnx_lab.open(path, dims={"batch": 2}))
    assert _snapshot(tmp_path) == before
    assert os.stat(path).st_mtime_ns == mtime


def test_failed_open_writes_nothing(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx")
    (tmp_path / "m.onnx.data").unlink()
    before = _snapshot(tmp_path)
    with pytest.raises(ExternalDataError):
        onnx_lab.open(path)
    assert _snapshot(tmp_path) == before


def test_clone_is_independent():
    lab = onnx_lab.open(fp16_model())
    clone = lab.model.clone()
    assert isinstance(clone, LabModel) and clone.ir is not lab.model.ir
    clone.ir.graph.remove(next(iter(clone.ir.graph)), safe=False)
    clone.invalidate()
    assert len(clone.index) == 6 and len(lab.model.index) == 7
    assert lab.model.to_proto().graph.node[0].op_type == "Cast"


def test_external_data_offset_past_end_without_length(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\x00" * 16)
    m = _external_model("w.bin")
    m.graph.initializer[0].external_data.add(key="offset", value="4096")
    path = _write(tmp_path / "m.onnx", m)
    with pytest.raises(ExternalDataError, match="'w.bin' is truncated.*conv.weight"):
        onnx_lab.open(path)


def test_external_data_located_in_a_model_file_says_so(tmp_path):
    # it was "'self.onnx' is truncated ... Copy the complete data file again"
    m = _external_model("self.onnx")
    m.graph.initializer[0].external_data.add(key="offset", value="1000000")
    path = _write(tmp_path / "self.onnx", m)
    with pytest.raises(ExternalDataError, match="'self.onnx' as its external data file: an "
                                                ".onnx file, which holds a model"):
        onnx_lab.open(path)


def test_external_data_malformed_offset(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\x00" * 16)
    m = _external_model("w.bin")
    m.graph.initializer[0].external_data.add(key="offset", value="abc")
    path = _write(tmp_path / "m.onnx", m)
    with pytest.raises(ExternalDataError, match="conv.weight.*malformed"):
        onnx_lab.open(path)


def test_external_data_in_body_initializers(tmp_path, monkeypatch):
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array(np.arange(64, dtype=np.float32), "body_w")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "body_w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", 1, [64])], [w])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", 1, [64])])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "m",
        [helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", 1, [64])],
        [helper.make_tensor_value_info("y", 1, [64])])
    path = save_external(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                         tmp_path / "m.onnx", data_name="w.bin")
    monkeypatch.chdir(tmp_path.parent)  # relative locations resolve against the model folder
    lab = onnx_lab.open(path)
    r = lab.initializers.iloc[0]
    assert (r["name"], r["external"], r["graph"]) == ("body_w", True, "If_0/then_branch")
    assert lab.weight_stats().iloc[0]["max"] == 63.0
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ExternalDataError, match="'w.bin'.*body_w"):
        onnx_lab.open(path)


def test_model_with_long_printable_names_is_not_text(tmp_path):
    from onnx import helper

    long = "StatefulPartitionedCall/functional_1/very_long_layer_name_" * 4
    nodes = [helper.make_node("Relu", [f"{long}{i}" if i else "x"], [f"{long}{i + 1}"],
                              name=f"{long}node{i}") for i in range(6)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info(f"{long}6", 1, [2])])
    # Long printable header fields fill the first 256 bytes with >97 % printable ASCII.
    m = helper.make_model(g, producer_name="a" * 120, producer_version="b" * 120,
                          domain="c" * 60)
    path = _write(tmp_path / "long.onnx", m)
    assert len(onnx_lab.open(path).nodes) == 6


def test_utf8_text_cut_mid_character(tmp_path):
    p = tmp_path / "page.onnx"
    p.write_bytes(("<html>" + "é" * 400 + "</html>").encode())
    with pytest.raises(ModelLoadError, match="text file"):
        onnx_lab.open(p)


def test_symlink_out_of_the_folder_is_refused_with_a_clear_fix(tmp_path):
    # The Hugging Face cache layout: snapshots/<rev>/ holds links into blobs/.
    path = save_external(fp16_model(), tmp_path / "export" / "m.onnx")
    blobs, snap = tmp_path / "blobs", tmp_path / "snapshots" / "rev"
    blobs.mkdir()
    snap.mkdir(parents=True)
    (path.parent / "m.onnx.data").rename(blobs / "sha2")
    path.rename(blobs / "sha1")
    (snap / "m.onnx").symlink_to(blobs / "sha1")
    (snap / "m.onnx.data").symlink_to(blobs / "sha2")
    with pytest.raises(ExternalDataError, match="symbolic link.*cp -L"):
        onnx_lab.open(snap / "m.onnx")


def test_symlink_inside_the_folder_is_followed(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx", data_name="real.bin")
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "link.bin"
    (tmp_path / "link.bin").symlink_to(tmp_path / "real.bin")
    linked = _write(tmp_path / "linked.onnx", m)
    assert len(onnx_lab.open(linked).weight_stats()) == 4


def test_hard_linked_data_names_the_problem(tmp_path):
    path = save_external(fp16_model(), tmp_path / "m.onnx")
    os.link(tmp_path / "m.onnx.data", tmp_path / "second_name.data")
    lab = onnx_lab.open(path)  # structure needs no weights
    assert len(lab.nodes) == 7
    with pytest.raises(ExternalDataError, match="hard links.*cp, not ln"):
        lab.weight_stats()
    # onnx_lab's own reads (a save) say so first: onnx_ir's ValueError was raw ("internal
    # error", exit 3, on the command line)
    with pytest.raises(ExternalDataError, match="hard links.*cp, not ln"):
        lab.save(tmp_path / "out" / "m.onnx")
    from onnx_lab.cli import main

    assert main(["optimize", str(path), str(tmp_path / "cli.onnx"), "--dims", "batch=1"]) == 2
    # a session reads the small tensors it inlines through onnx_ir: the same error (onnx's
    # reader raised a raw ValidationError)
    with pytest.raises(ExternalDataError, match="hard links"):
        onnx_lab.compare(lab, onnx_lab.open(path), dims={"batch": 1})


def test_hard_linked_data_of_large_weights_still_runs_in_onnxruntime(tmp_path):
    # onnxruntime reads the file by its path: comparing and profiling work (DVC caches,
    # cp -al copies, rsync --link-dest snapshots), only onnx_lab's own reads refuse it
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
                          [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path),
              save_as_external_data=True, location="m.data", size_threshold=0)
    os.link(tmp_path / "m.data", tmp_path / "backup.data")
    assert onnx_lab.compare(path, path).passed
    assert len(onnx_lab.open(path).profile(runs=2, warmup=0).ops) >= 1
    with pytest.raises(ExternalDataError, match="hard links"):
        onnx_lab.open(path).weight_stats()


def test_large_weights_become_views_of_the_file_with_the_same_values(tmp_path):
    # Initializers >= 64 KiB of plain dtypes are read as numpy views of the file's bytes
    # (no protobuf copy); others (small, bfloat16, duplicated names) stay protobuf tensors.
    # Every value and the serialized model must equal what onnx.load reads.
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    big_f = rng.standard_normal((64, 300)).astype(np.float32)
    big_i = np.arange(20_000, dtype=np.int64).reshape(100, 200)
    big_h = rng.standard_normal((40_000,)).astype(np.float16)
    big_b = rng.random(70_000) > 0.5
    bf16 = helper.make_tensor("bf16", TensorProto.BFLOAT16, [40_000],
                              rng.integers(0, 2**16, 40_000, dtype=np.uint16).tobytes(),
                              raw=True)
    inits = [numpy_helper.from_array(big_f, "f"), numpy_helper.from_array(big_i, "i"),
             numpy_helper.from_array(big_h, "h"), numpy_helper.from_array(big_b, "b"),
             numpy_helper.from_array(np.ones(3, np.float32), "small"), bf16]
    inits[0].doc_string = "weight"
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "small"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    lab = onnx_lab.open(path)
    g = lab.model.ir.graph
    ref = onnx.load(str(path))
    for tp in ref.graph.initializer:
        got = g.initializers[tp.name].const_value
        if tp.name != "bf16":
            np.testing.assert_array_equal(got.numpy(), numpy_helper.to_array(tp))
        assert got.tobytes() == tp.raw_data
    # read in the background: a tensor that waits for the read on first use, then a
    # read-only view of the buffer the process owns (not of the file: see mmap=True)
    assert isinstance(g.initializers["f"].const_value, ir.LazyTensor)
    assert g.initializers["f"].const_value.doc_string == "weight"
    assert not g.initializers["f"].const_value.numpy().flags.writeable
    assert isinstance(_buffer_of(g.initializers["f"].const_value.numpy()), bytes)
    assert lab.model.to_proto() == ir.to_proto(ir.serde.deserialize_model(ref))
    out = lab.save(tmp_path / "copy.onnx")
    assert list(onnx.load(str(out)).graph.initializer) == list(ref.graph.initializer)


def _buffer_of(arr: np.ndarray):
    """The object whose memory a numpy view reads."""
    base = arr
    while getattr(base, "base", None) is not None:
        base = base.base
    return base.obj if isinstance(base, memoryview) else base


@pytest.fixture
def held_read(monkeypatch):
    """Holds open's background read of the weights until the returned event is set (set
    anyway after 60 s, so a test that waits on the read fails instead of hanging)."""
    import threading

    from onnx_lab.core import load as load_mod

    go = threading.Event()
    run = load_mod._Reader.run

    def held(self):
        go.wait(60)
        run(self)

    monkeypatch.setattr(load_mod._Reader, "run", held)
    yield go
    go.set()


def test_open_returns_before_the_weights_are_read(tmp_path, held_read):
    # The weights arrive in the background: open, the summary, the tables, the index and a
    # drawing's DOT need none of them; the first use of one waits for the read.
    p = tmp_path / "big.onnx"
    proto = big_weight_model()
    onnx.save(proto, str(p))
    lab = onnx_lab.open(p)
    lab.summary()
    assert len(lab.nodes) == 3 and len(lab.initializers) == 2
    lab.render()
    import threading

    # all of it ran while the read was held (a join would have waited the 60 s out)
    assert any(t.name == "onnx_lab-read" and t.is_alive() for t in threading.enumerate())
    held_read.set()
    np.testing.assert_array_equal(lab.model.graph.initializers["w"].const_value.numpy(),
                                  onnx.numpy_helper.to_array(proto.graph.initializer[0]))
    r = lab.apply("eliminate_identity")
    assert r.modified and r.verify_passed


def test_a_file_replaced_after_open_does_not_mix_into_its_weights(tmp_path, held_read):
    # A program saving atomically (a new file renamed over the old, as lab.save does) while
    # the weights are still being read: the Lab reads the file it parsed, the old one.
    p = tmp_path / "big.onnx"
    proto = big_weight_model(seed=1)
    onnx.save(proto, str(p))
    lab = onnx_lab.open(p)
    other = tmp_path / "other.onnx"
    onnx.save(big_weight_model(seed=2), str(other))
    os.replace(other, p)
    held_read.set()
    np.testing.assert_array_equal(lab.model.graph.initializers["w"].const_value.numpy(),
                                  onnx.numpy_helper.to_array(proto.graph.initializer[0]))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_process_forked_during_the_read_says_so(tmp_path, held_read):
    # multiprocessing's fork start method copies the Lab but not the reading thread: the
    # child's first weight says to open the model there instead of failing on a short buffer
    p = tmp_path / "big.onnx"
    onnx.save(big_weight_model(), str(p))
    lab = onnx_lab.open(p)
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only for the expected error
        code = 1
        try:
            lab.model.graph.initializers["w"].const_value.numpy()
        except ModelLoadError as e:
            code = 0 if "forked" in str(e) and "Open the model in this process" in e.fix else 2
        except BaseException:  # noqa: BLE001 - any other outcome fails the test
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    held_read.set()
    assert lab.model.graph.initializers["w"].const_value.numpy().shape == (256, 256)


def test_a_file_written_in_place_while_its_weights_are_read_is_an_error(tmp_path, held_read):
    # A program writing over the same file (same size, other weights) during the read: the
    # first use of a weight says so instead of mixing two versions; nothing else is lost.
    p = tmp_path / "big.onnx"
    onnx.save(big_weight_model(seed=1), str(p))
    lab = onnx_lab.open(p)
    data = big_weight_model(seed=2).SerializeToString()
    assert len(data) == p.stat().st_size
    with open(p, "r+b") as f:  # in place: the same inode, as onnx.save or an exporter does
        f.write(data)
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # coarse clocks
    held_read.set()
    with pytest.raises(ModelLoadError, match="written to while it was read") as e:
        lab.model.graph.initializers["w"].const_value.numpy()
    assert "Open it again" in e.value.fix
    assert lab.summary() is not None  # the graph is intact


# --------------------------------------------------------------------------- mmap=True
def test_mmap_open_maps_the_file_and_reads_the_same_model(tmp_path):
    import mmap

    p = tmp_path / "big.onnx"
    proto = big_weight_model()
    onnx.save(proto, str(p))
    w = onnx.numpy_helper.to_array(proto.graph.initializer[0])
    read, mapped = onnx_lab.open(p), onnx_lab.open(p, mmap=True)
    assert len(read.index) == len(mapped.index) == 3
    for name in ("w", "b"):
        np.testing.assert_array_equal(mapped.model.graph.initializers[name].const_value.numpy(),
                                      read.model.graph.initializers[name].const_value.numpy())
    arr = mapped.model.graph.initializers["w"].const_value.numpy()
    np.testing.assert_array_equal(arr, w)
    assert not arr.flags.writeable
    assert isinstance(_buffer_of(arr), mmap.mmap)  # a view of the mapped file, not a copy
    _touch_everything(mapped)
    r = mapped.apply("eliminate_identity")
    assert r.modified and r.verify_passed


@pytest.mark.parametrize("damage", ["truncated", "random", "empty"])
def test_mmap_open_reports_bad_files_like_reading(tmp_path, damage):
    p = tmp_path / f"{damage}.onnx"
    data = onnx_lab.samples.build("convnet").SerializeToString()
    p.write_bytes({"truncated": data[: len(data) // 2],
                   "random": np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8)
                   .tobytes(), "empty": b""}[damage])
    with pytest.raises(ModelLoadError, match=f"{damage}.onnx"):
        onnx_lab.open(p, mmap=True)


def test_external_tensors_in_bodies_and_attributes_get_the_folder(tmp_path):
    """load pins the weights of the main graph and of an If body to the model's folder, and
    reads a Constant's external tensor attribute inside the body at open (onnx_ir saves
    attributes' data nowhere: saved, it kept the source's location and offset). The saved
    model computes what the source does, from another folder."""
    from onnx import TensorProto, helper, numpy_helper

    big = np.arange(64, dtype=np.float32)
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(big, "cv"))
    add = helper.make_node("Add", ["c", "wb"], ["y_then"])
    then = helper.make_graph([const, add], "then", [],
                             [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, [64])],
                             [numpy_helper.from_array(big + 1, "wb")])
    other = helper.make_graph([helper.make_node("Identity", ["w"], ["y_else"])], "else", [],
                              [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [64])])
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
        [numpy_helper.from_array(big, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0, convert_attribute=True)
    lab_model = load_model(path)
    tensors = list(ir.external_data._all_tensors(lab_model.graph, include_attributes=True))
    external = [t for t in tensors if isinstance(t, ir.ExternalTensor)]
    assert len(external) == 2  # w, the body's wb; the Constant's value was read
    assert {t.base_dir for t in external} == {str(path.parent)}
    np.testing.assert_array_equal(external[0].numpy(), big)  # read through that folder
    constant = next(t for t in tensors if t.name == "cv")
    np.testing.assert_array_equal(constant.numpy(), big)

    import onnxruntime as ort

    for data in (True, False):
        out = onnx_lab.open(path).save(tmp_path / f"saved_{data}" / "m.onnx",
                                       external_data=data)
        for cond in (True, False):
            got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
                None, {"cond": np.array(cond)})[0]
            np.testing.assert_array_equal(got, big + big + 1 if cond else big)
        saved = onnx.load(str(out), load_external_data=False)
        body = next(a.g for a in saved.graph.node[0].attribute if a.name == "then_branch")
        value = next(n for n in body.node if n.op_type == "Constant").attribute[0].t
        assert not value.external_data and value.raw_data  # written with the model
