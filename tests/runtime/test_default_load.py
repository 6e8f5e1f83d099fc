"""The child kept for loads at onnxruntime's default options (runtime/_default_load.py): one
process answers question after question, and one that dies, hangs or belongs to a forked
parent never answers a question wrongly."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_lab.runtime import _default_load
from onnx_lab.runtime.session import default_path_problem

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the kept child is POSIX-only")


def _model(path, *, broken: bool):
    """Range(start, limit, delta) behind an If whose condition onnxruntime's default optimizer
    folds (the ``test_affine_grid_2d_expanded`` shape): ``broken`` feeds it 1-element
    tensors, which its shape inference refuses once the branch is inlined."""
    shape = [1] if broken else []
    then = helper.make_graph(
        [helper.make_node("Range", ["s", "l", "d"], ["r"])], "then", [],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o"])], "else", [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(True), "c"),
         numpy_helper.from_array(np.zeros(shape, np.float32), "s"),
         numpy_helper.from_array(np.full(shape, 3, np.float32), "l"),
         numpy_helper.from_array(np.ones(shape, np.float32), "d")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_one_child_answers_every_question(tmp_path):
    good = _model(tmp_path / "good.onnx", broken=False)
    bad = _model(tmp_path / "bad.onnx", broken=True)
    assert default_path_problem(good) is None
    pid = _default_load._child.proc.pid
    problem = default_path_problem(bad)
    assert problem is not None and "Range" in problem and "scalar" in problem, problem
    assert default_path_problem(good) is None
    assert _default_load._child.proc.pid == pid  # the same process answered all three


def test_a_relative_path_is_read_from_the_callers_folder(tmp_path, monkeypatch):
    # the kept child stays where it started: after a chdir (a test's, a notebook's), a save's
    # relative temporary 'out.onnx.tmp/out.onnx' was "File doesn't exist" there
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    _model(tmp_path / "a" / "m.onnx", broken=False)
    assert default_path_problem("m.onnx") is None  # the child starts here, in a/
    _model(tmp_path / "b" / "only_here.onnx", broken=True)
    monkeypatch.chdir(tmp_path / "b")
    problem = default_path_problem("only_here.onnx")
    assert problem is not None and "Range" in problem, problem


def test_a_child_that_died_is_started_again(tmp_path):
    good = _model(tmp_path / "good.onnx", broken=False)
    assert default_path_problem(good) is None
    dead = _default_load._child.proc
    os.kill(dead.pid, signal.SIGKILL)  # as an abort inside onnxruntime ends it
    dead.wait()
    assert default_path_problem(good) is None
    assert _default_load._child.proc.pid != dead.pid


def test_a_question_past_its_timeout_claims_nothing(tmp_path):
    good = _model(tmp_path / "good.onnx", broken=False)
    _default_load.stop()
    assert _default_load.ask(good, timeout=1e-6) == ("timeout", None)  # onnxruntime not in
    assert _default_load._child is None  # killed, not left to answer the next question
    assert default_path_problem(good) is None


def _in_fork(job) -> bytes:
    """``job()``'s bytes, run in a forked process (b"" when it hung past 20 s)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            signal.alarm(20)
            os.write(w, job())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 100)
    os.waitpid(pid, 0)
    os.close(r)
    return got


def test_a_forked_process_asks_its_own_child(tmp_path):
    good = _model(tmp_path / "good.onnx", broken=False)
    bad = _model(tmp_path / "bad.onnx", broken=True)
    assert default_path_problem(good) is None
    parent_child = _default_load._child.proc.pid

    def job() -> bytes:  # the conformance sweep's workers are forks of a process that asked
        ok = default_path_problem(bad) is not None and \
            _default_load._child.proc.pid != parent_child
        _default_load.stop()
        return b"1" if ok else b"0"

    assert _in_fork(job) == b"1"
    assert default_path_problem(good) is None  # the parent's child is untouched
    assert _default_load._child.proc.pid == parent_child


def test_warm_starts_without_waiting(tmp_path):
    _default_load.stop()
    _default_load.warm()
    c = _default_load._child
    assert c is not None and not c.ready  # started, its "ready" not waited for
    assert default_path_problem(_model(tmp_path / "good.onnx", broken=False)) is None
    assert _default_load._child is c and c.ready


