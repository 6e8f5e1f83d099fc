"""What a fuzz case does, inside its own child process (see fuzz_worker): open a source, run
operations on it, and check the invariants the README's "Bad input" section promises.

A case (built by fuzz_cases) is a dict:

- ``kind``: ``"model"`` (open, then ``ops``), ``"history"`` (open, then apply/undo/redo
  steps: every version must stay byte-identical) or ``"cli"`` (``onnx_lab.cli.main(argv)``);
- ``files``: relative path -> bytes, ``("link", target)`` or ``("dir",)``, written into the
  case's folder; the model lies in ``model/`` and a secret in the folder above it;
- ``model``: the model file's relative path; ``source``: ``path``, ``mmap``, ``bytes``,
  ``proto`` or ``ir``; ``base_dir``: for in-memory sources, a folder to name (or None);
- ``ops`` / ``steps`` / ``argv`` (``{d}`` stands for the case's folder), ``desc``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from fuzz_worker import ABS_SECRET, SECRET

# Commands for which exit code 1 has a documented meaning (a failed comparison, verification
# or --strict check); any other command exits 0 or 2.
EXIT_1_OK = {"compare", "check", "optimize", "extract", "fix-dims"}


def preload() -> None:
    """Import what cases use (before the fork server starts forking)."""
    import onnx  # noqa: F401
    import onnx_ir  # noqa: F401
    import onnxruntime  # noqa: F401
    import pandas  # noqa: F401

    import onnx_lab  # noqa: F401
    import onnx_lab.analysis.compat  # noqa: F401
    import onnx_lab.analysis.cost  # noqa: F401
    import onnx_lab.analysis.summary  # noqa: F401
    import onnx_lab.analysis.tables  # noqa: F401
    import onnx_lab.analysis.weights  # noqa: F401
    import onnx_lab.cli  # noqa: F401
    import onnx_lab.core.save  # noqa: F401
    import onnx_lab.numerics.compare  # noqa: F401
    import onnx_lab.numerics.diff  # noqa: F401
    import onnx_lab.profiling.run  # noqa: F401
    import onnx_lab.render.view  # noqa: F401
    from onnx_lab.transforms.base import pass_names

    pass_names()  # loads the built-in passes


class Violation(Exception):
    """An invariant of the harness broke (not an exception of the library)."""


def _secret_paths(d: Path) -> set[str]:
    return {os.path.realpath(ABS_SECRET), os.path.realpath(d / "secret.bin")}


def _watch_reads(d: Path, log: list[str]) -> None:
    """Record every open() of a secret (an audit hook: the child ends with the case)."""
    secrets = _secret_paths(d)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            try:
                p = os.path.realpath(os.fsdecode(args[0]))
            except (TypeError, ValueError):
                return
            if p in secrets:
                log.append(p)

    sys.addaudithook(hook)


def _snapshot(folder: Path) -> dict[str, str]:
    """Digest of every regular file under ``folder`` (links not followed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(folder))] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def _outputs_hold_secret(folder: Path) -> str | None:
    marker = SECRET[:32]
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink() and marker in p.read_bytes():
            return str(p.relative_to(folder))
    return None


def _open(case: dict[str, Any], d: Path):
    """The Lab of the case's source, or ``("skip", why)``."""
    import onnx
    import onnx_ir as ir

    import onnx_lab

    path = d / case["model"]
    source = case.get("source", "path")
    kw: dict[str, Any] = {}
    if case.get("base_dir"):
        kw["base_dir"] = d / case["base_dir"]
    if source == "path":
        return onnx_lab.open(path, **kw)
    if source == "mmap":
        return onnx_lab.open(path, mmap=True, **kw)
    data = path.read_bytes() if path.is_file() else b""
    if source == "bytes":
        return onnx_lab.open(data, **kw)
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - not a ModelProto: not expressible as one
        return ("skip", f"bytes do not parse as a ModelProto ({type(e).__name__})")
    if source == "proto":
        return onnx_lab.open(proto, **kw)
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as e:  # noqa: BLE001 - onnx_ir cannot build it: no ir.Model to pass
        return ("skip", f"onnx_ir cannot deserialize it ({type(e).__name__})")
    return onnx_lab.open(model, **kw)


