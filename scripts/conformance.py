"""Sweep the ONNX backend conformance cases through onnx_lab: ``make conformance``.

The cases: the node cases generated at run time from the installed onnx's own case generators
(``onnx.backend.test.case.node.collect_testcases()``, as ``backend-test-tools generate-data``
does: each holds the model, its inputs and the expected outputs), plus the model folders the
onnx wheel ships (``onnx/backend/test/data/{simple,pytorch-converted,pytorch-operator,light}``,
with ``test_data_set_*/input_*.pb`` and ``output_*.pb``).

Each case runs in its own forked child process (a wall-clock and CPU limit, an address-space
cap) through: open -> tables (nodes, initializers, tensors) -> summary -> check -> cost ->
render -> patterns -> apply_preset("safe") -> save to a temporary folder -> a fresh
onnxruntime session of the saved file run on the case's inputs and compared with the case's
expected outputs (onnx's tolerance, rtol=1e-3 atol=1e-7, or the case's own) ->
``onnx_lab.compare(original, optimized, feeds=case inputs)``. A plain onnxruntime session of
the original model runs the same inputs, so a refusal says whether onnxruntime itself cannot
run the model.

Classes (``class`` column of cases.csv):

- ``ok``: every stage returned; the saved model's outputs match the expected ones (or, where
  onnxruntime's own run of the original does not match them, the original's outputs) and
  ``compare`` passed;
- ``refused``: a stage raised a LabError (its class, stage and message are recorded, and
  ``ort_original`` says whether plain onnxruntime loads and runs the original);
- ``raw_exception``: a stage raised an exception that is not a LabError (a defect; the last
  line of the traceback is recorded);
- ``false_alarm``: compare, or a step's verification (``verify_passed`` False), flagged a
  difference while the saved model's outputs match the expected outputs;
- ``wrong``: after ``safe`` the saved model's outputs differ from the expected ones while the
  original's (run by onnxruntime) matched;
- ``timeout``, ``memory``, ``crash``: the child outlived its time limit, ran out of memory,
  or died without a report.

Usage::

    .venv/bin/python scripts/conformance.py                      # every case, 2 jobs
    .venv/bin/python scripts/conformance.py --subset 300 --seed 0 --jobs 1
    .venv/bin/python scripts/conformance.py --only test_abs,light_resnet50

Writes ``summary.json`` and ``cases.csv`` to ``--out`` (default test-artifacts/conformance)
and prints the counts. Exit status 1 when a case is raw_exception, false_alarm, wrong, crash
or memory (not counting ``--known`` ids), else 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

FOLDERS = ("simple", "pytorch-converted", "pytorch-operator", "light")
BAD = ("raw_exception", "false_alarm", "wrong", "crash", "memory")
FIELDS = ("id", "source", "class", "stage", "error_type", "error", "ort_original",
          "saved_matches", "compare_passed", "steps", "seconds")


# ------------------------------------------------------------------------------ the cases
def collect(include_node: bool = True, include_folders: bool = True) -> list[dict[str, Any]]:
    """Every case as ``{"id", "source", ...}``; node cases hold their generated TestCase."""
    import onnx

    cases: list[dict[str, Any]] = []
    if include_node:
        import onnx.backend.test.case.node as node

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for tc in node.collect_testcases():
                cases.append({"id": tc.name, "source": "node", "tc": tc})
    if include_folders:
        data = Path(onnx.__file__).parent / "backend" / "test" / "data"
        for folder in FOLDERS:
            for f in sorted((data / folder).glob("*.onnx")):  # light: NAME.onnx + outputs
                cases.append({"id": f"{folder}/{f.stem}", "source": folder, "file": str(f)})
            for d in sorted((data / folder).glob("*")):
                if (d / "model.onnx").is_file():
                    cases.append({"id": f"{folder}/{d.name}", "source": folder, "dir": str(d)})
    return cases


def _value_type(vi) -> str:
    return vi.type.WhichOneof("value")


def _read_value(path: Path, kind: str) -> Any:
    """A test_data_set .pb file as a numpy value (tensor, list, dict, None)."""
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    if kind == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return numpy_helper.to_list(p)
    if kind == "map_type":
        p = onnx.MapProto()
        p.ParseFromString(data)
        return numpy_helper.to_dict(p)
    if kind == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        return numpy_helper.to_optional(p)
    p = onnx.TensorProto()
    p.ParseFromString(data)
    return numpy_helper.to_array(p)


def _as_value(v: Any) -> Any:
    """TensorProto (float8, bfloat16, int4 cases) -> numpy (ml_dtypes) array; lists deep."""
    import onnx
    from onnx import numpy_helper

    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return [_as_value(x) for x in v]
    return v


def materialize(case: dict[str, Any]) -> tuple[Any, list[tuple[dict, list]], float, float]:
    """(ModelProto, [(feeds, expected outputs)], rtol, atol) of a case."""
    import onnx

    if case["source"] == "node":
        tc = case["tc"]
        model = tc.model
        names = [i.name for i in model.graph.input]
        sets = []
        for ins, outs in tc.data_sets:
            feeds = {n: _as_value(v) for n, v in zip(names, ins)}
            sets.append((feeds, [_as_value(o) for o in outs]))
        return model, sets, float(tc.rtol), float(tc.atol)
    if "file" in case:  # a light model: no inputs, NAME_output_K.pb beside it
        f = Path(case["file"])
        model = onnx.load(str(f))
        outs = [_read_value(f.with_name(f"{f.stem}_output_{k}.pb"), _value_type(vi))
                for k, vi in enumerate(model.graph.output)
                if f.with_name(f"{f.stem}_output_{k}.pb").exists()]
        # the inputs onnx's own runner makes for these (Runner.generate_dummy_data), and the
        # tolerance its model cases give
        from onnx.backend.test.case.model import collect_testcases as model_cases
        from onnx.backend.test.runner import Runner

        inits = {i.name for i in model.graph.initializer}
        feeds = {i.name: Runner.generate_dummy_data(i, seed=0, name=f.stem, random=False)
                 for i in model.graph.input if i.name not in inits}
        tol = {tc.model_name: (tc.rtol, tc.atol) for tc in model_cases()}
        rtol, atol = tol.get(f.stem.removeprefix("light_"), (1e-3, 1e-7))
        return model, [(feeds, outs)], float(rtol), float(atol)
    d = Path(case["dir"])
    model = onnx.load(str(d / "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    ins = [i for i in model.graph.input if i.name not in inits]
    sets = []
    for ds in sorted(d.glob("test_data_set_*")):
        feeds = {}
        for k, vi in enumerate(ins):
            p = ds / f"input_{k}.pb"
            if p.exists():
                feeds[vi.name] = _read_value(p, _value_type(vi))
        outs = [_read_value(ds / f"output_{k}.pb", _value_type(vi))
                for k, vi in enumerate(model.graph.output) if (ds / f"output_{k}.pb").exists()]
        sets.append((feeds, outs))
    return model, sets, 1e-3, 1e-7


# ------------------------------------------------------------------------------ onnxruntime
def _ort_feed(v: Any) -> Any:
    """A feed onnxruntime's binding takes: a numpy scalar (a case's 0-d input) as a 0-d
    array; lists deep."""
    import numpy as np

    if isinstance(v, list):
        return [_ort_feed(x) for x in v]
    if isinstance(v, np.generic):  # the binding wants arrays
        return np.asarray(v)
    return v


def ort_run(model: Any, feeds: dict[str, Any]) -> list[Any]:
    """A fresh plain onnxruntime session of ``model`` (bytes, path or ModelProto) on feeds.

    bfloat16, float8, int4/uint4, int2/uint2 and float4 feeds and outputs go through typed
    OrtValues (``onnx_lab.runtime.typed``: the binding takes and returns none of them as
    numpy), and come back as ml_dtypes arrays."""
    import onnxruntime as ort

    from onnx_lab.runtime.typed import (
        SPECIAL_OUTPUT_TYPES,
        from_ortvalue,
        needs_ortvalue,
        to_ortvalue,
    )

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    f = {k: _ort_feed(v) for k, v in feeds.items() if k in names and v is not None}
    special = any(needs_ortvalue(v) for v in f.values()) or any(
        o.type in SPECIAL_OUTPUT_TYPES for o in sess.get_outputs())
    tensors = all(hasattr(v, "dtype") and v.dtype.kind not in "OUS" for v in f.values()) and \
        all(o.type.startswith("tensor(") for o in sess.get_outputs())
    if special and tensors:
        ovs = {k: to_ortvalue(v) for k, v in f.items()}
        return [from_ortvalue(o) for o in sess.run_with_ort_values(None, ovs)]
    return sess.run(None, f)


def matches(expected: Any, actual: Any, rtol: float, atol: float) -> tuple[bool, str]:
    """onnx's backend test rule (assert_allclose; strings and ints exactly; NaN == NaN)."""
    import numpy as np

    if expected is None or actual is None:
        return (expected is None) == (actual is None), "optional presence"
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(expected) != set(actual):
            return False, "map keys differ"
        for k in expected:
            ok, why = matches(expected[k], actual[k], rtol, atol)
            if not ok:
                return False, f"key {k!r}: {why}"
        return True, ""
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return False, "sequence length differs"
        for k, (e, a) in enumerate(zip(expected, actual)):
            ok, why = matches(e, a, rtol, atol)
            if not ok:
                return False, f"element {k}: {why}"
        return True, ""
    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape:
        return False, f"shape {a.shape} vs expected {e.shape}"
    if e.dtype.kind in "OUS" or a.dtype.kind in "OUS":
        same = e.astype(object).ravel().tolist() == a.astype(object).ravel().tolist()
        return same, "" if same else "strings differ"
    if e.dtype == bool or a.dtype == bool or e.dtype.kind in "iu" and a.dtype.kind in "iu":
        same = bool(np.array_equal(e.astype(np.int64), a.astype(np.int64)))
        return same, "" if same else "integers differ"
    try:
        ef, af = e.astype(np.float64), a.astype(np.float64)
    except (TypeError, ValueError):
        same = e.tobytes() == a.tobytes()
        return same, "" if same else "bytes differ"
    both_nan = np.isnan(ef) & np.isnan(af)
    close = np.isclose(af, ef, rtol=rtol, atol=atol) | both_nan
    if bool(close.all()):
        return True, ""
    return False, f"max abs err {float(np.nanmax(np.abs(af - ef))):.3g}"


