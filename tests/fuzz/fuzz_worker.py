"""The fuzz harness's fork server: every case runs in its own child process with limits.

Started once per fuzz run (``Worker()``), it imports onnx_lab and the heavy libraries once and
then forks one child per case, so a case costs a fork (~10 ms) instead of an interpreter start
(~1 s). The child sets its own limits (address space, CPU seconds, a wall-clock alarm), writes
the case's files into a fresh folder, runs :func:`fuzz_ops.run_case` and reports a dict through
a pipe; the server adds what only the parent can see: the exit status or signal, the wall time
and the child's peak RSS (``wait4``), and kills a child that outlives its time limit.

Outcomes (``result["outcome"]``):

- ``result``: every operation returned (or the source was refused with a LabError);
- ``lab_error``: some operation raised a LabError (the case is still fine);
- ``skip``: the case cannot be expressed as that source kind (bytes that do not parse as a
  ModelProto cannot be handed over as one);
- ``error``: an exception that is not a LabError (a bug), with its traceback;
- ``violation``: an invariant broke (a file outside the model's folder was read, a source
  file changed, step 0 of a history changed, a CLI error that is not one line...);
- ``timeout``, ``memory`` (MemoryError, or a peak RSS over the memory limit), ``crash``
  (killed by a signal, or died without a report).

Run as a script it serves length-prefixed pickles on stdin/stdout (see :class:`Worker`).
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOOD = ("result", "lab_error", "skip")
# A secret every case may try to read through external data: an absolute path (the same for
# every worker, so generated locations can name it) and ``secret.bin`` next to the folder the
# model lies in. The audit hook of the child reports any open() of either.
ABS_SECRET = "/tmp/onnx_lab_fuzz_secret.bin"
SECRET = b"SECRET!!" * 512


def _frame_write(f, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def _frame_read(f) -> Any:
    head = f.read(8)
    if len(head) < 8:
        raise EOFError
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(f.read(n))


class Worker:
    """A fork server in a subprocess: ``Worker().run(case)`` returns the case's result dict.

    Args:
        time_limit: wall seconds per case (the child is killed after it; also its CPU limit).
        memory_limit: bytes of peak RSS per case (larger is the ``memory`` outcome); the
            child's address space is capped at twice that so a runaway allocation fails
            fast instead of taking the machine.
    """

    def __init__(self, time_limit: float = 20.0, memory_limit: int = 2 << 30) -> None:
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(time_limit), str(memory_limit)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(HERE))

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        """Run one case (see fuzz_cases) and return its result dict."""
        _frame_write(self.proc.stdin, case)
        return _frame_read(self.proc.stdout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------ the server
def _prepare(root: Path, case: dict[str, Any]) -> Path:
    """Write the case's files into a fresh folder under ``root``; returns it."""
    d = Path(tempfile.mkdtemp(prefix="case", dir=root))
    (d / "secret.bin").write_bytes(SECRET)
    (d / "model").mkdir()
    (d / "out").mkdir()
    for rel, content in case.get("files", {}).items():
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple) and content[0] == "link":
            os.symlink(content[1], p)
        elif isinstance(content, tuple) and content[0] == "dir":
            p.mkdir(exist_ok=True)
        else:
            p.write_bytes(content)
    return d


def _child(case: dict[str, Any], d: Path, wfd: int, time_limit: float,
           memory_limit: int) -> None:
    """In the forked child: limits, then the case; the report goes to ``wfd``."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(time_limit) + 1)
    cpu = int(time_limit) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (2 * memory_limit, 2 * memory_limit))
    # Output of the case (the CLI's prints, onnxruntime's C++ logging) goes to files.
    out = os.open(d / "stdout.txt", os.O_WRONLY | os.O_CREAT, 0o600)
    err = os.open(d / "stderr.txt", os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.chdir(d / "model")
    import fuzz_ops

    try:
        report = fuzz_ops.run_case(case, d)
    except MemoryError:
        report = {"outcome": "memory", "detail": "MemoryError"}
    except BaseException as e:  # noqa: BLE001 - the harness itself must report, not die
        report = {"outcome": "error", "detail": f"harness: {type(e).__name__}: {e}",
                  "traceback": traceback.format_exc()}
    data = pickle.dumps(report)
    with os.fdopen(wfd, "wb") as w:
        w.write(data)
    os._exit(0)


def _serve_one(case: dict[str, Any], root: Path, time_limit: float, memory_limit: int
               ) -> dict[str, Any]:
    d = _prepare(root, case)
    r, w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            _child(case, d, w, time_limit, memory_limit)
        finally:
            os._exit(70)
    os.close(w)
    chunks: list[bytes] = []
    timed_out = False
    deadline = t0 + time_limit + 3
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    report: dict[str, Any]
    try:
        report = pickle.loads(b"".join(chunks)) if chunks else {}
    except Exception:  # noqa: BLE001 - a half-written report is a crash
        report = {}
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if timed_out or sig in (signal.SIGALRM, signal.SIGXCPU):
            report = {"outcome": "timeout", "detail": f"over {time_limit} s"}
        elif not report:
            report = {"outcome": "crash", "detail": f"killed by {signal.Signals(sig).name}"}
    elif not report:
        report = {"outcome": "crash", "detail": f"exit status {os.WEXITSTATUS(status)}"}
    report["seconds"] = round(wall, 3)
    report["max_rss"] = usage.ru_maxrss * 1024
    if report["max_rss"] > memory_limit and report.get("outcome") in GOOD:
        report["outcome"] = "memory"
        report["detail"] = f"peak RSS {report['max_rss'] / 2**30:.2f} GiB"
    for name in ("stderr", "stdout"):
        try:
            report.setdefault(name, (d / f"{name}.txt").read_text(errors="replace")[-4000:])
        except OSError:
            pass
    shutil.rmtree(d, ignore_errors=True)
    return report


def _preload() -> None:
    """Import everything a case may use, once, before any fork."""
    import warnings

    warnings.simplefilter("ignore")
    import fuzz_ops  # noqa: F401 - imports onnx_lab, onnx, onnx_ir, onnxruntime, pandas...

    fuzz_ops.preload()


def serve(time_limit: float, memory_limit: int) -> None:
    """Answer cases from stdin until it closes."""
    _preload()
    if not os.path.exists(ABS_SECRET):
        Path(ABS_SECRET).write_bytes(SECRET)
    root = Path(tempfile.mkdtemp(prefix="onnx_lab_fuzz_"))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the frames
    try:
        while True:
            try:
                case = _frame_read(stdin)
            except EOFError:
                return
            _frame_write(stdout, _serve_one(case, root, time_limit, memory_limit))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    serve(float(sys.argv[1]), int(sys.argv[2]))