def _model_ops(lab, d: Path, ops: list[str]) -> list[str]:
    from onnx_lab.errors import LabError, SaveError

    notes = []
    for op in ops:
        try:
            if op in ("nodes", "initializers", "tensors", "inputs", "outputs", "history"):
                getattr(lab, op)
            elif op == "summary":
                lab.summary().to_dict()
            elif op == "cost":
                lab.cost()
            elif op == "check":
                lab.check()
            elif op == "check_noload":
                lab.check(load=False)
            elif op == "render":
                _ = lab.render(max_nodes=60, timeout=5).dot
            elif op == "weights":
                lab.weight_stats()
            elif op == "patterns":
                lab.patterns()
            elif op in ("save", "save_ext", "save_one"):
                ext = {"save": "auto", "save_ext": True, "save_one": False}[op]
                out = lab.save(d / "out" / f"{op}.onnx", external_data=ext)
                import onnx_lab

                again = onnx_lab.open(out)
                again.nodes  # noqa: B018 - reading is the test
            elif op == "save_over_source":
                if lab.path is not None:
                    try:
                        lab.save(lab.path)
                    except SaveError:
                        pass
                    else:
                        raise Violation("save over the source without overwrite=True")
            else:
                raise Violation(f"unknown op {op!r}")
        except LabError as e:
            notes.append(f"{op}: {type(e).__name__}")
    return notes


def _serialized(model) -> bytes:
    import onnx_ir as ir

    return ir.to_proto(model.ir).SerializeToString(deterministic=True)


def _history_steps(lab, steps: list[tuple]) -> list[str]:
    """Apply/undo/redo; every version's bytes must stay what they were when it was made."""
    from onnx_lab.errors import LabError

    notes = []
    made: dict[int, bytes] = {}
    try:
        made[id(lab.version_history.original.model)] = _serialized(lab.version_history.original.model)
    except Exception as e:  # noqa: BLE001 - a model onnx_ir cannot write: nothing to compare
        return [f"step 0 cannot be serialized ({type(e).__name__})"]
    for step in steps:
        try:
            if step[0] == "apply":
                lab.apply(step[1], verify=step[2])
                made.setdefault(id(lab.model), _serialized(lab.model))
            elif step[0] == "undo":
                lab.undo()
            elif step[0] == "redo":
                lab.redo()
        except LabError as e:
            notes.append(f"{step}: {type(e).__name__}")
        for v in lab.version_history.versions:
            before = made.get(id(v.model))
            if before is not None and _serialized(v.model) != before:
                raise Violation(f"version {v.step} changed after {step}")
    return notes


def _cli(case: dict[str, Any], d: Path) -> list[str]:
    from onnx_lab.cli import main

    argv = [a.replace("{d}", str(d)) for a in case["argv"]]
    out, err = io.StringIO(), io.StringIO()
    code: int | None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if not (code == 0 and ("-h" in argv or "--help" in argv)):
                raise Violation(f"SystemExit({e.code!r}) out of main: "
                                f"{err.getvalue().strip()[-300:]!r}") from None
    text = err.getvalue()
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if "Traceback" in text:
        raise Violation(f"traceback on stderr (exit {code}): {text[-500:]!r}")
    if code == 2:
        errors = [ln for ln in lines if ln.startswith("onnx-lab: error: ")]
        others = [ln for ln in lines if not ln.startswith("onnx-lab: error: ")
                  and ln.split(" ", 1)[0] not in ("WARNING", "INFO", "DEBUG", "note:")]
        if len(errors) != 1 or others:
            raise Violation(f"exit 2 without exactly one error line: {text[-500:]!r}")
    elif code == 1:
        if argv[0] not in EXIT_1_OK:
            raise Violation(f"exit 1 from {argv[0]}: {text[-300:]!r}")
    elif code != 0:
        raise Violation(f"exit code {code!r}: {text[-300:]!r}")
    return [f"exit {code}"] + ([lines[-1][:200]] if lines and code else [])


