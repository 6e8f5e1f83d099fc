"""The audit of one model, run in a process of its own by :mod:`onnx_lab.zoo._engine`.

``python -m onnx_lab.zoo._worker TASK.json`` limits its own address space first
(``resource.setrlimit(RLIMIT_AS)``: an allocation past it fails inside this process only), then
runs the stages one after the other: open, summary, check, cost, the ``safe`` preset with every
step verified, a profile of the model as given and, when asked, an fp16 precision plan. After
every stage it rewrites the result file (``TASK["result"]``), so that a model killed for its
time limit in a later stage keeps the figures of the stages that finished, and the result names
the stage that was running.

A stage that raises records its error (the first one goes to ``error_stage``, ``error_type``,
``error``) and the next stage still runs: a profile needs no optimized model, a cost needs no
session. Only a model that does not open ends the audit of that model early.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Messages of allocation failures from onnxruntime, numpy and the C++ runtime: the row's
#: status is then "memory" rather than "error".
MEMORY_SIGNS = re.compile(r"bad_alloc|failed to allocate|out of memory|cannot allocate memory|"
                          r"unable to allocate|MemoryError", re.IGNORECASE)


def limit_memory(gb: float | None) -> None:
    """Limit this process's address space to ``gb`` GiB (None or 0: no limit)."""
    if not gb:
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = int(gb * (1 << 30))
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def _joined(items: Any) -> str | None:
    items = [str(i) for i in items]
    return ";".join(items) if items else None