def all_match(expected: list, actual: list, rtol: float, atol: float) -> tuple[bool, str]:
    if len(expected) != len(actual):
        return False, f"{len(actual)} outputs, expected {len(expected)}"
    for k, (e, a) in enumerate(zip(expected, actual)):
        ok, why = matches(e, a, rtol, atol)
        if not ok:
            return False, f"output {k}: {why}"
    return True, ""


# ------------------------------------------------------------------------------ one case
def case_dims(model: Any, feeds_list: list[dict[str, Any]]) -> dict[str, int]:
    """The named input dims the case's own inputs give (a user opens a model with the dims
    of the inputs they run it on): ``cost`` needs every dim, and a sequence input's element
    dims (``sequence_map_*``: "Unresolved dims: 'N'") come from nowhere else."""
    import numpy as np

    out: dict[str, int] = {}
    feeds = feeds_list[0] if feeds_list else {}
    for vi in model.graph.input:
        t, v = vi.type, feeds.get(vi.name)
        if t.HasField("sequence_type") and isinstance(v, list) and v:
            t, v = t.sequence_type.elem_type, v[0]
        if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            continue
        shape = np.shape(v) if isinstance(v, (np.ndarray, np.generic)) else None
        if shape is None or len(shape) != len(t.tensor_type.shape.dim):
            continue
        for d, n in zip(t.tensor_type.shape.dim, shape):
            if d.HasField("dim_param") and d.dim_param and d.dim_param not in out:
                out[d.dim_param] = int(n)
    return out


