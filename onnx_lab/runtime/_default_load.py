"""Loads at onnxruntime's default options, asked of one child process kept for the purpose.

A default-options load (every graph optimization on) may abort the process that makes it (a
C++ assertion on a dynamic-int8 LSTM), so it is never made in the caller's process. A fresh
``python -c`` per question cost ~0.13 s of interpreter start and ``import onnxruntime`` before
onnxruntime even read the model: more than the whole verified ``safe`` preset of a small CNN
(squeezenet: 0.08 s). So one child, started on first use (or ahead of it, :func:`warm`, while
the caller does other work), imports onnxruntime once and answers path after path over a pipe:
a question then costs the session's own set-up (~0.01 s on squeezenet, ~0.15 s on resnet50).

The child is the same: a fresh ``InferenceSession`` per path, log level 4, no memory arena, no
pre-packing; its answer is onnxruntime's first line, or None. A child that dies while loading
(an abort) is that load's answer ("aborted the process (signal 6)") and is started again on
the next question; one that outlives the timeout is killed and the question answered None (no
claim either way), as the one-shot child did; one whose question was interrupted (a
KeyboardInterrupt while it loads) is killed too, so its late answer is never read as the next
question's. It reads its questions from its stdin: when the
parent goes away (even killed) the pipe closes and the child exits. A forked process (the
conformance sweep's workers) starts its own, with a lock of its own, and closes its copies of
the parent's pipes. Where ``select`` cannot wait on a pipe (Windows),
each question runs in a one-shot child.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time

from onnx_lab.runtime._paths import ort_path

logger = logging.getLogger(__name__)

__all__ = ["ask", "ask_ahead", "Pending", "warm", "stop", "ONE_SHOT"]

# One load as both children make it: a fresh session at the default options (no arena, no
# pre-packing, quiet), onnxruntime's first line on a failure, None when it loads.
_LOAD = """
import onnxruntime as ort

def load(path):
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.enable_cpu_mem_arena = False
    so.add_session_config_entry("session.disable_prepacking", "1")
    try:
        ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as e:
        text = str(e).strip()
        return text.splitlines()[0] if text else type(e).__name__
    return None
"""

# The child: answers go to a duplicate of its stdout; fd 1 itself goes to /dev/null, so
# nothing onnxruntime prints from C++ can corrupt them.
_CHILD = """
import json, os, sys
out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
""" + _LOAD + """
out.write("ready\\n")
out.flush()
for line in sys.stdin:
    out.write(json.dumps(load(json.loads(line))) + "\\n")
    out.flush()
"""

#: The one-shot child of a platform without the kept one (same answers: exit 3 and the line).
ONE_SHOT = "import sys\n" + _LOAD + """
problem = load(sys.argv[1])
if problem is not None:
    print(problem)
    sys.exit(3)
"""

_KEEP = os.name == "posix"
# a child that loaded a model this large gives its memory back by exiting
_RELEASE_BYTES = 256 << 20


class _Child:
    """The kept child process and its pipes (one per process: see ``_owner``)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, bufsize=0)
        self.owner = os.getpid()
        self.ready = False
        self.buf = b""

    def line(self, deadline: float) -> bytes | None:
        """The child's next line; None at the deadline; b"" when it died."""
        out = self.proc.stdout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([out], [], [], left)
            if not ready:
                return None
            chunk = os.read(out.fileno(), 1 << 16)
            if not chunk:
                return b""
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\n")
        return head

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


_lock = threading.Lock()
_child: _Child | None = None


def _current() -> _Child:
    """The running child of this process, started when there is none (under ``_lock``)."""
    global _child
    if _child is not None and (_child.owner != os.getpid() or _child.proc.poll() is not None):
        if _child.owner == os.getpid():
            _child.close()
        _child = None  # a forked copy's child belongs to the parent: left alone
    if _child is None:
        _child = _Child()
    return _child


def warm() -> None:
    """Start the child now (no wait): ``import onnxruntime`` there overlaps the caller's work.
    Does nothing where each question runs in a one-shot child."""
    if not _KEEP:
        return
    _settle_own()
    with _lock:
        try:
            _current()
        except OSError as e:  # no process can be started: the question will say so
            logger.debug("cannot start the default-load child: %s", e)


def stop() -> None:
    """End the child (it is started again on the next question)."""
    global _child
    _settle_own()
    with _lock:
        if _child is not None and _child.owner == os.getpid():
            _child.close()
        _child = None


atexit.register(stop)