def _float(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def _batched(model: Any, dims: dict[str, int], shapes: dict[str, list[int]],
             batch: int | None) -> dict[str, list[int]]:
    """Shapes for the inputs whose leading dim no option of a zoo can name (unnamed: skl2onnx
    and onnxmltools write ``X [None, 4]``; tf2onnx's per-model ``unk__N``:
    :func:`~onnx_lab.core.shapes.anonymous_dim`) and whose other dims are known (fixed, or in
    ``dims``): that dim takes ``batch``. Inputs in ``shapes`` keep theirs; ``batch`` None gives
    nothing."""
    from onnx_lab.core.shapes import anonymous_dim, is_container
    from onnx_lab.runtime.feeds import input_specs

    out: dict[str, list[int]] = {}
    if batch is None:
        return out
    for name, dtype, shape in input_specs(model):
        if name in shapes or is_container(dtype) or not shape:
            continue
        if not anonymous_dim(shape[0]) or shape[0] in dims:  # a dim given by name wins
            continue
        rest = [d if isinstance(d, int) else dims.get(d) if isinstance(d, str) else None
                for d in shape[1:]]
        if all(isinstance(d, int) for d in rest):
            out[name] = [int(batch), *rest]
    return out


class _Audit:
    """The stages of one model's audit and the row they fill."""

    def __init__(self, task: dict[str, Any]) -> None:
        self.task = task
        self.row: dict[str, Any] = {"status": "ok", "error_stage": None, "error_type": None,
                                    "error": None, "failed_stages": None}
        self.samples: list[float] = []
        self.lab: Any = None
        self.dims: dict[str, int] = {}
        self.shapes: dict[str, list[int]] = {}
        self._failed: list[str] = []

    # ------------------------------------------------------------------ bookkeeping
    def save(self, running: str | None) -> None:
        """Write the row so far (atomically): the parent reads it even after a kill."""
        path = Path(self.task["result"])
        # a fresh name created exclusively (never a fixed one a link could stand on)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"row": self.row, "samples": self.samples,
                                "running": running}))
        os.replace(tmp, path)

    def stage(self, name: str, fn: Callable[[], None]) -> bool:
        self.save(name)
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every failure becomes this model's row
            self._failed.append(name)
            self.row["failed_stages"] = ";".join(self._failed)
            if self.row["error_stage"] is None:
                msg = str(e) or repr(e)
                self.row.update(error_stage=name, error_type=type(e).__name__, error=msg)
                memory = isinstance(e, MemoryError) or bool(MEMORY_SIGNS.search(msg))
                self.row["status"] = "memory" if memory else "error"
            return False
        return True

    # ------------------------------------------------------------------ stages
    def open(self) -> None:
        import onnx_lab
        from onnx_lab.core.shapes import dynamic_dims

        t = self.task
        lab = onnx_lab.open(t["path"], mmap=True)
        dyn = dynamic_dims(lab.model)
        inputs = {v.name for v in lab.model.graph.inputs}
        # Options name dims and inputs for a whole zoo: each model takes the ones it has.
        self.dims = {k: int(v) for k, v in (t.get("dims") or {}).items() if k in dyn}
        self.shapes = {k: list(v) for k, v in (t.get("shapes") or {}).items() if k in inputs}
        self.shapes.update(_batched(lab.model, self.dims, self.shapes, t.get("batch")))
        if self.dims:
            lab.dims = self.dims
        if self.shapes:
            lab.shapes = self.shapes
        self.lab = lab

    def summary(self) -> None:
        s = self.lab.summary()
        opsets = s["opsets"]
        self.row.update(
            ir_version=int(s["ir_version"]),
            opset=opsets.get("", opsets.get("ai.onnx")),
            producer=s["producer"] or None,
            num_nodes=int(s["num_nodes"]), num_initializers=int(s["num_initializers"]),
            num_params=int(s["num_params"]), param_bytes=int(s["param_bytes"]),
            num_inputs=len(s["inputs"]), num_outputs=len(s["outputs"]),
            external_data=bool(s["external_data"]),
            dynamic_dims=_joined(sorted(s["dynamic_dims"])),
            dims_given=_joined(f"{k}={v}" for k, v in sorted(self.dims.items())),
            shapes_given=_joined(f"{k}={'x'.join(map(str, v))}"
                                 for k, v in sorted(self.shapes.items())))

    def check(self) -> None:
        df = self.lab.check(providers=self.task.get("providers") or None)
        counts = df.severity.value_counts()
        self.row.update(
            check_errors=int(counts.get("error", 0)), check_warnings=int(counts.get("warning", 0)),
            check_infos=int(counts.get("info", 0)),
            check_error_codes=_joined(sorted(set(df.loc[df.severity == "error", "code"]))),
            check_warning_codes=_joined(sorted(set(df.loc[df.severity == "warning", "code"]))))

    def cost(self) -> None:
        total = self.lab.cost().total
        self.row.update(flops=_float(total["flops"]), macs=_float(total["macs"]),
                        peak_activation_bytes=int(total["peak_activation_bytes"]),
                        unknown_cost_nodes=int(total["unknown_nodes"]))

    def optimize(self) -> None:
        feeds = self.task.get("feeds")
        t0 = time.perf_counter()
        results = self.lab.apply_preset(self.task.get("preset") or "safe",
                                        verify={"feeds": feeds} if feeds else True)
        changed = [r for r in results if r.modified]
        failed = [r.name for r in changed if r.verify_passed is False]
        errs = [r.max_abs_err for r in changed if r.max_abs_err is not None]
        self.row.update(
            optimize_steps=len(changed),
            optimize_verified=sum(r.verify_passed is True for r in changed),
            optimize_failed=_joined(failed),
            optimize_passed=(not failed) if changed else None,
            nodes_after=len(self.lab.index),
            max_abs_err=_float(max(errs)) if errs else None,
            optimize_s=round(time.perf_counter() - t0, 4))

    def profile(self) -> None:
        from onnx_lab.profiling.run import profile
        from onnx_lab.profiling.stats import busy_note

        t = self.task
        p = profile(self.lab.original, providers=t.get("providers") or None,
                    budget_s=t.get("budget_s") or None, threads=t.get("threads"),
                    feeds=t.get("feeds"), progress=False, map_fused=False)
        st = p.latency_stats.iloc[0]
        self.samples = [round(float(v), 6) for v in p.samples()]
        self.row.update(latency_ms=_float(st.p50_ms), latency_ci_low_ms=_float(st.ci_low_ms),
                        latency_ci_high_ms=_float(st.ci_high_ms), latency_runs=int(st.runs),
                        latency_session=str(st.session),
                        latency_busy=busy_note(self.samples) if self.samples else None)

    def fp16(self) -> None:
        import onnx_lab
        from onnx_lab.numerics.precision import (
            NothingToConvert,
            PrecisionCancelled,
            ToleranceUnreachable,
        )

        t = self.task
        lab = onnx_lab.open(t["path"], dims=self.dims or None, shapes=self.shapes or None,
                            mmap=True)
        t0 = time.perf_counter()
        try:
            plan = lab.find_precision("fp16", t.get("feeds"),
                                      max_trials=int(t.get("fp16_max_trials", 24)),
                                      progress=False)
        except NothingToConvert as e:  # not applicable (trees, encoders): no plan, no verdict
            self.row.update(fp16_note=e.problem, fp16_s=round(time.perf_counter() - t0, 4))
            return
        except (ToleranceUnreachable, PrecisionCancelled) as e:  # an answer, not a failure
            self.row.update(fp16_passed=False, fp16_note=e.problem,
                            fp16_s=round(time.perf_counter() - t0, 4))
            return
        # not confirmed (False): the plan's model does not load, or misses, as onnxruntime
        # deploys it (the note says which); the search's pass without optimizations alone
        # is not a plan that holds
        self.row.update(fp16_passed=bool(plan.passed) and plan.confirmed is not False,
                        fp16_kept=len(plan.kept),
                        fp16_kept_nodes=_joined(plan.kept), fp16_candidates=plan.n_candidates,
                        fp16_trials=len(plan.trials),
                        fp16_note=_joined(plan.notes),
                        fp16_s=round(time.perf_counter() - t0, 4))

    def report(self) -> None:
        if self.task.get("report"):
            # Imported here like every onnx_lab module of the worker: the memory limit is set
            # before anything heavy is imported.
            from onnx_lab.reporting import write_report

            write_report(self.lab, self.task["report"])
            self.row["report"] = True

    def run(self) -> dict[str, Any]:
        if self.stage("open", self.open):
            for name in ("summary", "check", "cost", "optimize", "profile"):
                self.stage(name, getattr(self, name))
            if self.task.get("fp16"):
                self.stage("fp16", self.fp16)
            self.stage("report", self.report)
        self.save(None)
        return self.row


def main(argv: list[str] | None = None) -> int:
    """``python -m onnx_lab.zoo._worker TASK.json``: audit one model, write its result."""
    argv = sys.argv[1:] if argv is None else argv
    task = json.loads(Path(argv[0]).read_text())
    limit_memory(task.get("memory_gb"))
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _Audit(task).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