def _selftest(what: str) -> None:
    """Cases that break the process itself, to test the harness's own reporting."""
    if what == "segv":
        import ctypes

        ctypes.string_at(0)
    elif what == "hang":
        while True:
            pass
    elif what == "alloc":
        import numpy as np

        np.ones(8 << 30, dtype=np.uint8)


# Positions of the model arguments of each command (argv[0] is the command).
_INPUT_ARGS = {"compare": (1, 2), "diff": (1, 2)}


def _cli_reads_model(case: dict[str, Any]) -> bool:
    """Whether the CLI case's command reads the model folder's files (a model argument or
    --feeds names one)."""
    argv = [a for a in case["argv"] if a not in ("-v", "--verbose")]
    if not argv:
        return False
    positions = _INPUT_ARGS.get(argv[0], (1,))
    named = [argv[k] for k in positions if k < len(argv)]
    named += [argv[k + 1] for k, a in enumerate(argv[:-1]) if a == "--feeds"]
    return any(a.startswith("{d}/model") for a in named)


def run_case(case: dict[str, Any], d: Path) -> dict[str, Any]:
    """Run ``case`` in folder ``d`` (the current folder is ``d/model``); returns the report."""
    from onnx_lab.errors import LabError

    reads: list[str] = []
    _watch_reads(d, reads)
    inputs = _snapshot(d / "model")
    report: dict[str, Any] = {"outcome": "result", "notes": []}
    try:
        if case["kind"] == "selftest":
            _selftest(case["what"])
        elif case["kind"] == "cli":
            report["notes"] = _cli(case, d)
        else:
            try:
                lab = _open(case, d)
            except LabError as e:
                report["outcome"] = "lab_error"
                report["notes"] = [f"open: {type(e).__name__}: {str(e)[:300]}"]
                lab = None
            if isinstance(lab, tuple):
                report["outcome"] = "skip"
                report["notes"] = [lab[1]]
            elif lab is not None:
                if case["kind"] == "history":
                    report["notes"] = _history_steps(lab, case["steps"])
                else:
                    report["notes"] = _model_ops(lab, d, case["ops"])
                if report["notes"]:
                    report["outcome"] = "lab_error"
    except Violation as e:
        report = {"outcome": "violation", "detail": str(e)}
    except MemoryError:
        report = {"outcome": "memory", "detail": "MemoryError"}
    except RecursionError as e:
        report = {"outcome": "error", "detail": f"RecursionError: {str(e)[:300]}",
                  "traceback": traceback.format_exc()[-3000:]}
    except Exception as e:  # noqa: BLE001 - the finding itself
        report = {"outcome": "error", "detail": f"{type(e).__name__}: {str(e)[:300]}",
                  "traceback": traceback.format_exc()[-3000:]}
    leftovers = [str(p.relative_to(d)) for folder in (d / "model", d / "out")
                 for p in folder.rglob(".*") if ".tmp" in p.name]
    if leftovers:
        report = {"outcome": "violation", "detail": f"temporary files left: {leftovers[:3]}",
                  "previous": report}
    elif reads:
        report = {"outcome": "violation", "detail": f"read outside the model's folder: "
                  f"{sorted(set(reads))}", "previous": report}
    elif (where := _outputs_hold_secret(d / "out")) is not None:
        report = {"outcome": "violation", "detail": f"secret bytes written to {where}",
                  "previous": report}
    elif case["kind"] == "cli" and not _cli_reads_model(case):
        pass  # the command's inputs are elsewhere (sample:NAME): model/ may be an output
    elif _snapshot(d / "model") != inputs:
        changed = {k for k, v in _snapshot(d / "model").items() if inputs.get(k) != v}
        changed |= set(inputs) - set(_snapshot(d / "model"))
        if changed & set(inputs):  # new files next to the model are outputs, not damage
            report = {"outcome": "violation", "detail": f"input files changed: "
                      f"{sorted(changed & set(inputs))}", "previous": report}
    return report