def _after_fork() -> None:
    """In a forked process: a fresh lock (a thread of the parent may have held it mid-question,
    and the fork's first question waited for it forever) and no child; the copies of the
    parent's child's pipes are closed (held open here, they kept that child from reading its
    end of input: the parent's stop() waited 2 s and killed it while a fork lived)."""
    global _lock, _child, _ahead
    _lock = threading.Lock()
    _ahead = None  # the parent's question: its answer goes to the parent
    c, _child = _child, None
    if c is not None:
        for f in (c.proc.stdin, c.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def ask(path: str | os.PathLike, timeout: float = 600.0) -> tuple[str, str | None]:
    """("ok", None) when onnxruntime at its default options loads the model file at
    ``path``; ("error", its first line); ("signal", "N") when the load ended the child;
    ("exit", "N") for another end; ("timeout", None) past ``timeout`` seconds."""
    return ask_ahead(path, timeout).answer()


class Pending:
    """A question sent to the child, whose answer :meth:`answer` waits for: the caller works
    while the child loads. The child answers one question at a time, so this holds the lock
    from the question to its answer (or :meth:`cancel`); a question asked meanwhile by the
    same thread reads this answer first (:func:`_settle_own`), another thread's waits."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path, self.deadline = path, time.monotonic() + timeout
        self.child: _Child | None = None
        self.thread = threading.get_ident()
        self.got: tuple[str, str | None] | None = None

    def _send(self) -> None:
        """Under ``_lock``: the child's start (if needed) and the question."""
        c = self.child = _current()
        try:
            if not c.ready:
                got = c.line(self.deadline)  # "ready": onnxruntime imported
                if got != b"ready":
                    self.got = _ended(c, got)
                    return
                c.ready = True
            c.proc.stdin.write((json.dumps(self.path) + "\n").encode())
            c.proc.stdin.flush()
        except BrokenPipeError:
            self.got = _ended(c, b"")

    def answer(self) -> tuple[str, str | None]:
        """The answer, as :func:`ask` gives it (waiting for it, at most until the deadline)."""
        global _child, _ahead
        if self.got is not None and self.child is None:
            return self.got
        if self.child is None:  # no kept child on this platform
            self.got = _one_shot(self.path, max(self.deadline - time.monotonic(), 0.0))
            return self.got
        c = self.child
        try:
            if self.got is None:
                got = c.line(self.deadline)
                if got is None or got == b"":
                    self.got = _ended(c, got)
                else:
                    answer = json.loads(got)
                    if _nbytes(self.path) > _RELEASE_BYTES:
                        c.close()
                        _child = None
                    self.got = ("ok", None) if answer is None else ("error", str(answer))
        except BaseException:
            # interrupted while the child works on the question (a notebook's interrupt
            # sends SIGINT to the kernel alone): its answer would be read as the next
            # question's, so it goes and the next question starts a fresh one
            _ended(c, None)
            raise
        finally:
            self.child = None
            _ahead = None
            _lock.release()
        return self.got

    def cancel(self) -> None:
        """Give the question up (the caller's block failed): the child goes, as an
        interrupted question's does."""
        global _ahead
        if self.child is None:
            return
        try:
            if self.got is None:
                _ended(self.child, None)
        finally:
            self.child = None
            _ahead = None
            _lock.release()


_ahead: Pending | None = None


def _settle_own() -> None:
    """A question this thread sent ahead and has not read yet is read now (its answer kept
    on it): the lock it holds would otherwise make this thread wait for itself."""
    p = _ahead
    if p is not None and p.thread == threading.get_ident() and p.child is not None:
        p.answer()


def ask_ahead(path: str | os.PathLike, timeout: float = 600.0) -> Pending:
    """Send the question of :func:`ask` now and return at once; ``.answer()`` waits for it,
    ``.cancel()`` gives it up. Until then other threads' questions wait."""
    # absolute: the kept child stays in the folder it started in, and a relative path (the
    # save's temporary folder beside its target) was looked for there after a chdir
    global _ahead
    p = Pending(ort_path(path), timeout)  # absolute, and UTF-8 (the child's binding)
    if not _KEEP:
        return p
    _settle_own()
    _lock.acquire()
    try:
        p._send()
    except BaseException:
        try:
            if p.child is not None and p.got is None:
                _ended(p.child, None)  # it may have the question: its answer is nobody's
        finally:
            _lock.release()
        raise
    if p.got is not None:  # the child ended before the question: nothing to wait for
        p.child = None
        _lock.release()
        return p
    _ahead = p
    return p


def _ended(c: _Child, got: bytes | None) -> tuple[str, str | None]:
    """The answer of a child that did not answer (None: timed out; else it died); the
    child is gone after it. Under ``_lock``."""
    global _child
    _child = None
    if got is None:
        c.proc.kill()
        c.close()
        return "timeout", None
    c.close()
    code = c.proc.returncode
    return ("signal", str(-code)) if code is not None and code < 0 else ("exit", str(code))


def _one_shot(path: str, timeout: float) -> tuple[str, str | None]:
    try:
        done = subprocess.run([sys.executable, "-c", ONE_SHOT, path], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", None
    if done.returncode == 0:
        return "ok", None
    if done.returncode < 0:
        return "signal", str(-done.returncode)
    lines = (done.stdout.strip() or done.stderr.strip()).splitlines()
    return ("error", lines[-1]) if lines else ("exit", str(done.returncode))


def _nbytes(path: str) -> int:
    """The model file's size with its data file (``<name>.data``, as onnx_lab writes it)."""
    total = 0
    for p in (path, path + ".data"):
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total
