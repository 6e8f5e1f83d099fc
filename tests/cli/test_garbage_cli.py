"""Issue 32: an unreadable model file and garbage option values are one line
``onnx-lab: error: ...`` with exit code 2 in every subcommand, never a traceback."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from models import big_weight_model

from onnx_lab.cli import main


def _one_line(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-lab: error: "), err
    assert "Traceback" not in err
    return lines[0]


@contextlib.contextmanager
def _as_another_user() -> Iterator[None]:
    """File permissions apply (root reads any file: act as 'nobody' for the block)."""
    if os.geteuid() != 0:
        yield
        return
    # what the commands import on use, imported while the interpreter's files are readable
    import onnxruntime  # noqa: F401
    import pandas  # noqa: F401

    import onnx_lab.numerics.compare  # noqa: F401
    import onnx_lab.numerics.diff  # noqa: F401
    import onnx_lab.numerics.precision  # noqa: F401
    import onnx_lab.numerics.repro  # noqa: F401
    import onnx_lab.profiling.run  # noqa: F401
    import onnx_lab.render.report  # noqa: F401
    import onnx_lab.reporting  # noqa: F401
    import onnx_lab.transforms.passes  # noqa: F401
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def unreadable() -> Iterator[Path]:
    """A model file nobody may read, in a folder everyone may enter (outside pytest's
    private tmp folder, which another user cannot)."""
    folder = Path(tempfile.mkdtemp(prefix="onnx_lab_unreadable_"))
    os.chmod(folder, 0o777)
    p = folder / "m.onnx"
    onnx.save(big_weight_model(seed=3), str(p))
    os.chmod(p, 0)
    yield p
    os.chmod(p, 0o600)
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()


@pytest.mark.parametrize("argv", [
    ["summary", "{m}"], ["tables", "{m}", "--out", "{t}/t"], ["weights", "{m}"],
    ["render", "{m}", "-o", "{t}/g.dot"], ["report", "{m}", "-o", "{t}/r.html"],
    ["patterns", "{m}"], ["optimize", "{m}", "{t}/o.onnx"],
    ["extract", "{m}", "{t}/e.onnx", "--outputs", "y"], ["fix-dims", "{m}", "{t}/f.onnx", "n=1"],
    ["compare", "{m}", "{m}"], ["repro", "{m}", "{m}", "{t}/r"], ["diff", "{m}", "{m}"],
    ["profile", "{m}", "--runs", "1"], ["cost", "{m}"], ["check", "{m}"],
    ["precision", "{m}"],
])
def test_an_unreadable_model_is_one_line_in_every_command(capsys, unreadable, argv):
    t = unreadable.parent
    args = [a.replace("{m}", str(unreadable)).replace("{t}", str(t)) for a in argv]
    with _as_another_user():
        line = _one_line(capsys, args)
    assert "permission denied" in line.lower() and str(unreadable) in line


@pytest.fixture
def model(tmp_path) -> Path:
    p = tmp_path / "m.onnx"
    onnx.save(big_weight_model(seed=7), str(p))
    return p


@pytest.mark.parametrize("argv,flag", [
    (["profile", "{m}", "--threads", "99999999999999999999999"], "--threads"),
    (["profile", "{m}", "--threads", "99999999999"], "--threads"),
    (["profile", "{m}", "--runs", "99999999999999999999"], "--runs"),
    (["profile", "{m}", "--budget", "nan"], "--budget"),
    (["profile", "{m}", "--budget", "-1"], "--budget"),
    (["report", "{m}", "-o", "{t}/r.html", "--max-views", "-1"], "--max-views"),
    (["audit", "{m}", "--out", "{t}/a", "--workers", "99999999999999999999"], "--workers"),
    (["audit", "{m}", "--out", "{t}/a", "--budget", "inf"], "--budget"),
    (["precision", "{m}", "--tolerance", "nan"], "--tolerance"),
    (["precision", "{m}", "--block-size", "-1"], "--block-size"),
    (["compare", "{m}", "{m}", "--llm", "--new-tokens", "-1"], "--new-tokens"),
    (["summary", "sample:transformer_block", "--dims", "batch=99999999999999999999999"],
     "--dims"),
    (["summary", "sample:transformer_block", "--dims", "batch=" + "9" * 5000], "--dims"),
    (["summary", "sample:transformer_block", "--dims", "batch=1,batch=2"], "two sizes"),
    (["summary", "sample:transformer_block", "--dims", "batch=1", "--dims", "batch=4"],
     "two sizes"),
    (["fix-dims", "sample:transformer_block", "{t}/f.onnx", "batch=1", "--dims", "batch=2"],
     "two sizes"),
    (["compare", "{m}", "{m}", "--shape", "x:99999999999999x256"], "--shape"),
    (["report", "{m}", "-o", "/"], "is a folder"),
    (["compare", "sample:transformer_block", "sample:transformer_block", "--dims",
      "batch=99999999999,seq=9999999"], "memory limit"),
    (["profile", "sample:transformer_block", "--dims", "batch=999999999,seq=99999", "--runs",
      "1"], "memory limit"),
])
def test_garbage_values_are_one_line(capsys, model, tmp_path, argv, flag):
    args = [a.replace("{m}", str(model)).replace("{t}", str(tmp_path)) for a in argv]
    assert flag in _one_line(capsys, args)


@pytest.mark.parametrize("address", ["abc", "tcp://", "tcp://127.0.0.1:99999", "tcp://[::1"])
def test_a_dask_scheduler_that_is_not_an_address_is_one_line(capsys, model, tmp_path, address):
    line = _one_line(capsys, ["audit", str(model), "--out", str(tmp_path / "a"),
                              "--scheduler", address])
    assert "not a Dask scheduler address" in line or "needs dask.distributed" in line


def test_sane_values_still_work(capsys, model, tmp_path):
    """No false alarm: the bounds leave ordinary values alone."""
    assert main(["profile", str(model), "--runs", "2", "--threads", "2", "--warmup", "1"]) == 0
    assert main(["summary", "sample:transformer_block", "--dims", "batch=2,seq=16"]) == 0
    # one dim given twice with one size is no contradiction
    assert main(["summary", "sample:transformer_block", "--dims", "batch=2", "--dims",
                 "batch=2"]) == 0
    capsys.readouterr()


def _relu_model(path: Path) -> Path:
    """One Relu: no pass of the safe preset changes it, so no step is verified."""
    onnx.save(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) { y = Relu(x) }"""), str(path))
    return path