def _verify_feeds(model: Any, feeds_list: list[dict[str, Any]]) -> bool | dict[str, Any]:
    """The verification options of ``safe``: the case's own inputs where they give a value
    to every graph input (random inputs fall outside some ops' domain: a label that indexes
    a Gather in the ``softmax_cross_entropy`` expansions), else seeded random inputs."""
    import numpy as np

    inits = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    if not feeds_list or not all(f.get(n) is not None for f in feeds_list for n in names):
        return True
    return {"feeds": [{n: np.asarray(f[n]) if isinstance(f[n], np.generic) else f[n]
                       for n in names} for f in feeds_list]}


def _last_line(tb: str) -> str:
    lines = [x for x in tb.strip().splitlines() if x.strip()]
    return lines[-1][:400] if lines else ""


def run_case(case: dict[str, Any], work: Path) -> dict[str, Any]:
    """Run every stage of one case; returns its row (see FIELDS)."""
    import onnx_lab
    from onnx_lab.errors import LabError

    row: dict[str, Any] = {"id": case["id"], "source": case["source"], "stage": "",
                           "error_type": "", "error": "", "ort_original": "",
                           "saved_matches": "", "compare_passed": "", "steps": ""}
    model, sets, rtol, atol = materialize(case)
    feeds_list = [f for f, _ in sets]
    # the original in plain onnxruntime: does it load, run, match the expected outputs?
    orig_outs: list[Any] | None = None
    try:
        orig_outs = [ort_run(model, f) for f in feeds_list]
        ok = all(all_match(exp, got, rtol, atol)[0] for (_, exp), got in zip(sets, orig_outs))
        row["ort_original"] = "matches" if ok else "differs"
    except Exception as e:  # onnxruntime's own refusal, recorded as it is
        row["ort_original"] = f"fails: {type(e).__name__}: {str(e).splitlines()[0][:200]}" \
            if str(e) else f"fails: {type(e).__name__}"
    stage = "open"
    try:
        lab = onnx_lab.open(model, dims=case_dims(model, feeds_list))
        stage = "tables"
        _ = lab.nodes, lab.initializers, lab.tensors, lab.inputs, lab.outputs
        stage = "summary"
        lab.summary()
        stage = "check"
        lab.check()
        stage = "cost"
        lab.cost()
        stage = "render"
        lab.render(timeout=5)
        stage = "patterns"
        lab.patterns()
        stage = "safe"
        results = lab.apply_preset("safe", verify=_verify_feeds(model, feeds_list))
        row["steps"] = ";".join(r.name + (" (dropped)" if getattr(r, "dropped", None) else "")
                                for r in results if getattr(r, "modified", False))
        flagged = [r.name for r in results if getattr(r, "verify_passed", None) is False]
        stage = "save"
        saved = lab.save(work / "saved" / "model.onnx")
        stage = "saved_run"
        refs = [exp for _, exp in sets]
        if row["ort_original"] == "differs" and orig_outs is not None:
            refs = orig_outs  # onnxruntime's own numbers are the yardstick of the saved file
        try:
            saved_outs = [ort_run(saved, f) for f in feeds_list]
        except Exception as e:
            if orig_outs is not None:
                raise AssertionError(f"the saved model does not run where the original "
                                     f"does: {type(e).__name__}: {e}") from e
            saved_outs = None
        if saved_outs is not None:
            why = ""
            for ref, got in zip(refs, saved_outs):
                ok, why = all_match(ref, got, rtol, atol)
                if not ok:
                    break
            row["saved_matches"] = ok
            if not ok:
                row.update({"class": "wrong", "stage": stage, "error": why})
                return row
            if flagged:  # a step's verification failed, yet the saved model is right
                row.update({"class": "false_alarm", "stage": "safe",
                            "error": f"verification failed for {', '.join(flagged)}"})
                return row
        if saved_outs is None:
            # neither file runs in plain onnxruntime on the case's inputs: nothing to check
            # the results against, so the case is not "ok" (it is onnxruntime's refusal)
            row.update({"class": "refused", "stage": stage, "error_type": "OnnxRuntime",
                        "error": f"plain onnxruntime cannot run the case: "
                        f"{row['ort_original']}"[:400]})
            return row
        stage = "compare"
        cmp = onnx_lab.compare(model, lab, feeds=feeds_list[0] if len(feeds_list) == 1
                               else feeds_list)
        row["compare_passed"] = bool(cmp.passed)
        if not cmp.passed:
            fd = getattr(cmp, "first_divergence", None)
            row.update({"class": "false_alarm" if row["saved_matches"] is True else "refused",
                        "stage": stage, "error_type": "ComparisonFailed",
                        "error": str(fd)[:400]})
            return row
        row["class"] = "ok"
        return row
    except LabError as e:
        msg = str(e).splitlines()[0] if str(e) else ""
        row.update({"class": "refused", "stage": stage, "error_type": type(e).__name__,
                    "error": msg[:400]})
        return row
    except Exception as e:
        row.update({"class": "raw_exception", "stage": stage, "error_type": type(e).__name__,
                    "error": _last_line(traceback.format_exc())})
        return row


