"""Bounds on every run of a model: memory estimated before it starts, and a time limit.

A model file decides how much memory and time a run takes: a 3-node model whose ``Expand``
makes a 16 GiB tensor, a ``Loop`` of 10**12 iterations. Every verification, comparison and
profiling run goes through :func:`onnx_lab.runtime.session.run_session`, which asks here first:

- **Memory.** :func:`estimate_run_memory` walks the main graph in topological order with the
  shapes the run's inputs give (ONNX shape inference), keeping each activation alive from its
  producer to its last consumer — the peak activation memory of the cost model
  (``lab.cost()["peak_activation_bytes"]`` reads the same walk). A run whose peak, or whose
  inputs, pass the limit is refused before anything is allocated, with the estimate, the node
  at the peak and the largest tensor. The default limit is half the memory available when the
  run starts (``DEFAULT_MEMORY_SHARE``).
- **Time.** A run is stopped (onnxruntime's ``RunOptions.terminate``) after the time limit
  (``DEFAULT_RUN_TIMEOUT_S``, 10 minutes) and ends in an error naming the node onnxruntime was
  running; Ctrl-C stops it the same way.

Both are :class:`~onnx_lab.errors.RunLimitError`. Override them for the process with
:func:`set_run_limits` (or the ``with run_limits(...)`` block), the environment variables
``ONNX_LAB_MAX_MEMORY`` (``"32G"``, ``"500M"``, bytes; ``"0"``/``"off"``: no limit) and
``ONNX_LAB_RUN_TIMEOUT`` (seconds; ``"0"``/``"off"``: none), or the CLI's ``--max-memory`` and
``--run-timeout``.

Example:
    >>> from onnx_lab.core.limits import run_limits
    >>> with run_limits(memory="64G", timeout_s=3600):
    ...     onnx_lab.compare("big.onnx", "big_fp16.onnx")
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from onnx_lab.core.units import itemsize
from onnx_lab.errors import InputError, RunLimitError

if TYPE_CHECKING:
    from onnx_lab.core.model import LabModel
    from onnx_lab.core.shapes import TensorInfo

__all__ = ["DEFAULT_MEMORY_SHARE", "DEFAULT_RUN_TIMEOUT_S", "set_run_limits", "run_limits",
           "memory_limit", "run_timeout", "parse_bytes", "liveness", "estimate_run_memory",
           "check_run_memory", "check_feed_bytes", "fmt_bytes"]

#: The share of the memory available at the start of a run that its estimate may take.
DEFAULT_MEMORY_SHARE = 0.5
#: Seconds one run of a model may take.
DEFAULT_RUN_TIMEOUT_S = 600.0

_UNSET: Any = object()
_LIMITS: dict[str, Any] = {"memory": _UNSET, "timeout": _UNSET}
_OFF = ("0", "off", "none", "no", "false")


def parse_bytes(value: str | int | float) -> int:
    """``"32G"``, ``"1.5GiB"``, ``"500M"``, ``"4096"`` or a number as bytes (G = GiB).

    Raises:
        InputError: not a size.
    """
    if isinstance(value, bool):
        raise InputError(f"{value!r} is not a memory size.", fix="Write e.g. '32G' or '500M'.")
    if isinstance(value, (int, float)):
        n = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgtp]?)(i?b)?\s*",
                         str(value)[:40].lower())
        if m is None:
            raise InputError(f"{str(value)[:40]!r} is not a memory size.",
                             fix="Write e.g. '32G' (GiB), '500M' (MiB) or a number of bytes.")
        n = float(m.group(1)) * 1024 ** " kmgtp".index(m.group(2) or " ")
    if not math.isfinite(n) or n < 0 or n > 1 << 62:
        raise InputError(f"{value!r} is not a memory size.", fix="Write e.g. '32G'.")
    return int(n)


def set_run_limits(*, memory: Any = _UNSET, timeout_s: Any = _UNSET) -> None:
    """Set the limits of every later run in this process.

    Args:
        memory: bytes or a size (``"32G"``) a run's estimated peak may take; ``0``/``None``:
            no limit; ``"auto"``: the default (half the available memory).
        timeout_s: seconds a run may take; ``0``/``None``: no limit; ``"auto"``: 600 s.

    Example:
        >>> onnx_lab.core.limits.set_run_limits(memory="64G", timeout_s=3600)
    """
    if memory is not _UNSET:
        if memory == "auto":
            _LIMITS["memory"] = _UNSET
        elif memory is None or memory == 0:
            _LIMITS["memory"] = None
        else:
            _LIMITS["memory"] = parse_bytes(memory) or None
    if timeout_s is not _UNSET:
        if timeout_s == "auto":
            _LIMITS["timeout"] = _UNSET
        elif timeout_s is None or timeout_s == 0:
            _LIMITS["timeout"] = None
        else:
            t = _seconds(timeout_s)
            _LIMITS["timeout"] = t


def _seconds(value: Any) -> float:
    try:
        t = float(value)
    except (TypeError, ValueError):
        t = math.nan
    if isinstance(value, bool) or not math.isfinite(t) or t <= 0 or t > 10 ** 7:
        raise InputError(f"The run time limit must be a number of seconds > 0, got "
                         f"{str(value)[:40]!r}.", fix="Pass e.g. timeout_s=3600.")
    return t


@contextlib.contextmanager
def run_limits(*, memory: Any = _UNSET, timeout_s: Any = _UNSET,
               origin: str = "set by set_run_limits") -> Iterator[None]:
    """:func:`set_run_limits` for the block; the previous limits afterwards. ``origin``: how
    messages say the limits were set (the command line: ``set by onnx-lab --max-memory``)."""
    saved, said = dict(_LIMITS), _ORIGIN[0]
    try:
        set_run_limits(memory=memory, timeout_s=timeout_s)
        _ORIGIN[0] = origin
        yield
    finally:
        _LIMITS.update(saved)
        _ORIGIN[0] = said


#: How messages say the limits in force were set.
_ORIGIN = ["set by set_run_limits"]


_AVAILABLE: list[float] = [-1.0, 0.0]  # (when read, bytes): read at most once a second


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable``, read at most once a second: runs
    come in quick series), or None where unknown."""
    now = time.monotonic()
    if _AVAILABLE[0] >= 0 and now - _AVAILABLE[0] < 1.0:
        return int(_AVAILABLE[1]) if _AVAILABLE[1] >= 0 else None
    got = _read_available()
    _AVAILABLE[:] = [now, -1.0 if got is None else float(got)]
    return got


