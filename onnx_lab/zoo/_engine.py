"""Where the audits of single models run: one child process per model, started from a local
thread pool or from the workers of a Dask distributed cluster.

:func:`run_isolated` is the task both engines run. It starts ``python -m onnx_lab.zoo._worker``
in a new session (its own process group), with the memory limit applied by the child itself and
a wall-clock timeout enforced here (the whole group is killed). Whatever happens to the child
(a crash, a kill, a hang, an allocation failure) comes back as a result dict, never as an
exception: one bad model cannot take the audit down.

The local engine is a ``concurrent.futures.ThreadPoolExecutor`` (each thread only waits on its
child); the Dask engine submits the same function with ``Client.submit`` and collects results
with ``distributed.as_completed``. Both yield results in the order they complete.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from onnx_lab.errors import InputError
from onnx_lab.zoo._worker import MEMORY_SIGNS

logger = logging.getLogger(__name__)

#: Characters of a child's output kept with its result (the log's end).
LOG_TAIL = 20_000


class _Children:
    """The child processes this process runs now, so that Ctrl-C can kill them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen] = set()
        self.stopping = False

    def add(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.add(proc)
            stop = self.stopping
        if stop:
            _kill(proc)

    def discard(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)

    def kill_all(self) -> None:
        with self._lock:
            self.stopping = True
            procs = list(self._procs)
        for p in procs:
            _kill(p)


CHILDREN = _Children()


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(log: str) -> str:
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    return lines[-1][:500] if lines else ""


def run_isolated(task: dict[str, Any]) -> dict[str, Any]:
    """Audit one model in a child process with ``task["timeout_s"]`` and
    ``task["memory_gb"]``; never raises for anything the child does.

    Returns:
        dict: row (the columns the child filled, with status, error_stage, error_type and
        error set for kills and crashes), samples (latency ms), log (the end of the child's
        stdout and stderr), report (the report's HTML bytes, or None), seconds.
    """
    t0 = time.monotonic()
    timeout = task.get("timeout_s") or None
    with tempfile.TemporaryDirectory(prefix="onnx-lab-audit-") as tmp:
        tmpd = Path(tmp)
        job = dict(task, result=str(tmpd / "result.json"),
                   report=str(tmpd / "report.html") if task.get("report") else None)
        (tmpd / "task.json").write_text(json.dumps(job))
        log_path = tmpd / "log.txt"
        killed = False
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-m", "onnx_lab.zoo._worker",
                                     str(tmpd / "task.json")], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=_child_env())
            CHILDREN.add(proc)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(proc)
                rc = proc.wait()
                killed = True
            finally:
                CHILDREN.discard(proc)
        log_text = _tail(log_path)
        result: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            result = json.loads(Path(job["result"]).read_text())
        row = dict(result.get("row") or {"status": "ok", "error_stage": None,
                                         "error_type": None, "error": None})
        running = result.get("running", "start" if not result else None)
        # The child writes its last result (running None) after its last stage: killed or
        # dead after that (the interpreter's exit: onnxruntime's teardown, a slow unload),
        # the row is complete, and a model every stage of which finished read "timeout".
        finished = bool(result) and running is None
        if killed and not finished:
            row.update(status="timeout", error_stage=running, error_type="Timeout",
                       error=f"did not finish within {timeout:g} s"
                       + (f" (in the {running} stage)" if running else "") + ": killed")
        elif not finished and (rc != 0 or running is not None):
            if rc < 0:
                sig = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
                what = f"killed by {sig}"
                if sig == "SIGKILL" and not CHILDREN.stopping:
                    what += " (the system's out-of-memory killer, or another process)"
            else:
                what = f"exited with code {rc}"
            last = _last_line(log_text)
            memory = bool(MEMORY_SIGNS.search(log_text[-4000:]))
            row.update(status="memory" if memory else "crashed", error_stage=running,
                       error_type="MemoryError" if memory else "Crash",
                       error=f"the process {what}" + (f" in the {running} stage" if running
                                                      else "") + (f": {last}" if last else ""))
        report = None
        if row.pop("report", None) and job["report"]:
            with contextlib.suppress(OSError):
                report = Path(job["report"]).read_bytes()
        return {"row": row, "samples": result.get("samples") or [], "log": log_text,
                "report": report, "seconds": round(time.monotonic() - t0, 3)}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The package the parent runs is the one the child imports (a source checkout on sys.path).
    here = str(Path(__file__).resolve().parents[2])
    paths = env.get("PYTHONPATH", "").split(os.pathsep) if env.get("PYTHONPATH") else []
    if here not in paths:
        env["PYTHONPATH"] = os.pathsep.join([here, *paths])
    # glibc reserves 64 MiB of address space per malloc arena (up to 8 per core): under an
    # address-space limit that reserve, not the model, would decide when allocations fail.
    env.setdefault("MALLOC_ARENA_MAX", "2")
    return env