# ------------------------------------------------------------------------------ the runner
def _child(case: dict[str, Any], wfd: int, time_limit: float, memory_limit: int) -> None:
    signal.alarm(int(time_limit) + 1)
    cpu = int(time_limit) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (2 * memory_limit, 2 * memory_limit))
    work = Path(tempfile.mkdtemp(prefix="conf"))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            row = run_case(case, work)
    except MemoryError:
        row = {"id": case["id"], "source": case["source"], "class": "memory",
               "error": "MemoryError"}
    except BaseException as e:  # the harness itself (materialize): still one line
        row = {"id": case["id"], "source": case["source"], "class": "raw_exception",
               "stage": "harness", "error_type": type(e).__name__,
               "error": _last_line(traceback.format_exc())}
    shutil.rmtree(work, ignore_errors=True)
    data = json.dumps(row, default=str).encode()
    with os.fdopen(wfd, "wb") as f:
        f.write(data)
    os._exit(0)


def run_all(cases: list[dict[str, Any]], jobs: int, time_limit: float, memory_limit: int,
            progress: bool = True) -> list[dict[str, Any]]:
    """Run every case in a forked child, ``jobs`` at a time; rows in the cases' order."""
    import onnxruntime  # noqa: F401

    import onnx_lab  # noqa: F401 - imported once here, before the forks
    import onnx_lab.lab  # noqa: F401
    import onnx_lab.numerics.compare  # noqa: F401

    rows: dict[int, dict[str, Any]] = {}
    running: dict[int, tuple[int, int, float, bytearray]] = {}  # pid -> (i, rfd, t0, buf)
    todo = list(range(len(cases)))
    t_start = last = time.time()
    while todo or running:
        while todo and len(running) < jobs:
            i = todo.pop(0)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(cases[i], w, time_limit, memory_limit)
            os.close(w)
            running[pid] = (i, r, time.time(), bytearray())
        fds = {v[1]: pid for pid, v in running.items()}
        ready, _, _ = select.select(list(fds), [], [], 0.5)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            pid = fds[fd]
            if chunk:
                running[pid][3].extend(chunk)
                continue
            i, _, t0, buf = running.pop(pid)
            os.close(fd)
            _, status = os.waitpid(pid, 0)
            secs = round(time.time() - t0, 2)
            try:
                row = json.loads(bytes(buf))
            except ValueError:
                sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
                kind = "timeout" if sig in (signal.SIGALRM, signal.SIGXCPU, signal.SIGKILL) \
                    else "crash"
                row = {"id": cases[i]["id"], "source": cases[i]["source"], "class": kind,
                       "error": f"signal {sig}" if sig else f"exit {os.WEXITSTATUS(status)}"}
            row["seconds"] = secs
            rows[i] = row
        now = time.time()
        for pid, (_i, _fd, t0, _buf) in list(running.items()):
            if now - t0 > time_limit + 10:
                os.kill(pid, signal.SIGKILL)
        if progress and now - last > 30:
            last = now
            print(f"conformance: {len(rows)}/{len(cases)} cases, {now - t_start:.0f} s",
                  file=sys.stderr, flush=True)
    return [rows[i] for i in range(len(cases))]