@pytest.mark.parametrize("feeds", ["nope.npz", "not_npz.json"])
def test_a_feeds_file_is_read_even_when_no_step_is_verified(capsys, tmp_path, feeds):
    # the file was read only by a step's verification: on a model no pass changes,
    # optimize --feeds nope.npz saved the output and exited 0
    m = _relu_model(tmp_path / "m.onnx")
    (tmp_path / "not_npz.json").write_text('{"x": [1, 2, 3]}')
    out = tmp_path / "o.onnx"
    line = _one_line(capsys, ["optimize", str(m), str(out), "--feeds", str(tmp_path / feeds)])
    assert str(tmp_path / feeds) in line and not out.exists()
    import onnx_lab
    from onnx_lab.errors import InputError

    lab = onnx_lab.open(m)
    with pytest.raises(InputError, match="(?i)feeds file"):
        lab.apply_preset("safe", verify={"feeds": str(tmp_path / feeds)})
    with pytest.raises(InputError, match="(?i)feeds file"):
        lab.apply("fold_constants", verify={"feeds": str(tmp_path / feeds)})
    np.savez(tmp_path / "ok.npz", x=np.ones((2, 3), np.float32))  # a good file still works
    assert main(["optimize", str(m), str(out), "--feeds", str(tmp_path / "ok.npz")]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("flag", ["--feeds", "--replace-init"])
def test_a_file_that_is_no_npy_is_not_called_pickled_data(capsys, tmp_path, flag):
    # numpy.load says "This file contains pickled (object) data. If you trust the file you can
    # load it unsafely using the `allow_pickle=` keyword..." of any file that is no .npy/.npz:
    # a JSON is no pickle, and the advice is one to never follow; a folder "did not exist"
    m = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x) => (float[2, 3] y) <float[3] W = {1.0, 2.0, 3.0}> { y = Add(x, W) }
        """), str(m))
    (tmp_path / "x.json").write_text('{"x": [1, 2, 3]}')
    (tmp_path / "d").mkdir()
    out = str(tmp_path / "o.onnx")
    for path, words in ((tmp_path / "x.json", "starts with b'{\"x\""), (tmp_path / "d", "folder")):
        value = str(path) if flag == "--feeds" else f"W={path}"
        argv = ["optimize", str(m), out, "--feeds", value] if flag == "--feeds" else \
            ["edit", str(m), out, "--replace-init", value]
        line = _one_line(capsys, argv)
        assert words in line and "pickle" not in line and "does not exist" not in line, line


def test_a_report_against_a_missing_model_is_refused_before_writing(capsys, model, tmp_path):
    # it wrote the report with two failed-section notes and exited 0: a typo in --against
    # read as a finished report
    out = tmp_path / "r.html"
    line = _one_line(capsys, ["report", str(model), "-o", str(out), "--against",
                              str(tmp_path / "nope.onnx")])
    assert "nope.onnx" in line and "does not exist" in line
    assert not out.exists()
    assert main(["report", str(model), "-o", str(out), "--against", str(model)]) == 0
    assert out.exists()
    capsys.readouterr()


def test_an_empty_model_path_is_called_empty(capsys):
    # Path('') is '.': it read "'<the current folder>' is a directory, not a model file"
    line = _one_line(capsys, ["summary", ""])
    assert "path is empty" in line and "directory" not in line


def test_an_empty_provider_list_names_the_fix(model):
    import onnx_lab
    from onnx_lab.errors import ProviderError

    lab = onnx_lab.open(model)
    with pytest.raises(ProviderError) as e:  # "No provider could profile the model." alone
        lab.profile(providers=[])
    assert "No execution provider given" in str(e.value) and "CPUExecutionProvider" in \
        e.value.fix


@pytest.mark.parametrize("argv,flag", [
    # each option was dropped without a word
    (["profile", "{m}", "--prompt", "8", "--runs", "1"], "--generate"),
    (["optimize", "{m}", "{t}/o.onnx", "--no-verify", "--feeds", "{t}/f.npz"], "--no-verify"),
    (["audit", "{m}", "--out", "{t}/a", "--engine", "local", "--scheduler",
      "tcp://127.0.0.1:8786"], "engine='local'"),
])
def test_an_option_that_would_be_ignored_is_refused(capsys, model, tmp_path, argv, flag):
    np.savez(tmp_path / "f.npz", x=np.zeros((1, 1), np.float32))
    args = [a.replace("{m}", str(model)).replace("{t}", str(tmp_path)) for a in argv]
    assert flag in _one_line(capsys, args)
    assert not (tmp_path / "o.onnx").exists() and not (tmp_path / "a").exists()


def test_an_address_that_answers_but_not_as_dask_says_so(capsys, model, tmp_path):
    # an HTTP server (a dashboard's port, a proxy) at the address: its first bytes read as a
    # frame length, and the message was "Cannot reach ...: Unable to allocate 3.07 EiB"
    import socket
    import threading

    pytest.importorskip("distributed")
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    try:
        line = _one_line(capsys, ["audit", str(model), "--out", str(tmp_path / "a"),
                                  "--scheduler", f"tcp://127.0.0.1:{srv.getsockname()[1]}"])
    finally:
        srv.close()
    assert "but not as a Dask scheduler" in line and "8786" in line, line


def test_a_tls_address_without_certificates_is_not_called_no_dask_scheduler(capsys, model,
                                                                              tmp_path):
    # distributed refuses a tls:// address without TLS settings before it connects (a
    # TypeError); a848c7f took it for a reply and read "Something answers at 'tls://...', but
    # not as a Dask scheduler ... Check the port" at a real TLS scheduler
    pytest.importorskip("distributed")
    with socket_server() as port:
        line = _one_line(capsys, ["audit", str(model), "--out", str(tmp_path / "a"),
                                  "--scheduler", f"tls://127.0.0.1:{port}"])
    assert "takes TLS" in line and "certificates" in line, line
    assert "not as a Dask scheduler" not in line, line


@contextlib.contextmanager
def socket_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


def test_a_scheduler_that_accepts_and_never_answers_reads_cannot_reach(capsys, model, tmp_path,
                                                                       monkeypatch):
    # a real scheduler stopped (SIGSTOP) or swamped: the kernel accepts the connection, no
    # handshake comes back, and distributed's Client(address, timeout="30s") waited for good
    # (onnx-lab audit --scheduler hung with no word)
    pytest.importorskip("distributed")
    from onnx_lab.zoo import _engine

    monkeypatch.setattr(_engine, "CONNECT_TIMEOUT_S", 1.0, raising=False)
    monkeypatch.setattr(_engine, "CONNECT_GRACE_S", 3.0, raising=False)
    done: list[str] = []

    def audit() -> None:
        done.append(_one_line(capsys, ["audit", str(model), "--out", str(tmp_path / "a"),
                                       "--scheduler", f"tcp://127.0.0.1:{port}"]))

    import threading

    with socket_server() as port:
        t = threading.Thread(target=audit, daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "audit --scheduler still waits on a silent scheduler"
    assert "Cannot reach the Dask scheduler" in done[0] and "answered in 4 s" in done[0], done