def test_an_interrupted_question_leaves_no_answer_behind(tmp_path):
    # a notebook's interrupt (SIGINT to the kernel alone) while the child loads: its late
    # answer was read as the next question's ("ok" for a model onnxruntime refuses, and the
    # refusal given to the next good one). A FIFO holds the child in its load until fed.
    good = _model(tmp_path / "good.onnx", broken=False)
    bad = _model(tmp_path / "bad.onnx", broken=True)
    assert default_path_problem(good) is None
    fifo = tmp_path / "slow.onnx"
    os.mkfifo(fifo)

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(KeyboardInterrupt):
            default_path_problem(fifo)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    try:  # a child still waiting on the FIFO reads a good model and answers "ok" late
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        pass  # no reader: the interrupted child is gone
    else:
        os.write(fd, good.read_bytes())
        os.close(fd)
    problem = default_path_problem(bad)
    assert problem is not None and "Range" in problem, problem
    assert default_path_problem(good) is None


def test_a_fork_while_another_thread_asks_does_not_hang(tmp_path):
    # the lock a thread of the parent held mid-question was copied held into the fork,
    # whose first question then waited for it forever
    import threading

    good = _model(tmp_path / "good.onnx", broken=False)
    fifo = tmp_path / "slow.onnx"
    os.mkfifo(fifo)  # holds the thread's question open until fed
    t = threading.Thread(target=default_path_problem, args=(fifo,), kwargs={"timeout": 30})
    t.start()
    try:
        for _ in range(100):  # until the thread holds the lock
            if _default_load._lock.locked():
                break
            time.sleep(0.05)
        assert _default_load._lock.locked()
        got = _in_fork(lambda: b"ok" if default_path_problem(good) is None else b"refused")
        assert got == b"ok"
    finally:
        fd = os.open(fifo, os.O_WRONLY)  # the thread's question ends
        os.write(fd, good.read_bytes())
        os.close(fd)
        t.join()


def test_a_living_fork_does_not_hold_the_parents_child(tmp_path):
    # the fork's copies of the pipes kept the parent's child from reading the end of its
    # input: stop() waited 2 s and killed it while a fork lived
    good = _model(tmp_path / "good.onnx", broken=False)
    assert default_path_problem(good) is None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # lives until the parent is done
        os._exit(0)
    os.close(r)
    try:
        t0 = time.monotonic()
        proc = _default_load._child.proc
        _default_load.stop()
        took = time.monotonic() - t0
        assert proc.returncode == 0 and took < 1.5, (proc.returncode, took)
    finally:
        os.close(w)
        os.waitpid(pid, 0)


def test_a_question_sent_ahead_is_answered_after_the_callers_work(tmp_path):
    # the preset sends its final load check before the final verification run and reads the
    # answer after it; meanwhile the same thread may ask again (it reads its own answer
    # first instead of waiting on itself), and another thread's question waits its turn
    import threading

    good = _model(tmp_path / "good.onnx", broken=False)
    bad = _model(tmp_path / "bad.onnx", broken=True)
    pending = _default_load.ask_ahead(bad)
    assert default_path_problem(good) is None  # same thread, while the first is pending
    how, text = pending.answer()
    assert how == "error" and "Range" in text, (how, text)
    assert pending.answer() == (how, text)  # asked twice, the same answer

    pending = _default_load.ask_ahead(bad)
    seen = []
    other = threading.Thread(target=lambda: seen.append(default_path_problem(good)))
    other.start()
    other.join(0.5)
    assert other.is_alive()  # it waits: one question at a time
    assert pending.answer()[0] == "error"
    other.join(60)
    assert seen == [None]


def test_a_question_given_up_leaves_no_answer_behind(tmp_path):
    good = _model(tmp_path / "good.onnx", broken=False)
    bad = _model(tmp_path / "bad.onnx", broken=True)
    pending = _default_load.ask_ahead(bad)
    pending.cancel()  # the caller's work failed: the child goes with its answer
    pending.cancel()
    assert default_path_problem(good) is None  # not the bad model's late answer
    assert "Range" in default_path_problem(bad)


def test_the_load_ahead_is_cached_on_the_model(tmp_path):
    import onnx_lab
    from onnx_lab.runtime.session import default_load_ahead, default_load_problem

    bad = onnx_lab.open(_model(tmp_path / "bad.onnx", broken=True)).model
    with default_load_ahead(bad):
        pass
    assert bad.is_cached(("default_load_problem",))
    assert "Range" in default_load_problem(bad)

    good = onnx_lab.open(_model(tmp_path / "good.onnx", broken=False)).model
    with pytest.raises(KeyboardInterrupt), default_load_ahead(good):
        raise KeyboardInterrupt  # given up: nothing cached, nothing left in the pipe
    assert not good.is_cached(("default_load_problem",))
    assert default_load_problem(good) is None
