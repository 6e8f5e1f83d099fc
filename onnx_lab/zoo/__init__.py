"""Audit a whole model zoo: every model of a set of folders summarized, checked, costed,
optimized with the ``safe`` preset (every step verified), profiled and, on request, given an
fp16 precision plan, each in a process of its own; one row per model.

- **Isolation**: each model runs in a child process with a memory limit (its address space,
  ``resource.setrlimit(RLIMIT_AS)``) and a wall-clock timeout; a crash, a hang, an allocation
  past the limit or a LabError becomes that model's row (``status``, ``error_stage``,
  ``error_type``, ``error``) and the other models go on.
- **Resumable**: with ``out``, every finished model is appended to ``out/manifest.jsonl``; a
  second audit reuses the rows of models whose files (the model and its external data) and
  options are unchanged. Failures of the time or memory limit are retried when the limits
  changed; ``force=True`` reruns everything.
- **Engines**: local child processes on ``workers`` threads (``concurrent.futures``), or the
  same tasks on a Dask distributed cluster (``scheduler="tcp://HOST:PORT"``, or
  ``engine="dask"`` for a LocalCluster); each Dask task still runs its model in a child process
  on the worker.
- **Regression gate**: ``against=OLD_DIR`` compares with an earlier audit's manifest
  (:mod:`onnx_lab.zoo.gate`): a step that no longer verifies, latency beyond the noise, new
  check errors, growth of the files, a model that now fails.

Files written into ``out``: ``audit.csv``, ``audit.parquet`` (with pyarrow), ``index.html``
(linking each model's report where a report writer exists), ``manifest.jsonl``,
``logs/<model>.log`` (a child's output when it wrote any), ``regressions.json`` (with
``against``).

Example:
    >>> import onnx_lab
    >>> res = onnx_lab.audit(["zoo/"], "audit-out", workers=2)
    >>> res.table[["model", "status", "latency_ms", "optimize_passed"]]
    >>> res.failed[["model", "error_type", "error"]]
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnx_lab._display import notebook_html
from onnx_lab._pandas import pd
from onnx_lab._progress import Progress
from onnx_lab.core._location import user_path
from onnx_lab.errors import InputError, SaveError, strict_keywords
from onnx_lab.zoo import _store
from onnx_lab.zoo._store import Found, find_models

logger = logging.getLogger(__name__)


def __getattr__(name: str) -> Any:
    # The gate imports onnx_lab.profiling: loaded on use, so ``onnx-lab --help`` stays fast.
    if name == "regressions":
        # on use: the audit's worker imports this package before its memory limit
        from onnx_lab.zoo.gate import regressions

        return regressions
    raise AttributeError(f"module 'onnx_lab.zoo' has no attribute {name!r}")

__all__ = ["audit", "AuditResult", "find_models", "regressions", "COLUMNS",
           "DETERMINISTIC_COLUMNS", "DEFAULT_TIMEOUT_S", "DEFAULT_MEMORY_GB",
           "DEFAULT_BUDGET_S", "DEFAULT_BATCH"]

#: The audit table's columns and their dtypes (nullable: a failed stage leaves its columns
#: empty). Units are in the names.
COLUMNS: dict[str, str] = {
    # the model
    "model": "string", "path": "string", "sha256": "string", "file_bytes": "Int64",
    # the outcome: ok, error (a stage raised), timeout, memory (an allocation failed or the
    # memory limit was hit), crashed (the process died)
    "status": "string", "error_stage": "string", "error_type": "string", "error": "string",
    "failed_stages": "string",
    # summary
    "ir_version": "Int64", "opset": "Int64", "producer": "string", "num_nodes": "Int64",
    "num_initializers": "Int64", "num_params": "Int64", "param_bytes": "Int64",
    "num_inputs": "Int64", "num_outputs": "Int64", "external_data": "boolean",
    "dynamic_dims": "string", "dims_given": "string", "shapes_given": "string",
    # check()
    "check_errors": "Int64", "check_warnings": "Int64", "check_infos": "Int64",
    "check_error_codes": "string", "check_warning_codes": "string",
    # cost()
    "flops": "float64", "macs": "float64", "peak_activation_bytes": "Int64",
    "unknown_cost_nodes": "Int64",
    # the safe preset, every step verified
    "optimize_steps": "Int64", "optimize_verified": "Int64", "optimize_failed": "string",
    "optimize_passed": "boolean", "nodes_after": "Int64", "max_abs_err": "float64",
    "optimize_s": "float64",
    # profile of the model as given
    "latency_ms": "float64", "latency_ci_low_ms": "float64", "latency_ci_high_ms": "float64",
    "latency_runs": "Int64", "latency_session": "string", "latency_busy": "string",
    # fp16 precision plan (fp16=True)
    "fp16_passed": "boolean", "fp16_kept": "Int64", "fp16_kept_nodes": "string",
    "fp16_candidates": "Int64", "fp16_trials": "Int64", "fp16_note": "string",
    "fp16_s": "float64",
    # bookkeeping
    "report": "string", "reused": "boolean", "seconds": "float64",
}
#: Columns that depend on the machine's speed and load, or on where the audit ran.
_VARYING = {"path", "optimize_s", "latency_ms", "latency_ci_low_ms", "latency_ci_high_ms",
            "latency_runs", "latency_busy", "fp16_s", "report", "reused", "seconds"}
#: Columns two audits of the same files with the same options agree on (on any engine).
DETERMINISTIC_COLUMNS = [c for c in COLUMNS if c not in _VARYING]

#: Defaults of :func:`audit`: seconds per model, GiB of address space per model, profile
#: seconds per model.
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MEMORY_GB = 8.0
DEFAULT_BUDGET_S = 3.0
#: The size :func:`audit` gives a leading dim no option can name (skl2onnx's ``X [None, 4]``,
#: tf2onnx's ``unk__N``): a batch of one, as onnxruntime's perf test and Polygraphy take.
DEFAULT_BATCH = 1
_MODEL_OPTION_KEYS = ("dims", "shapes", "feeds")


def write_error(path: str | os.PathLike, e: OSError) -> Exception:
    """:func:`onnx_lab.core.save.write_error`, imported on use: ``onnx-lab --help`` reads the
    defaults above, and core.save brings onnx_ir (and sympy) with it."""
    from onnx_lab.core.save import write_error as _write_error  # on use: the CLI's start-up

    return _write_error(Path(path), e)
#: Options kept with each manifest entry, for the gate to say when two audits differ in them.
_SETTINGS = ("preset", "budget_s", "providers", "threads", "dims", "shapes", "batch", "feeds",
             "feeds_sha256")
_LIMIT_STATUSES = ("timeout", "memory", "crashed")


@dataclass
class AuditResult:
    """The result of :func:`audit`.

    Attributes:
        table: one row per model (:data:`COLUMNS`), sorted by model name.
        out: the output folder (None when nothing was written).
        files: what was written: csv, parquet, html, manifest.
        regressions: the gate's findings against ``against`` (:func:`onnx_lab.zoo.gate.
            regressions`), None without it.
        reused: models whose rows came from the manifest (unchanged files and options).
        interrupted: the audit was interrupted (Ctrl-C): the table holds the finished models.
        seconds: wall time of the audit.
    """

    table: pd.DataFrame
    out: Path | None = None
    files: dict[str, Path] = field(default_factory=dict)
    regressions: pd.DataFrame | None = None
    reused: int = 0
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> pd.DataFrame:
        """The rows whose status is not ``ok``."""
        return self.table.loc[self.table.status != "ok"]

    @property
    def regressed(self) -> bool:
        """Whether the gate found something worse (False without ``against``)."""
        return self.regressions is not None and bool(self.regressions.worse.any())

    def counts(self) -> dict[str, int]:
        """Models per status."""
        return {str(k): int(v) for k, v in self.table.status.value_counts().items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: out, counts, reused, interrupted, regressed, regressions, rows."""
        rows = self.table.astype(object).where(self.table.notna(), None)
        return {"out": None if self.out is None else str(self.out), "models": len(self.table),
                "counts": self.counts(), "reused": self.reused,
                "interrupted": self.interrupted, "seconds": round(self.seconds, 3),
                "regressed": self.regressed,
                "regressions": None if self.regressions is None
                else _records(self.regressions),
                "rows": rows.to_dict(orient="records")}

    def _repr_html_(self) -> str:
        # on use: the audit's worker imports this package before its memory limit
        from onnx_lab.render.audit import audit_index_html

        return notebook_html(audit_index_html(self.table, gate=self.regressions))

    def __repr__(self) -> str:
        counts = ", ".join(f"{n} {s}" for s, n in self.counts().items())
        return (f"<AuditResult {len(self.table)} models ({counts or 'none'}; {self.reused} "
                f"reused){' interrupted' if self.interrupted else ''}>")


# ---------------------------------------------------------------------------- options
def _check_args(workers: Any, timeout_s: Any, memory_gb: Any, budget_s: Any,
                fp16_max_trials: Any, engine: str | None, threads: Any) -> None:
    def bad(what: str, value: Any, want: str, fix: str) -> InputError:
        return InputError(f"{what} must be {want}, got {value!r}.", fix=fix)

    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise bad("workers", workers, "a positive int", "Use workers=1 or more.")
    for name, value in (("timeout_s", timeout_s), ("budget_s", budget_s)):
        if value is not None and (not isinstance(value, (int, float)) or not value > 0
                                  or value != value):
            raise bad(name, value, "a positive number of seconds", f"Use e.g. {name}=60.")
    if memory_gb is not None and (not isinstance(memory_gb, (int, float)) or memory_gb < 0
                                  or memory_gb != memory_gb):
        raise bad("memory_gb", memory_gb, "a number of GiB >= 0 (0: no limit)",
                  "Use e.g. memory_gb=4.")
    if not isinstance(fp16_max_trials, int) or fp16_max_trials < 0:
        raise bad("fp16_max_trials", fp16_max_trials, "an int >= 0", "Use e.g. 24.")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise bad("threads", threads, "a positive int", "Use threads=1 or more, or None.")
    if engine not in (None, "local", "dask"):
        raise bad("engine", engine, "'local' or 'dask'", "Use engine='local' or 'dask'.")


def _model_options(found: Found, model_options: Mapping[str, Mapping[str, Any]] | None
                   ) -> dict[str, Any]:
    """The per-model options whose glob matches the model's name or file name (in order)."""
    out: dict[str, Any] = {}
    for pattern, opts in (model_options or {}).items():
        if fnmatch.fnmatch(found.name, pattern) or fnmatch.fnmatch(found.path.name, pattern):
            for k, v in opts.items():
                if k in ("dims", "shapes"):
                    out[k] = {**out.get(k, {}), **dict(v)}
                else:
                    out[k] = v
    return out


def _check_model_options(model_options: Mapping[str, Mapping[str, Any]] | None) -> None:
    if model_options is None:
        return
    if not isinstance(model_options, Mapping):
        raise InputError("model_options must map glob patterns to option dicts.",
                         fix='Use e.g. {"det/*.onnx": {"shapes": {"x": [1, 3, 640, 640]}}}.')
    for pattern, opts in model_options.items():
        if not isinstance(opts, Mapping):
            raise InputError(f"model_options[{pattern!r}] is not a dict of options.",
                             fix=f"Use keys among {', '.join(_MODEL_OPTION_KEYS)}.")
        bad = [k for k in opts if k not in _MODEL_OPTION_KEYS]
        if bad:
            raise InputError(f"model_options[{pattern!r}]: unknown option(s) {bad}.",
                             fix=f"Use keys among {', '.join(_MODEL_OPTION_KEYS)}.")
        _check_sizes(opts.get("dims"), opts.get("shapes"), f"model_options[{pattern!r}]")
        feeds = opts.get("feeds")
        if feeds is not None and not user_path(feeds).is_file():
            raise InputError(f"model_options[{pattern!r}]: feeds file {str(feeds)!r} does not "
                             "exist.", fix="Give the path of an .npz file of inputs.")


def _check_sizes(dims: Any, shapes: Any, where: str) -> None:
    """InputError for a dim or shape size that is no int >= 0 (names are each model's to
    check: options name dims for a whole zoo, and each model takes the ones it has)."""
    def bad(v: Any) -> bool:
        return not isinstance(v, int) or isinstance(v, bool) or v < 0

    if dims is not None:
        if not isinstance(dims, Mapping):
            raise InputError(f"{where}: dims must map dim names to sizes, got {dims!r:.60}.",
                             fix='Use e.g. dims={"batch": 1}.')
        for k, v in dims.items():
            if bad(v):
                raise InputError(f"{where}: dim {k!r} must be an int >= 0, got {v!r}.",
                                 fix=f'Use e.g. dims={{{k!r}: 1}}.')
    if shapes is not None:
        if not isinstance(shapes, Mapping):
            raise InputError(f"{where}: shapes must map input names to lists of sizes.",
                             fix='Use e.g. shapes={"x": [1, 3, 224, 224]}.')
        for k, shape in shapes.items():
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or \
                    any(bad(d) for d in shape):
                raise InputError(f"{where}: the shape of input {k!r} must be a list of ints "
                                 f">= 0, got {shape!r:.60}.",
                                 fix=f'Use e.g. shapes={{{k!r}: [1, 3, 224, 224]}}.')


# ---------------------------------------------------------------------------- the audit
@strict_keywords  # a misspelt keyword is an InputError with its close matches
def audit(paths: str | os.PathLike | Iterable[str | os.PathLike],
          out: str | os.PathLike | None = None, *, workers: int = 1,
          engine: str | None = None, scheduler: Any = None,
          timeout_s: float | None = DEFAULT_TIMEOUT_S,
          memory_gb: float | None = DEFAULT_MEMORY_GB,
          budget_s: float = DEFAULT_BUDGET_S, fp16: bool = False, fp16_max_trials: int = 24,
          providers: str | Sequence[str] | None = "cpu", threads: int | None = None,
          dims: Mapping[str, int] | None = None,
          shapes: Mapping[str, Sequence[int]] | None = None,
          batch: int | None = DEFAULT_BATCH,
          model_options: Mapping[str, Mapping[str, Any]] | None = None, force: bool = False,
          against: str | os.PathLike | None = None, latency_effect: float | None = None,
          progress: Any = None) -> AuditResult:
    """Audit every model under ``paths``, each in its own process; one row per model.

    Per model: summary, ``check()`` findings, ``cost()``, the ``safe`` preset with every step
    verified, a profile median (of the model as given; seeded inputs unless ``feeds``) and,
    with ``fp16=True``, an fp16 precision plan. A stage that fails leaves its columns empty
    and names itself in ``error_stage`` (the first one) and ``failed_stages``; the others
    still run.

    Args:
        paths: model files and folders (searched recursively for ``*.onnx``; external data
            files belong to their model).
        out: output folder (tables, index, manifest, logs); None writes nothing and reuses
            nothing.
        workers: models audited at once (local processes, or the LocalCluster's workers).
        engine: ``"local"`` (default) or ``"dask"`` (default when ``scheduler`` is given).
        scheduler: a Dask scheduler address (``"tcp://HOST:PORT"``) or a
            ``distributed.Client``; with ``engine="dask"`` and no scheduler, a LocalCluster of
            ``workers`` single-threaded workers (threads of this process, each model still in
            its own child process) is started for the run. The model paths must be readable
            on the workers.
        timeout_s: wall-clock seconds per model (None: no limit); past it the model's
            process group is killed and its row says ``timeout`` (with the figures of the
            stages that finished).
        memory_gb: address space per model process in GiB (0 or None: no limit). An
            onnxruntime process reserves ~1.7 GiB of address space for ~0.25 GiB resident,
            so the limit is about twice the resident memory a model may use.
        budget_s: profiling seconds per model (runs stop earlier once the median is stable).
        fp16: also search an fp16 plan (``find_precision("fp16")``), at most
            ``fp16_max_trials`` pruning trials.
        providers: execution providers for check, profile (default ``"cpu"``: comparable
            between machines); None: every installed one of CPU, CUDA and TensorRT.
        threads: onnxruntime intra-op threads of the profile (default: the cores divided by
            ``workers`` on this machine, onnxruntime's default on a Dask scheduler's workers).
        dims, shapes: values of symbolic dims and full input shapes for every model that has
            them (a model ignores the names it lacks).
        batch: the size of an input's leading dim when it has no name an option could give
            (unnamed: skl2onnx's and onnxmltools' ``X [None, 4]``; tf2onnx's per-model
            ``unk__N``) and the input's other dims are known; the row's ``shapes_given`` says
            so. Shapes given (``shapes``, ``model_options``) win; None leaves such dims open
            (a ``DimError`` in the stages that run the model).
        model_options: glob pattern (matched against the model's name and its file name) ->
            ``{"dims": {...}, "shapes": {...}, "feeds": "inputs.npz"}`` for some models;
            later patterns win.
        force: rerun every model, ignoring the manifest.
        against: an earlier audit's output folder: the result's ``regressions`` says what got
            worse per model (:func:`onnx_lab.zoo.gate.regressions`).
        latency_effect: the smallest latency change the gate calls real (None: 10%,
            :data:`onnx_lab.zoo.gate.LATENCY_EFFECT`).
        progress: None (a bar with counts and an ETA in terminals and notebooks), False, or
            ``callable(done, total, label)``.

    Returns:
        An :class:`AuditResult`. Ctrl-C stops the audit: running models are killed, the
        finished ones are kept (and written), and ``interrupted`` is True.

    Raises:
        InputError: bad options; no model found; ``against`` without a manifest.
        ModelLoadError: a path that does not exist.

    Example:
        >>> res = onnx_lab.audit("zoo/", "audit", workers=2,
        ...                      model_options={"ocr/det*.onnx": {"shapes": {"x": [1, 3, 640, 640]}}})
        >>> res.table.query("status != 'ok'")[["model", "error_stage", "error"]]
    """
    from onnx_lab.core.outputs import (
        refuse_inputs,  # on use: `onnx-lab audit --help` reads this package
    )

    # on use: the audit's worker imports this package before its memory limit
    from onnx_lab.zoo import _engine

    t_start = time.monotonic()
    _check_args(workers, timeout_s, memory_gb, budget_s, fp16_max_trials, engine, threads)
    _check_sizes(dims, shapes, "audit")
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool)
                              or batch < 1):
        raise InputError(f"audit: batch must be an int >= 1 or None, got {batch!r:.60}.",
                         fix=f"Use batch={DEFAULT_BATCH}, or give shapes in model_options.")
    _check_model_options(model_options)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = find_models(paths)
    if not found:
        raise InputError(f"No .onnx file found under {', '.join(map(str, paths))}.",
                         fix="Pass model files or folders that hold .onnx files.")
    if engine == "local" and scheduler is not None:  # the scheduler was dropped silently
        raise InputError("engine='local' runs the models on this machine; a Dask scheduler "
                         "was given too.", fix="Drop engine (a scheduler means engine='dask'; "
                         "--engine on the command line), or drop the scheduler.")
    engine = engine or ("dask" if scheduler is not None else "local")
    if threads is None and scheduler is None:  # the models run on this machine
        threads = max(1, (os.cpu_count() or 1) // workers)
    out_dir = user_path(out) if out is not None else None
    old: dict[str, dict[str, Any]] = {}
    if against is not None:
        old = _store.read_manifest(user_path(against))
        if not old:
            raise InputError(f"No audit manifest in {str(against)!r} "
                             f"({_store.MANIFEST} is missing or empty).",
                             fix="Pass the --out folder of an earlier onnx-lab audit.")
    manifest: dict[str, dict[str, Any]] = {}
    # what the audit reads: no table, report or log it writes may replace one of them
    inputs = {Path(os.path.realpath(p)): f"the audited model {f.name!r} (or its data)"
              for f in found for p in f.files}
    if out_dir is not None:
        audited = inputs.get(Path(os.path.realpath(out_dir)))
        if audited is not None:  # the folder to write would replace a model being read
            raise SaveError(f"The audit's output folder {str(out_dir)!r} is {audited}.",
                            fix="Pass --out a folder of its own (out=...): it holds "
                            "audit.csv, index.html and the manifest.")
        written = ("audit.csv", "audit.parquet", "index.html", _store.MANIFEST,
                   "regressions.json")
        for name in written:  # refused before any model runs
            refuse_inputs(out_dir / name, inputs, flag="the audit's output")
        # a folder an earlier audit did not write (no manifest) holding files of the names the
        # audit writes: they are someone else's (a site's index.html), never replaced
        if not (out_dir / _store.MANIFEST).is_file():
            # (files only: an audit stopped during its first model leaves reports/ and logs/
            # and no manifest, and is resumed into the same folder)
            theirs = [n for n in written if os.path.lexists(out_dir / n)]
            if theirs:
                raise SaveError(
                    f"The audit's output folder {str(out_dir)!r} holds "
                    f"{', '.join(map(repr, theirs))} but is not an earlier audit's output "
                    f"(it has no {_store.MANIFEST}): the audit would replace them.",
                    fix="Pass --out a new or empty folder (out=...), or the --out folder of "
                    "an earlier onnx-lab audit.")
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise write_error(out_dir, e) from e
        manifest = _store.read_manifest(out_dir)
    # Numbers as floats: 1 and 1.0 are the same option (the manifest compares their hash).
    limits = {"timeout_s": None if timeout_s is None else float(timeout_s),
              "memory_gb": float(memory_gb or 0)}
    base = {"preset": "safe", "budget_s": float(budget_s), "providers": providers,
            "threads": threads,
            "fp16": bool(fp16), "fp16_max_trials": fp16_max_trials if fp16 else None}

    entries: dict[str, dict[str, Any]] = {}
    rows: dict[str, dict[str, Any]] = {}
    tasks: list[dict[str, Any]] = []
    order: list[tuple[bool, float]] = []
    for f in found:
        sha, size = _store.file_hash(f.files)
        per = _model_options(f, model_options)
        feeds = str(user_path(per["feeds"]).resolve()) if per.get("feeds") else None
        opts = {**base, "dims": {**(dims or {}), **per.get("dims", {})},
                "shapes": {k: list(v) for k, v in {**(shapes or {}),
                                                   **per.get("shapes", {})}.items()},
                "batch": batch, "feeds": feeds,
                "feeds_sha256": _store.file_hash([Path(feeds)])[0] if feeds else None}
        key = _store.options_key(opts)
        ident = {"model": f.name, "path": str(f.path), "sha256": sha, "file_bytes": size}
        prev = manifest.get(f.name)
        if not force and prev and prev.get("sha256") == sha and prev.get("options") == key \
                and (prev.get("row", {}).get("status") not in _LIMIT_STATUSES
                     or prev.get("limits") == limits):
            entries[f.name] = prev
            rows[f.name] = {**prev["row"], **ident, "reused": True}
            continue
        took = (prev or {}).get("row", {}).get("seconds")
        # The longest first, so that short ones fill the gaps at the end: by the time an
        # earlier audit took, else by size (models never timed first: they may be long ones).
        order.append((took is not None, -(took or size)))
        tasks.append({**opts, **limits, **ident, "key": _store.slug(f.name),
                      "options_key": key, "report": out_dir is not None})
    tasks = [t for _, t in sorted(zip(order, tasks), key=lambda p: p[0])]
    reused = len(rows)
    if reused:
        logger.info("audit: %d of %d models unchanged since the last audit (reused)", reused,
                    len(found))

    interrupted = False
    files: dict[str, Path] = {}
    counts: dict[str, int] = {}
    last_write = time.monotonic()
    if engine == "dask":
        runs = _engine.run_dask(tasks, scheduler, workers)
    else:
        runs = _engine.run_local(tasks, workers)
    label = f"audit ({reused} reused)" if reused else "audit"
    bar = Progress(progress, len(tasks), label, min_steps=1)
    try:
        with bar, contextlib.closing(runs):
            for task, res in runs:
                row = _finish(task, res, out_dir, inputs)
                entry = {"model": task["model"], "sha256": task["sha256"],
                         "options": task["options_key"], "limits": limits,
                         "settings": {k: task[k] for k in _SETTINGS}, "row": row,
                         "samples": res.get("samples") or [], "finished": time.time()}
                entries[task["model"]] = entry
                rows[task["model"]] = {**row, "reused": False}
                if out_dir is not None:
                    _store.append_manifest(out_dir, entry)
                counts[row["status"]] = counts.get(row["status"], 0) + 1
                logger.info("audit: %s: %s (%.1f s)", task["model"], row["status"],
                            row.get("seconds") or 0)
                bar.step(f"{label}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
                if out_dir is not None and time.monotonic() - last_write > 5:
                    _write(out_dir, rows, None, manifest=None, inputs=inputs)
                    last_write = time.monotonic()
    except KeyboardInterrupt:
        interrupted = True
        logger.warning("audit interrupted: %d of %d models finished", len(rows) - reused,
                       len(tasks))
    gate = None
    if against is not None:
        # on use: the audit's worker imports this package before its memory limit
        from onnx_lab.zoo.gate import LATENCY_EFFECT, regressions

        gate = regressions(old, entries, latency_effect=LATENCY_EFFECT if latency_effect is None
                           else latency_effect)
    table = _table(rows)
    if out_dir is not None:
        kept = {**manifest, **entries}
        files = _write(out_dir, rows, gate, manifest=kept, interrupted=interrupted,
                       inputs=inputs)
    return AuditResult(table=table, out=out_dir, files=files, regressions=gate,
                       reused=reused, interrupted=interrupted,
                       seconds=time.monotonic() - t_start)


def _finish(task: dict[str, Any], res: dict[str, Any], out_dir: Path | None,
            inputs: Mapping[Path, str] | None = None) -> dict[str, Any]:
    """The table row of a finished task; its report and log written into ``out_dir``."""
    from onnx_lab.core.outputs import (
        write_atomic,  # on use: `onnx-lab audit --help` reads this package
    )
    row = {**res["row"], "model": task["model"], "path": task["path"],
           "sha256": task["sha256"], "file_bytes": task["file_bytes"],
           "seconds": res.get("seconds")}
    row.pop("report", None)
    if out_dir is None:
        return row
    name = _store.slug(task["model"])
    if res.get("report"):
        (out_dir / "reports").mkdir(exist_ok=True)
        write_atomic(out_dir / "reports" / f"{name}.html", res["report"],
                     sources=dict(inputs or {}), flag="the audit's report")
        row["report"] = f"reports/{name}.html"
    log = out_dir / "logs" / f"{name}.log"
    if (res.get("log") or "").strip():
        log.parent.mkdir(exist_ok=True)
        write_atomic(log, res["log"], sources=dict(inputs or {}), flag="the audit's log")
    else:
        with contextlib.suppress(FileNotFoundError):
            log.unlink()  # an older run's log would describe another result
    return row


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``df`` for JSON, a missing value as None: pandas' string columns hold NaN
    for it, which ``json.dumps`` wrote as ``NaN`` (regressions.json's ``"old": NaN`` for a
    model the old audit lacked), a token JSON.parse, jq --strict readers and Go reject."""
    return df.astype(object).where(df.notna(), None).to_dict(orient="records")


def _table(rows: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    return _store.typed_table([rows[k] for k in sorted(rows)], COLUMNS)


def _write(out_dir: Path, rows: Mapping[str, Mapping[str, Any]], gate: pd.DataFrame | None,
           *, manifest: Mapping[str, Mapping[str, Any]] | None,
           interrupted: bool = False, inputs: Mapping[Path, str] | None = None
           ) -> dict[str, Path]:
    """Write the table files (and, at the end, the compacted manifest and the gate)."""
    from onnx_lab.core.outputs import (
        write_atomic,  # on use: `onnx-lab audit --help` reads this package
    )

    # on use: the audit's worker imports this package before its memory limit
    from onnx_lab.render.audit import audit_index_html

    table = _table(rows)
    links = {r["model"]: r["report"] for r in rows.values() if r.get("report")}
    note = "Interrupted: the table holds the models that finished." if interrupted else None
    try:
        inputs = dict(inputs or {})
        files = _store.write_tables(out_dir, table, audit_index_html(
            table, links=links, gate=gate, note=note), inputs=inputs)
        if manifest is not None:
            _store.write_manifest(out_dir, manifest.values(), inputs=inputs)
            files["manifest"] = out_dir / _store.MANIFEST
        if gate is not None:
            path = out_dir / "regressions.json"
            write_atomic(path, json.dumps({"regressed": bool(gate.worse.any()),
                                           "findings": _records(gate)}, indent=2,
                                          allow_nan=False),
                         sources=inputs, flag="the audit's gate")
            files["regressions"] = path
    except OSError as e:
        raise write_error(out_dir, e) from e
    return files