def _read_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_limit() -> tuple[int | None, str]:
    """(bytes a run may take, how the figure was set)."""
    if _LIMITS["memory"] is not _UNSET:
        return _LIMITS["memory"], _ORIGIN[0]
    env = os.environ.get("ONNX_LAB_MAX_MEMORY")
    if env is not None and env.strip():
        if env.strip().lower() in _OFF:
            return None, "ONNX_LAB_MAX_MEMORY"
        try:
            return parse_bytes(env) or None, "ONNX_LAB_MAX_MEMORY"
        except InputError as e:
            raise InputError(f"ONNX_LAB_MAX_MEMORY: {e.problem}", fix=e.fix) from e
    avail = available_memory()
    if avail is None:
        return None, "unknown available memory"
    return int(avail * DEFAULT_MEMORY_SHARE), (f"{DEFAULT_MEMORY_SHARE:.0%} of the "
                                               f"{fmt_bytes(avail)} available")


def run_timeout() -> float | None:
    """Seconds a run may take (None: no limit)."""
    if _LIMITS["timeout"] is not _UNSET:
        return _LIMITS["timeout"]
    env = os.environ.get("ONNX_LAB_RUN_TIMEOUT")
    if env is not None and env.strip():
        if env.strip().lower() in _OFF:
            return None
        try:
            return _seconds(env)
        except InputError as e:
            raise InputError(f"ONNX_LAB_RUN_TIMEOUT: {e.problem}", fix=e.fix) from e
    return DEFAULT_RUN_TIMEOUT_S


def fmt_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


_FIX = ("Run it with smaller dims or input shapes, or raise the limit if the machine has the "
        "memory: onnx_lab.core.limits.set_run_limits(memory='64G'), ONNX_LAB_MAX_MEMORY=64G, "
        "or onnx-lab --max-memory 64G.")