def summarize(rows: list[dict[str, Any]], known: set[str] = frozenset()) -> dict[str, Any]:
    classes = Counter(r["class"] for r in rows)
    refusals = Counter(f"{r.get('stage')}: {r.get('error_type')}: {str(r.get('error'))[:90]}"
                       for r in rows if r["class"] == "refused")
    ort_fail = sum(1 for r in rows if r["class"] == "refused"
                   and str(r.get("ort_original", "")).startswith("fails"))
    by_source: dict[str, Counter] = {}
    for r in rows:
        by_source.setdefault(r["source"], Counter())[r["class"]] += 1
    return {
        "cases": len(rows),
        "classes": dict(classes.most_common()),
        "by_source": {k: dict(v.most_common()) for k, v in sorted(by_source.items())},
        "refused_where_onnxruntime_fails": ort_fail,
        "refused_by_stage": dict(Counter(r.get("stage") for r in rows
                                         if r["class"] == "refused").most_common()),
        "top_refusals": refusals.most_common(25),
        "bad": [{k: r.get(k) for k in ("id", "class", "stage", "error_type", "error")}
                for r in rows if r["class"] in BAD and r["id"] not in known],
        "known": sorted(r["id"] for r in rows if r["class"] in BAD and r["id"] in known),
    }


def merge(folders: list[str], out: Path, known: set[str]) -> int:
    """One summary.json + cases.csv of the chunks of a sweep (``--skip``/``--limit`` runs);
    a later folder's row for a case replaces an earlier one (a rerun with ``--only``)."""
    by_id: dict[str, dict[str, Any]] = {}
    for d in folders:
        with open(Path(d) / "cases.csv", newline="") as f:
            for r in csv.DictReader(f):
                by_id[r["id"]] = r
    rows = list(by_id.values())
    s = summarize(rows, known)
    s.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), merged=folders)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(s, indent=2, default=str))
    with open(out / "cases.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print(json.dumps({k: s[k] for k in ("cases", "classes", "refused_where_onnxruntime_fails")},
                     indent=2))
    return 1 if s["bad"] else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="test-artifacts/conformance")
    ap.add_argument("--subset", type=int, default=None, help="a deterministic subset of N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", default=None, help="comma-separated case ids")
    ap.add_argument("--skip", type=int, default=0, help="start at case K (chunked sweeps)")
    ap.add_argument("--limit", type=int, default=None, help="at most N cases from --skip")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per case")
    ap.add_argument("--memory-limit", type=float, default=2.0, help="GiB per case")
    ap.add_argument("--known", default="", help="comma-separated ids not counted as bad")
    ap.add_argument("--merge", nargs="+", default=None,
                    help="merge the cases.csv of chunked runs' folders (later ones win) into --out")
    a = ap.parse_args(argv)
    if a.merge:
        return merge(a.merge, Path(a.out), {k for k in a.known.split(",") if k})
    cases = collect()
    if a.only:
        want = set(a.only.split(","))
        cases = [c for c in cases if c["id"] in want]
    if a.subset is not None:
        cases = random.Random(a.seed).sample(cases, min(a.subset, len(cases)))
        cases.sort(key=lambda c: c["id"])
    cases = cases[a.skip:a.skip + a.limit if a.limit else None]
    t0 = time.time()
    rows = run_all(cases, max(1, a.jobs), a.time_limit, int(a.memory_limit * 2**30))
    known = {k for k in a.known.split(",") if k}
    s = summarize(rows, known)
    import onnx
    import onnxruntime

    s.update(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             command=" ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
             onnx=onnx.__version__, onnxruntime=onnxruntime.__version__,
             wall_seconds=round(time.time() - t0, 1))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(s, indent=2, default=str))
    with open(out / "cases.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    print(json.dumps({k: s[k] for k in ("cases", "classes", "refused_where_onnxruntime_fails",
                                        "wall_seconds")}, indent=2))
    for b in s["bad"][:40]:
        print(f"BAD {b['class']} {b['id']} [{b['stage']}] {b['error_type']}: {b['error']}")
    return 1 if s["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
