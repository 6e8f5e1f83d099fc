"""save: never over the source unless asked, external data rules, the user's file untouched."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _machinery import chain_proto, save_external
from models import big_weight_model

import onnx_lab
from onnx_lab.errors import SaveError
from onnx_lab.runtime.capture import run
from onnx_lab.samples import build


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(build("convnet"), str(path))
    return path


def test_apply_and_save_elsewhere_leave_the_source_bytes_unchanged(model_file, tmp_path):
    before = model_file.read_bytes()
    lab = onnx_lab.open(model_file)
    lab.apply("fuse_conv_bn")
    lab.apply("eliminate_identity")
    out = lab.save(tmp_path / "out" / "opt.onnx")
    assert out.is_file() and not (tmp_path / "out" / "opt.onnx.data").exists()
    assert model_file.read_bytes() == before
    again = onnx_lab.open(out)
    assert len(again.index) == len(lab.index)
    feeds = {"input": np.ones((1, 3, 32, 32), np.float32)}
    np.testing.assert_allclose(run(again.model, feeds)["logits"],
                               run(lab.original.model, feeds)["logits"], atol=1e-4)


def test_saving_over_the_source_is_refused(model_file):
    before = model_file.read_bytes()
    lab = onnx_lab.open(model_file)
    lab.apply("eliminate_identity")
    with pytest.raises(SaveError, match="overwrite=True"):
        lab.save(model_file)
    with pytest.raises(SaveError, match="source"):
        lab.save(str(model_file.parent / "." / model_file.name))
    assert model_file.read_bytes() == before
    lab.save(model_file, overwrite=True)
    assert model_file.read_bytes() != before
    assert len(onnx_lab.open(model_file).index) == len(lab.index)


def test_save_to_a_folder_or_bad_option_is_refused(tmp_path):
    lab = onnx_lab.open(chain_proto())
    with pytest.raises(SaveError, match="folder"):
        lab.save(tmp_path)
    with pytest.raises(SaveError, match="external_data"):
        lab.save(tmp_path / "m.onnx", external_data=3)
    with pytest.raises(SaveError, match="file name"):
        lab.save(tmp_path / "m.onnx", external_data="../elsewhere.data")
    with pytest.raises(SaveError, match="file name"):  # was "the path is a folder (...tmp/)"
        lab.save(tmp_path / "m.onnx", external_data="")


def test_external_data_auto_follows_the_source(tmp_path):
    src = tmp_path / "src" / "convnet.onnx"
    src.parent.mkdir()
    save_external(build("convnet"), src)
    data = src.with_name("convnet.onnx.data")
    snapshot = src.read_bytes(), data.read_bytes()
    lab = onnx_lab.open(src)
    lab.apply("fuse_conv_bn")
    out = lab.save(tmp_path / "opt.onnx")
    assert (tmp_path / "opt.onnx.data").is_file()
    inline = lab.save(tmp_path / "inline.onnx", external_data=False)
    assert not (tmp_path / "inline.onnx.data").exists()
    named = lab.save(tmp_path / "named.onnx", external_data="weights.bin")
    assert (tmp_path / "weights.bin").is_file()
    feeds = {"input": np.ones((1, 3, 32, 32), np.float32)}
    ref = run(lab.model, feeds)["logits"]
    for p in (out, inline, named):
        np.testing.assert_allclose(run(onnx_lab.open(p).model, feeds)["logits"], ref,
                                   atol=1e-5)
    assert (src.read_bytes(), data.read_bytes()) == snapshot


def test_overwriting_the_source_keeps_its_data_file_readable(tmp_path):
    src = tmp_path / "convnet.onnx"
    save_external(build("convnet"), src)
    lab = onnx_lab.open(src)
    lab.apply("eliminate_identity")
    lab.save(src, overwrite=True)
    # the old data file is still read by the versions in memory, so a new one was written
    assert (tmp_path / "convnet.onnx.data.1").is_file()
    feeds = {"input": np.ones((1, 3, 32, 32), np.float32)}
    np.testing.assert_allclose(run(onnx_lab.open(src).model, feeds)["logits"],
                               run(lab.original.model, feeds)["logits"], atol=1e-5)


def test_one_file_save_streams_large_weights_to_the_same_message_as_ir_save(tmp_path):
    # Large initializers (>= 64 KiB) are written field by field; the file must parse to
    # exactly what onnx_ir writes, with doc strings, small and int weights kept.
    import onnx_ir as ir
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    idx = np.arange(40_000, dtype=np.int64)
    wt = numpy_helper.from_array(w, "w")
    wt.doc_string = "big weight"
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Add", ["y", "b"], ["z"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 128])],
        [wt, numpy_helper.from_array(np.ones(128, np.float32), "b"),
         numpy_helper.from_array(idx, "unused_idx")])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(src))
    lab = onnx_lab.open(src)
    out = lab.save(tmp_path / "out.onnx")
    ir.save(lab.model.ir, tmp_path / "ref.onnx")
    got, ref = onnx.load(str(out)), onnx.load(str(tmp_path / "ref.onnx"))
    assert got == ref
    assert [t.name for t in got.graph.initializer] == ["w", "b", "unused_idx"]
    np.testing.assert_array_equal(numpy_helper.to_array(got.graph.initializer[2]), idx)
    x = np.ones((2, 256), np.float32)
    np.testing.assert_allclose(run(onnx_lab.open(out).model, {"x": x})["z"], x @ w + 1,
                               rtol=1e-5)


def _big_model(path):
    proto = big_weight_model(seed=2)
    onnx.save(proto, str(path))
    return onnx.numpy_helper.to_array(proto.graph.initializer[0])


def test_saving_over_a_memory_mapped_source_replaces_it_safely(tmp_path):
    # The weights of a Lab opened with mmap=True are views of the file: the save must not
    # truncate it under them (the process would crash), but write a new file and rename it.
    src = tmp_path / "m.onnx"
    w = _big_model(src)
    lab = onnx_lab.open(src, mmap=True)
    lab.apply("eliminate_identity")
    lab.save(src, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]  # no temporary left
    x = np.ones((2, 256), np.float32)
    # the versions in memory still read the old file's weights...
    np.testing.assert_allclose(run(lab.original.model, {"x": x})["z"], x @ w + 1, rtol=1e-5)
    # ...and the new file holds the new version
    again = onnx_lab.open(src, mmap=True)
    assert [n.op_type for n in again.model.graph] == ["MatMul", "Add"]
    np.testing.assert_allclose(run(again.model, {"x": x})["z"], x @ w + 1, rtol=1e-5)


def test_a_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from onnx_lab.core import save as save_mod

    src = tmp_path / "m.onnx"
    _big_model(src)
    target = tmp_path / "out.onnx"
    target.write_bytes(b"\x08\x08previous")  # an earlier model (ir_version 8, then junk)

    def broken(m, path):
        path.write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(save_mod, "_write_streamed", broken)
    lab = onnx_lab.open(src)
    with pytest.raises(OSError, match="disk full"):
        lab.save(target)
    assert target.read_bytes() == b"\x08\x08previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "out.onnx"]


def test_save_through_a_symlink_replaces_the_linked_file_and_keeps_its_mode(tmp_path):
    src = tmp_path / "m.onnx"
    _big_model(src)
    real = tmp_path / "real.onnx"
    real.write_bytes(b"\x08\x08")  # an earlier (empty) model: ir_version 8
    real.chmod(0o640)
    link = tmp_path / "link.onnx"
    link.symlink_to(real)
    onnx_lab.open(src).save(link)
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert (real.stat().st_mode & 0o777) == 0o640
    assert len(onnx.load(str(real)).graph.node) == 3


@pytest.mark.parametrize("external", [False, True])
@pytest.mark.parametrize("planted", ["link", "file"])
def test_a_link_planted_at_a_temporary_name_is_never_followed(tmp_path, monkeypatch,
                                                              external, planted):
    # The temporary names are random; a hostile co-tenant who guesses one (here: the token is
    # fixed for the first two tries) plants a link to a victim file at it. The save takes
    # another name, the victim is unchanged, nothing stray is left beside the output.
    from onnx_lab.core import save as save_mod

    src = tmp_path / "src" / "m.onnx"
    src.parent.mkdir()
    w = _big_model(src)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    tokens = iter(["1-1-0123abcd", "1-1-0123abcd"])  # pid 1 is alive: never swept
    real_token = save_mod._token
    monkeypatch.setattr(save_mod, "_token", lambda: next(tokens, None) or real_token())
    # the private folder's name, and the names the files took before it had one
    names = [save_mod._tmp_name("o.onnx", "1-1-0123abcd"),
             save_mod._tmp_name("o.onnx", "1-1-0123abcd", ".onnx"),
             save_mod._tmp_name("o.onnx.data", "1-1-0123abcd")]
    for name in names:
        if planted == "link":
            (out_dir / name).symlink_to(victim)
        else:
            (out_dir / name).write_bytes(b"someone else's")
    onnx_lab.open(src).save(out_dir / "o.onnx", external_data=external)
    assert victim.read_bytes() == b"precious"
    for name in names:  # left as they were
        assert (out_dir / name).is_symlink() == (planted == "link")
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        [*names, "o.onnx"] + (["o.onnx.data"] if external else []))
    again = onnx_lab.open(out_dir / "o.onnx")
    x = np.ones((2, 256), np.float32)
    got = run(again.model, {"x": x})
    np.testing.assert_allclose(got["z"], x @ w + 1, rtol=1e-5)


def test_temporary_names_all_taken_is_a_write_error_and_the_victim_is_unchanged(
        tmp_path, monkeypatch):
    from onnx_lab.core import save as save_mod
    from onnx_lab.errors import WriteError

    src = tmp_path / "m.onnx"
    _big_model(src)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious")
    monkeypatch.setattr(save_mod, "_token", lambda: "1-1-0123abcd")
    (tmp_path / save_mod._tmp_name("o.onnx", "1-1-0123abcd")).symlink_to(victim)
    with pytest.raises(WriteError, match="temporary names"):
        onnx_lab.open(src).save(tmp_path / "o.onnx")
    assert victim.read_bytes() == b"precious" and not (tmp_path / "o.onnx").exists()


def test_a_write_error_advises_by_its_cause(tmp_path):
    # a permission refused was answered "Free space or pick a writable folder"
    import errno

    from onnx_lab.core.save import write_error

    target = tmp_path / "m.onnx"
    denied = write_error(target, PermissionError(errno.EACCES, "Permission denied"))
    assert denied.fix.startswith("Pick a folder you can write to") and "space" not in denied.fix
    full = write_error(target, OSError(errno.ENOSPC, "No space left on device"))
    assert "no space left" in full.problem and full.fix.startswith("Free space")


def test_a_large_constant_goes_to_the_data_file(tmp_path):
    # onnx_ir's unload_from_model moves initializers only: a 300 MB Constant read at open was
    # written inside the .onnx file, and one over 2 GB could not be written (a raw
    # EncodeError); a source whose Constant was external keeps a data file with "auto"
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    big = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)  # 64 KB
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(big, "wv")),
         helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])])
    src = tmp_path / "src" / "m.onnx"
    src.parent.mkdir()
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(src),
              save_as_external_data=True, location="m.data", size_threshold=0,
              convert_attribute=True)
    x = np.ones((2, 64), np.float32)
    for data in ("auto", True):
        out = onnx_lab.open(src).save(tmp_path / f"out_{data}" / "m.onnx", external_data=data)
        assert sorted(p.name for p in out.parent.iterdir()) == ["m.onnx", "m.onnx.data"]
        assert out.stat().st_size < 4096  # the Constant's 64 KB are in the data file
        got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
        np.testing.assert_allclose(got, x @ big, rtol=1e-5)
    one = onnx_lab.open(src).save(tmp_path / "one" / "m.onnx", external_data=False)
    assert [p.name for p in one.parent.iterdir()] == ["m.onnx"]


def test_a_file_that_is_no_model_is_not_replaced_without_overwrite(tmp_path):
    # onnx-lab optimize good.onnx other/m.onnx.data (a tab completion away) replaced another
    # model's weights without a word, and that model was lost
    import hashlib

    import onnx

    import onnx_lab
    from onnx_lab.errors import SaveError

    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) { y = Relu(x) }"""), str(src))
    lab = onnx_lab.open(src)
    data = tmp_path / "other.onnx.data"
    data.write_bytes(b"\x00\x00\x80?" * 64)
    script = tmp_path / "notes.py"
    script.write_text("print('mine')\n")
    # weights whose first byte is 0x08, the ir_version tag a model starts with (1 in 256)
    data8 = tmp_path / "third.onnx.data"
    data8.write_bytes(np.array([8 * 2.0 ** -149, 0.5, -3.25, 7.0] * 16, np.float32).tobytes())
    assert data8.read_bytes()[:1] == b"\x08"
    for victim in (data, script, data8):
        before = hashlib.sha256(victim.read_bytes()).hexdigest()
        with pytest.raises(SaveError, match="no ONNX model") as e:
            lab.save(victim)
        assert "overwrite=True" in e.value.fix
        assert hashlib.sha256(victim.read_bytes()).hexdigest() == before
    # an earlier output, an empty file: replaced as before; overwrite=True replaces the rest
    out = tmp_path / "out.onnx"
    lab.save(out)
    lab.save(out)
    (tmp_path / "empty.onnx").write_bytes(b"")
    lab.save(tmp_path / "empty.onnx")
    lab.save(script, overwrite=True)
    assert onnx.load(str(script)).graph.node[0].op_type == "Relu"


def test_a_model_that_does_not_start_with_ir_version_is_replaced_as_an_earlier_output(tmp_path):
    # 874fb2d took a file not starting with the ir_version tag for no model: a model saved
    # without ir_version (its first field the graph) or by onnx.save(format="textproto") read
    # "the file there is no ONNX model" and was refused without overwrite=True
    import onnx

    import onnx_lab
    from onnx_lab.errors import SaveError

    model = onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) { y = Relu(x) }""")
    src = tmp_path / "m.onnx"
    onnx.save(model, str(src))
    lab = onnx_lab.open(src)
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    bare.ClearField("ir_version")
    no_ir = tmp_path / "no_ir.onnx"
    onnx.save(bare, str(no_ir))
    assert no_ir.read_bytes()[:1] != b"\x08"
    text = tmp_path / "text.onnx"
    onnx.save(model, str(text), format="textproto")
    for earlier in (no_ir, text):
        lab.save(earlier)
        assert onnx.load(str(earlier)).graph.node[0].op_type == "Relu"
    # bytes that begin like a field but run past the file's end are still no model
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x3a\xff\xff\xff\x0f" + bytes(32))
    with pytest.raises(SaveError, match="no ONNX model"):
        lab.save(junk)