# --------------------------------------------------------------------------- the estimate
def liveness(lm: LabModel, types: Mapping[str, TensorInfo]
             ) -> tuple[list[tuple[str, int]], int, str | None, int, tuple[str, int] | None]:
    """Walk the main graph in topological order keeping every activation alive from its
    producer (or the start, for graph inputs) to its last consumer (or the end, for outputs).

    Weights are not activations. Returns (per-node live bytes as (node id, bytes), peak, node
    at the peak, number of activations of unknown size, (name, bytes) of the largest one).
    """
    # on use: the CLI reads the limits' settings at start-up without loading onnx_ir
    from onnx_lab.core.values import is_constant

    idx = lm.index
    g = lm.graph
    order = idx.topo_order("")
    pos = {nid: i for i, nid in enumerate(order)}
    end = len(order)
    outputs = {v.name for v in g.outputs}
    missing = 0
    size: dict[str, int] = {}
    largest: tuple[str, int] | None = None

    def nbytes(name: str) -> int:
        nonlocal missing, largest
        info = types.get(name)
        item = itemsize(info.dtype) if info else None
        if info is None or info.shape is None or item is None or any(
                not isinstance(d, int) for d in info.shape):
            missing += 1
            return 0
        n = math.ceil(math.prod(info.shape) * item)  # 4-bit tensors packed, rounded up
        if largest is None or n > largest[1]:
            largest = (name, n)
        return n

    def last_use(name: str, default: int) -> int:
        if name in outputs:
            return end
        users = [pos[u] for u in idx.consumers.get(name, ()) if u in pos]
        # Body nodes reading outer values keep them alive until their owner runs.
        for u in idx.consumers.get(name, ()):
            if u not in pos:
                owner = idx.entries[u].graph.split("/")[0]
                if owner in pos:
                    users.append(pos[owner])
        return max(users, default=default)

    free_at: dict[int, list[str]] = {}
    live = 0
    for v in g.inputs:
        if v.name in g.initializers or not v.name:
            continue
        size[v.name] = nbytes(v.name)
        live += size[v.name]
        free_at.setdefault(last_use(v.name, -1), []).append(v.name)
    for name in free_at.pop(-1, []):
        live -= size[name]
    peak, peak_node = live, None
    rows = []
    for i, nid in enumerate(order):
        node = idx.entries[nid].node
        for o in node.outputs:
            if not o.name or is_constant(o, stored=True):
                continue
            size[o.name] = nbytes(o.name)
            live += size[o.name]
            free_at.setdefault(last_use(o.name, i), []).append(o.name)
        rows.append((nid, live))
        # the inputs are alive while the first node runs: when no node adds a known size
        # (a tree ensemble's outputs of unknown shape), the peak is there, not at "None"
        if live > peak or peak_node is None:
            peak, peak_node = live, nid
        for name in free_at.pop(i, []):
            live -= size[name]
    return rows, peak, peak_node, missing, largest


def estimate_run_memory(model: LabModel, shapes: Mapping[str, Sequence[int]],
                        dims: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The peak activation memory of one run with inputs of ``shapes``: {peak_bytes,
    peak_node, largest (tensor name), largest_bytes, producer (of the largest), unknown}.
    Cached on the model per shapes."""
    key = ("limits", "estimate", tuple(sorted((k, tuple(v)) for k, v in shapes.items())),
           tuple(sorted((dims or {}).items())))

    def build() -> dict[str, Any]:
        types = model.types(dims, {k: list(v) for k, v in shapes.items()})
        _rows, peak, peak_node, missing, largest = liveness(model, types)
        producer = model.index.producer.get(largest[0]) if largest is not None else None
        return {"peak_bytes": peak, "peak_node": peak_node,
                "largest": largest[0] if largest else None,
                "largest_bytes": largest[1] if largest else 0, "producer": producer,
                "unknown": missing}

    return model.cached(key, build)


def check_run_memory(model: LabModel, shapes: Mapping[str, Sequence[int]], *,
                     what: str = "the model", dims: Mapping[str, int] | None = None) -> None:
    """Refuse a run whose estimated peak activation memory passes :func:`memory_limit`.

    Raises:
        RunLimitError: naming the estimate, the node at the peak, the largest tensor and its
            producer, and the limit.
    """
    limit, how = memory_limit()
    if limit is None:
        return
    est = estimate_run_memory(model, shapes, dims)
    if est["peak_bytes"] <= limit:
        return
    big = ""
    if est["largest"] is not None:
        made = f", made by node {est['producer']!r}" if est["producer"] else ""
        big = f"; the largest tensor is {est['largest']!r} ({fmt_bytes(est['largest_bytes'])}" \
              f"{made})"
    at = f" at node {est['peak_node']!r}" if est["peak_node"] else ""
    raise RunLimitError(
        f"Running {what} would need about {fmt_bytes(est['peak_bytes'])} of activations"
        f"{at}{big}, over the memory limit of {fmt_bytes(limit)} ({how}); it was not run.",
        fix=_FIX, limit="memory")


def check_feed_bytes(feeds_bytes: int, what: str = "the inputs") -> None:
    """Refuse to allocate inputs of ``feeds_bytes`` over :func:`memory_limit`."""
    limit, how = memory_limit()
    if limit is not None and feeds_bytes > limit:
        raise RunLimitError(f"{what[:1].upper() + what[1:]} would take "
                            f"{fmt_bytes(feeds_bytes)}, over the memory limit of "
                            f"{fmt_bytes(limit)} ({how}); nothing was allocated.", fix=_FIX,
                            limit="memory")