def run_local(tasks: Sequence[dict[str, Any]], workers: int
              ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Run ``tasks`` on ``workers`` threads (one child process each); yield (task, result) as
    they complete. Closing the generator (Ctrl-C) cancels the waiting tasks and kills the
    running children."""
    CHILDREN.stopping = False
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="onnx-lab-audit")
    futures = {pool.submit(run_isolated, t): t for t in tasks}
    done = False
    try:
        for f in as_completed(futures):
            yield futures[f], f.result()
        done = True
    finally:
        if not done:
            pool.shutdown(wait=False, cancel_futures=True)
            CHILDREN.kill_all()
        pool.shutdown(wait=True)


_ADDRESS = re.compile(r"(?:[a-z][a-z0-9+.-]*://)?(?:\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):(\d{1,5})")


def _check_address(scheduler: Any) -> None:
    """Refuse a scheduler address that cannot be one (no port, a port past 65535) before
    distributed waits 30 s to connect to it."""
    if not isinstance(scheduler, str):
        return
    scheme = scheduler.split("://", 1)[0].lower() if "://" in scheduler else "tcp"
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return  # inproc://, ucx://...: distributed checks its own kinds
    m = _ADDRESS.fullmatch(scheduler.strip())
    if m is None or not 0 < int(m.group(1)) < 65536:
        raise InputError(f"{scheduler[:200]!r} is not a Dask scheduler address.",
                         fix="Pass tcp://HOST:PORT (e.g. tcp://10.0.0.5:8786).")


#: Where the LocalCluster's HTTP servers listen: this machine only, on free ports.
LOOPBACK = "127.0.0.1:0"


def local_cluster(workers: int = 1) -> Any:
    """The ``LocalCluster`` of :func:`run_dask`: ``workers`` single-threaded worker threads
    of this process, everything it listens on bound to the loopback interface.

    The scheduler and the workers talk in process (``inproc://``); their HTTP servers (the
    dashboard, the workers' status pages) would listen on every interface by default, even
    with ``dashboard_address=None``, so both are bound to ``127.0.0.1`` on free ports. To
    expose a dashboard on purpose, start a cluster yourself
    (``LocalCluster(dashboard_address="0.0.0.0:8787")``) and pass ``scheduler=Client(it)``.
    """
    # on use: dask is an optional extra
    from distributed import LocalCluster

    return LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=False,
                        dashboard_address=LOOPBACK, worker_dashboard_address=LOOPBACK)


#: Seconds distributed is given to connect to a scheduler, and the grace past them after which
#: a connection that was accepted but never answered is given up.
CONNECT_TIMEOUT_S = 30.0
CONNECT_GRACE_S = 15.0


def _connect(client_class: Any, scheduler: str) -> Any:
    """``Client(scheduler)``, given up ``CONNECT_TIMEOUT_S + CONNECT_GRACE_S`` seconds on.

    distributed's own timeout does not cover a handshake that never comes back: a scheduler
    that accepts the connection and does not answer (stopped, swamped, a port that accepts and
    stays silent) kept ``Client(address, timeout="30s")`` waiting for good (onnx-lab audit
    --scheduler hung with no word). The client is made in a daemon thread, left behind then.
    """
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = client_class(scheduler, timeout=f"{CONNECT_TIMEOUT_S:g}s")
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=connect, name="onnx-lab-dask-connect", daemon=True)
    t.start()
    wait = CONNECT_TIMEOUT_S + CONNECT_GRACE_S
    t.join(wait)
    if t.is_alive():
        raise TimeoutError(f"the connection was accepted, but no Dask scheduler answered in "
                           f"{wait:g} s (a scheduler that is stopped or swamped, or another "
                           "server that stays silent)")
    if "error" in box:
        raise box["error"]
    return box["client"]


def run_dask(tasks: Sequence[dict[str, Any]], scheduler: Any = None, workers: int = 1
             ) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Run ``tasks`` on a Dask distributed cluster; yield (task, result) as they complete.

    Args:
        scheduler: the scheduler's address (``tcp://HOST:PORT``), a ``distributed.Client``,
            or None: a ``LocalCluster`` of ``workers`` single-threaded workers (threads of
            this process), started for this run and closed after it.

    Each task runs :func:`run_isolated` on a worker, which starts the model's child process
    there: the model paths must be readable on the workers (a shared file system) and the
    workers need onnx_lab installed. A task whose worker died comes back as a crashed row.
    """
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError as e:
        raise InputError("The Dask engine needs dask.distributed, which is not installed.",
                         fix="pip install 'dask[distributed]' (or run without --engine dask / "
                         "--scheduler).") from e
    CHILDREN.stopping = False
    cluster = client = None
    restore: Callable[[], None] = lambda: None  # noqa: E731 - the logging of our own cluster
    own_client = not isinstance(scheduler, Client)
    try:
        if isinstance(scheduler, Client):
            client = scheduler
        elif scheduler:
            _check_address(scheduler)
            client = _connect(Client, scheduler)
        else:
            # Worker threads in this process: each task's model runs in a child process
            # anyway, so worker processes would only add their start-up (importing dask and
            # onnx_lab again) and shutdown.
            restore = _quiet_dask()
            cluster = local_cluster(workers)
            client = Client(cluster)
    except InputError:
        restore()
        raise
    except Exception as e:  # noqa: BLE001 - distributed raises OSError, ValueError, TimeoutError...
        restore()
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        if isinstance(e, TypeError) and "ssl_context" in str(e):
            # a tls:// (wss://) address with no TLS settings: distributed refuses before it
            # connects, so nothing has answered yet (a848c7f read "Something answers ... not
            # as a Dask scheduler. Check the port" at a real TLS scheduler's address)
            raise InputError(f"The Dask scheduler {str(scheduler)[:200]!r} takes TLS "
                             "connections, and no TLS certificates are configured to connect "
                             "with.", fix="Set Dask's TLS options (distributed.comm.tls.ca-file, "
                             ".client.cert and .client.key in ~/.config/dask/distributed.yaml or "
                             "DASK_DISTRIBUTED__COMM__TLS__CA_FILE=... in the environment), or "
                             "pass scheduler=distributed.Client(address, security=...) to "
                             "onnx_lab.audit.") from e
        if scheduler and not isinstance(e, (OSError, TimeoutError)) and \
                isinstance(e, (MemoryError, ValueError, TypeError, KeyError)):
            # connected, but what answered does not speak Dask's protocol (an HTTP server
            # or a proxy: its first bytes read as a frame length, "Unable to allocate
            # 3.07 EiB")
            raise InputError(f"Something answers at {str(scheduler)[:200]!r}, but not as a "
                             f"Dask scheduler (its reply read as: {first}).",
                             fix="Check the port: a Dask scheduler listens on 8786 by default "
                             "(its dashboard, on 8787, is a web page, not the scheduler)."
                             ) from e
        raise InputError(f"Cannot reach the Dask scheduler {str(scheduler)[:200]!r}: {first}",
                         fix="Check the address (tcp://HOST:PORT) and that the scheduler "
                         "runs.") from e
    futures = {}
    try:
        for i, t in enumerate(tasks):  # in the given order (the largest models first)
            futures[client.submit(run_isolated, t, pure=False, priority=len(tasks) - i,
                                  key=f"onnx-lab-audit-{t['key']}-{os.urandom(4).hex()}")] = t
        for f in dask_completed(list(futures)):
            t = futures.pop(f)
            try:
                result = f.result()
            except Exception as e:  # noqa: BLE001 - a lost worker is this model's row
                result = {"row": {"status": "crashed", "error_stage": None,
                                  "error_type": type(e).__name__,
                                  "error": f"the Dask task failed: {e}"},
                          "samples": [], "log": "", "report": None, "seconds": None}
            yield t, result
    finally:
        if futures:
            with contextlib.suppress(Exception):
                client.cancel(list(futures))
            if cluster is not None:
                # Our LocalCluster's workers are threads of this process: their children are
                # ours to kill. A remote worker's running task ends at its own timeout.
                CHILDREN.kill_all()
        if own_client and client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        restore()


def _quiet_dask() -> Callable[[], None]:
    """Raise the ``distributed`` loggers to WARNING while the audit's own cluster lives, and
    return what puts them back. Its in-process scheduler and workers logged some forty INFO
    lines per audit (start, every connection, the shutdown) to the terminal or the notebook;
    a cluster the user started and passed keeps the user's logging."""
    lg = logging.getLogger("distributed")
    level = lg.level
    lg.setLevel(max(logging.WARNING, level))
    return lambda: lg.setLevel(level)
