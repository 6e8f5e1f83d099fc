"""Optimizing BERT-base: onnx_lab's preset ``safe`` (every step verified) vs onnxslim and onnxsim.

Each tool runs in its own process (load, optimize, save to a temporary folder), so time and
peak memory are measured the same way for all; peak RSS is sampled every 20 ms (psutil).

- onnx_lab: ``onnx_lab.open(path, dims=...)``, ``lab.apply_preset("safe")`` (each modifying
  step verified: final outputs and every surviving intermediate tensor, ORT with graph
  optimizations off), ``lab.save(out)``; once at ``sequence=128`` and once at ``sequence=32``
  (the dims only set the size of the verification inputs), and once with ``verify=False``;
- onnx_lab_mmap: the same at ``sequence=128`` with ``onnx_lab.open(..., mmap=True)`` (the
  file mapped instead of read, as the command does);
- onnx_lab_cli: the same ``safe`` preset, verified, at ``sequence=128``, through the command
  ``onnx-lab optimize SRC OUT --dims batch=1 --dims sequence=128`` (``onnx_lab.cli.main`` in
  the worker process; the CLI, owning its process, skips the collector passes at exit);
- onnxslim: ``onnxslim.slim(path)`` then ``onnx.save``;
- onnxsim: ``onnx.load``, ``onnxsim.simplify`` (no check runs, its default), ``onnx.save``.

Run: ``.venv/bin/python benchmarks/bench_optimize.py [--repeat N]`` (the best of N runs per tool
is reported; the machine may be shared).
Target: onnx_lab (verified) wall time <= 0.5x onnxslim's. Prints node counts after each tool.

Side by side on several models (``--models``), each in one fresh process: a warm-up of each
tool, then ``--rounds`` rounds (3) in rotated order, medians; ratio = ``onnx_lab.open`` +
``apply_preset("safe")`` ÷ ``onnx.load`` + ``onnxslim.slim`` (no save on either side):

- ``safe``: verified by region (the default: the reference captured once, each step's region,
  the outputs once at the end); ``safe_full``: ``verify="full"`` (every step on the whole
  model); ``safe_noverify``: ``verify=False``; ``onnxslim``.

``.venv/bin/python benchmarks/bench_optimize.py --models light_resnet50 light_vgg19 resnet50
ssd_lite bert_transformers`` (names: ``light_<name>`` for onnx's light CNNs, ``tv_<name>`` for
torchvision's exports of ``benchmarks/_torchvision.py`` — made with
``--torchvision-venv DIR``, a venv holding torchvision, when missing, else skipped — or a
builder of ``benchmarks/_models.py``; BERT runs at batch 1, sequence 128). After the rounds,
the ``safe`` result is saved and its outputs compared with the original's in fresh
onnxruntime sessions (default options), printed per output.
Targets: ``safe`` <= 0.5x onnxslim on the CNNs and the detector, <= 0.35x on BERT-base.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # the onnx_lab of this checkout
PY = sys.executable


def _worker(tool: str, src: str, out: str, seq: int) -> None:
    """Run one tool in this process and print a JSON line with its phases."""
    t0 = time.perf_counter()
    phases: dict = {}
    if tool == "onnx_lab_cli":
        # The command a shell user runs (``onnx-lab optimize``), in this process: the CLI
        # owns its process and installs the exit hook of onnx_lab/_exit.py.
        import contextlib
        import io

        from onnx_lab import cli

        phases["import_s"] = time.perf_counter() - t0
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = cli.main(["optimize", src, out, "--dims", "batch=1", "--dims",
                             f"sequence={seq}", "--json"])
        if code != 0:
            raise SystemExit(code)
        report = json.loads(printed.getvalue())
        n0, n1 = report["nodes_before"], report["nodes_after"]
        phases["verified_steps"] = sum(p["verify_passed"] is not None
                                       for p in report["passes"])
        phases["verify_passed"] = report["verify_passed"] is not False
    elif tool.startswith("onnx_lab"):
        import onnx_lab
        from onnx_lab.runtime import _runner

        phases["import_s"] = time.perf_counter() - t0
        # Time inside the model runs of verification (session creation and run), for the
        # breakdown; the wrapper only measures.
        runs = {"s": 0.0, "n": 0}
        real_run = _runner.run

        def timed_run(*args, **kwargs):
            t1 = time.perf_counter()
            try:
                return real_run(*args, **kwargs)
            finally:
                runs["s"] += time.perf_counter() - t1
                runs["n"] += 1

        _runner.run = timed_run
        lab = onnx_lab.open(src, dims={"batch": 1, "sequence": seq},
                            mmap=tool == "onnx_lab_mmap")
        n0 = len(lab.index)
        phases["load_s"] = time.perf_counter() - t0
        t = time.perf_counter()
        results = lab.apply_preset("safe", verify=tool != "onnx_lab_noverify")
        phases["optimize_s"] = time.perf_counter() - t
        phases["runs_s"], phases["runs"] = runs["s"], runs["n"]
        phases["verify_s"] = sum(r.verify_seconds or 0 for r in results)
        phases["verified_steps"] = sum(r.verify_passed is not None for r in results)
        phases["verify_passed"] = all(r.verify_passed is not False for r in results)
        t = time.perf_counter()
        lab.save(out)
        phases["save_s"] = time.perf_counter() - t
        n1 = len(lab.index)
    else:
        import onnx

        if tool == "onnxslim":
            import onnxslim

            n0 = len(onnx.load(src, load_external_data=False).graph.node)
            t = time.perf_counter()
            model = onnxslim.slim(src)
            phases["optimize_s"] = time.perf_counter() - t
        else:
            import onnxsim

            model = onnx.load(src)
            n0 = len(model.graph.node)
            phases["load_s"] = time.perf_counter() - t0
            t = time.perf_counter()
            model, _ = onnxsim.simplify(model)
            phases["optimize_s"] = time.perf_counter() - t
        t = time.perf_counter()
        onnx.save(model, out)
        phases["save_s"] = time.perf_counter() - t
        n1 = len(model.graph.node)
    phases.update(nodes_before=n0, nodes_after=n1, total_s=time.perf_counter() - t0)
    print(json.dumps(phases))


def measure(cmd: list[str]) -> tuple[float, int, dict]:
    """(wall seconds, peak RSS bytes, the worker's JSON) of one subprocess."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss + sum(
                c.memory_info().rss for c in ps.children(recursive=True)))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    out, err = proc.communicate()
    if proc.returncode != 0:
        print(f"  ! {' '.join(cmd[2:4])} exited {proc.returncode}: {err.decode()[-600:]}")
        return wall, peak, {}
    return wall, peak, json.loads(out.decode().strip().splitlines()[-1])


def main(repeat: int = 1) -> None:
    from _models import bert_base

    src = str(bert_base())
    runs = [("onnx_lab", 128), ("onnx_lab_mmap", 128), ("onnx_lab_cli", 128),
            ("onnx_lab", 32), ("onnx_lab_noverify", 128), ("onnxslim", 0), ("onnxsim", 0)]
    results: dict = {}
    walls: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_optimize_") as tmp:
        # Round-robin over the tools so each samples the same machine load; keep the best.
        for _ in range(repeat):
            for tool, seq in runs:
                out = str(Path(tmp) / f"{tool}_{seq}.onnx")
                label = f"{tool}" + (f" (sequence={seq})" if tool.startswith("onnx_lab") else "")
                got = measure([PY, __file__, "--worker", tool, src, out, str(seq)])
                walls.setdefault(label, []).append(got[0])
                if label not in results or got[0] < results[label][0]:
                    results[label] = got
    for label, (wall, peak, info) in results.items():
        extra = ""
        if "load_s" not in info and "import_s" in info:  # the CLI: its own report only
            print(f"{label:34} wall {wall:6.1f} s  peak {peak / 2**30:4.2f} GiB  nodes "
                  f"{info['nodes_before']} -> {info['nodes_after']}  (import "
                  f"{info['import_s']:.2f} s, command {info['total_s'] - info['import_s']:.2f}"
                  f" s, {info['verified_steps']} verified steps "
                  f"{'all passed' if info['verify_passed'] else 'FAILED'}; process start and "
                  f"exit {wall - info['total_s']:.2f} s)", flush=True)
            continue
        if info.get("verified_steps"):
            extra = (f", verification {info['verify_s']:.2f} s over "
                     f"{info['verified_steps']} steps ({info['runs']} model runs "
                     f"{info['runs_s']:.2f} s), "
                     f"{'all passed' if info['verify_passed'] else 'FAILED'}")
        if "import_s" in info:
            extra += (f"; import {info['import_s']:.2f} s, passes "
                      f"{info['optimize_s'] - info.get('verify_s', 0):.2f} s, process start "
                      f"and exit {wall - info['total_s']:.2f} s")
        print(f"{label:34} wall {wall:6.1f} s  peak {peak / 2**30:4.2f} GiB  nodes "
              f"{info.get('nodes_before', '?')} -> {info.get('nodes_after', '?')}  "
              f"(load {info.get('load_s', 0):.2f} s, optimize "
              f"{info.get('optimize_s', 0):.2f} s, save {info.get('save_s', 0):.2f} s"
              f"{extra})", flush=True)
    slim = results.get("onnxslim", (None,))[0]
    if slim:
        slim_median = statistics.median(walls["onnxslim"])
        for label, (wall, _peak, _info) in results.items():
            if label.startswith("onnx_lab"):
                print(f"ratio {label} / onnxslim: {wall / slim:.2f}x best of {repeat} "
                      f"({statistics.median(walls[label]) / slim_median:.2f}x of the medians)"
                      " (target <= 0.5x)")


SIDE_TOOLS = ("safe", "safe_full", "safe_noverify", "onnxslim", "floor")


def _model_path(name: str, tv_venv: str | None = None) -> tuple[str | None, dict]:
    """(path, dims) of a model name: ``light_<name>``, ``tv_<name>`` (torchvision's exports
    of ``_torchvision.py``: None when the file is missing and no ``tv_venv`` can export
    it), or a builder of ``_models.py``."""
    if name.startswith("light_"):
        import onnx

        light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
        return str(light / f"{name}.onnx"), {}
    if name.startswith("tv_"):
        import _torchvision

        path = _torchvision.path_of(name)
        if not path.exists() and tv_venv:
            subprocess.run([str(Path(tv_venv) / "bin" / "python"),
                            str(HERE / "_torchvision.py"), name], check=False)
        return (str(path) if path.exists() else None), {}
    import _models

    path = str(getattr(_models, name)())
    return path, ({"batch": 1, "sequence": 128} if "bert" in name else {})


def _check_saved(lab, original: str, dims: dict) -> dict:
    """The saved optimized model against the original, each in a fresh onnxruntime session,
    on the same seeded inputs, per output: with graph optimizations off (what the rewrite
    changed) and with onnxruntime's defaults; and, as the yardstick, the original under the
    defaults against itself with them off (onnxruntime's own fusions). A float output
    passes ``|err| <= 1e-4 + 1e-3·|ref|``; an integer one counts its differing elements."""
    import onnxruntime as ort

    from onnx_lab.runtime.feeds import as_feed_list

    feeds = as_feed_list(None, lab.original.model, dims, {}, 0)[0]

    def outputs(path: str, optimized: bool) -> dict:
        so = ort.SessionOptions()
        if not optimized:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in sess.get_inputs()}
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(None, {k: v for k, v in feeds.items() if k in wanted})))

    with tempfile.TemporaryDirectory(prefix="bench_optimize_") as tmp:
        out = str(Path(tmp) / "optimized.onnx")
        lab.save(out)
        ref_off, ref_on = outputs(original, False), outputs(original, True)
        got = {"optimizations off": _differences(ref_off, outputs(out, False)),
               "onnxruntime defaults": _differences(ref_on, outputs(out, True)),
               "original, defaults vs off": _differences(ref_off, ref_on)}
        scores = _selection_inputs(original, out, feeds)
        if scores:
            got["scores before the selections, optimizations off"] = scores
        return got


def _selection_inputs(original: str, optimized: str, feeds: dict) -> dict:
    """The data inputs of the original's selections (TopK, ArgMax, NMS... : what a near-tie
    flip is judged by) in both saved files, fresh sessions with graph optimizations off:
    the largest ``max_abs / (1e-4 + 1e-3·max|ref|)`` over them (<= 1: within tolerance)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from onnx_lab.numerics.selection import SELECTION_OPS

    a = onnx.load(original)
    b = onnx.load(optimized)
    produced = {o for n in b.graph.node for o in n.output}
    names = list(dict.fromkeys(
        n.input[k] for n in a.graph.node if n.op_type in SELECTION_OPS and not n.domain
        for k in SELECTION_OPS[n.op_type].data
        if k < len(n.input) and n.input[k] in produced))
    if not names:
        return {}
    got = []
    for m in (a, b):
        have = {o.name for o in m.graph.output}
        m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names
                              if n not in have)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        wanted = {i.name for i in sess.get_inputs()}
        got.append(sess.run(names, {k: v for k, v in feeds.items() if k in wanted}))
    worst = 0.0
    for r, c in zip(*got):
        r, c = np.asarray(r, np.float64), np.asarray(c, np.float64)
        if r.shape != c.shape:
            return {"ok": False, "note": f"a selection's input changed shape: {r.shape}"}
        if r.size:
            worst = max(worst, float(np.abs(r - c).max()) / (1e-4 + 1e-3 * np.abs(r).max()))
    return {"ok": bool(worst <= 1), "tensors": len(names), "worst_over_tolerance": worst}


def _differences(refs: dict, cands: dict) -> dict:
    import numpy as np

    rows = {}
    for name, ref in refs.items():
        cand = cands.get(name)
        if cand is None or np.shape(cand) != np.shape(ref):
            rows[name] = {"ok": False, "note": "missing or another shape "
                          f"({None if cand is None else list(np.shape(cand))} vs "
                          f"{list(np.shape(ref))})"}
            continue
        ref, cand = np.asarray(ref), np.asarray(cand)
        if ref.dtype.kind in "biu":
            bad = int(np.count_nonzero(ref != cand))
            rows[name] = {"ok": bad == 0, "differing": bad}
            continue
        err = np.abs(cand.astype(np.float64) - ref.astype(np.float64))
        ok = bool(np.all(err <= 1e-4 + 1e-3 * np.abs(ref.astype(np.float64))))
        rows[name] = {"ok": ok, "max_abs": float(err.max()) if err.size else 0.0}
    return rows


def _side_worker(path: str, dims_json: str, rounds: int) -> None:
    """One model, every tool in this process: a warm-up each, then rotated rounds; prints a
    JSON line of each tool's times (and the verification's breakdown of the last round)."""
    import onnx
    import onnxslim

    import onnx_lab

    dims = json.loads(dims_json)

    from onnx_lab.numerics.align import version_tensors
    from onnx_lab.runtime import _runner
    from onnx_lab.runtime.feeds import as_feed_list

    tmp = tempfile.TemporaryDirectory(prefix="bench_optimize_")
    optimized = str(Path(tmp.name) / "optimized.onnx")
    lab = onnx_lab.open(path, dims=dims)
    lab.apply_preset("safe", verify=False)
    lab.save(optimized)

    def run(tool: str) -> tuple[float, dict]:
        if tool == "floor":
            # What verifying a rewrite of (nearly) all the compute cannot do without: the
            # original's run with its tensors captured (the reference) and one run of the
            # optimized model (its region, with the outputs); opening is not timed.
            before = onnx_lab.open(path, dims=dims).model
            after = onnx_lab.open(optimized, dims=dims).model
            feeds = as_feed_list(None, before, dims, {}, 0)[0]
            t0 = time.perf_counter()
            _runner.run(before, feeds, [n for n, _i, _t in version_tensors(before)])
            _runner.run(after, feeds, [v.name for v in after.graph.outputs])
            return time.perf_counter() - t0, {}
        t0 = time.perf_counter()
        if tool == "onnxslim":
            onnxslim.slim(onnx.load(path))
            return time.perf_counter() - t0, {}
        lab = onnx_lab.open(path, dims=dims)
        verify = {"safe": True, "safe_full": "full", "safe_noverify": False}[tool]
        rs = lab.apply_preset("safe", verify=verify)
        wall = time.perf_counter() - t0
        info = {"verify_s": sum(r.verify_seconds or 0 for r in rs),
                "passed": all(r.verify_passed is not False for r in rs),
                "by": {r.name: r.verified_by for r in rs if r.modified},
                "nodes": [len(lab.original.model.index), len(lab.index)]}
        return wall, info

    for tool in SIDE_TOOLS:  # warm-up: imports, first sessions, caches of the file system
        run(tool)
    times: dict[str, list[float]] = {t: [] for t in SIDE_TOOLS}
    infos: dict[str, dict] = {}
    for r in range(rounds):
        order = SIDE_TOOLS[r % len(SIDE_TOOLS):] + SIDE_TOOLS[:r % len(SIDE_TOOLS)]
        for tool in order:
            wall, info = run(tool)
            times[tool].append(wall)
            infos[tool] = info
    lab = onnx_lab.open(path, dims=dims)
    lab.apply_preset("safe")
    print(json.dumps({"times": times, "infos": infos, "saved": _check_saved(lab, path, dims)}))
    tmp.cleanup()


def side_by_side(names: list[str], rounds: int = 3, tv_venv: str | None = None) -> None:
    """Print each model's medians and ratios to onnxslim (one fresh process per model)."""
    print(f"{'model':22} {'nodes':>11} " + " ".join(f"{t:>13}" for t in SIDE_TOOLS)
          + "   safe/slim  full/slim  noverify/slim  floor/slim", flush=True)
    for name in names:
        path, dims = _model_path(name, tv_venv)
        if path is None:
            print(f"{name:22} skipped: not exported (build it with a torchvision venv: "
                  "--torchvision-venv DIR, or DIR/bin/python benchmarks/_torchvision.py)",
                  flush=True)
            continue
        proc = subprocess.run([PY, __file__, "--side-worker", path, json.dumps(dims),
                               str(rounds)], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{name:22} failed: {proc.stderr[-800:]}", flush=True)
            continue
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        med = {t: statistics.median(v) for t, v in got["times"].items()}
        info = got["infos"]["safe"]
        slim = med["onnxslim"]
        print(f"{name:22} {info['nodes'][0]:>5}->{info['nodes'][1]:<5} "
              + " ".join(f"{med[t]:>11.3f} s" for t in SIDE_TOOLS)
              + f"   {med['safe'] / slim:8.2f}x {med['safe_full'] / slim:9.2f}x "
              f"{med['safe_noverify'] / slim:11.2f}x {med['floor'] / slim:10.2f}x"
              + ("" if info["passed"] else "  (verification FAILED)"), flush=True)
        print(f"{'':22} verified by: {info['by']}; verification {info['verify_s']:.3f} s "
              f"(full: {got['infos']['safe_full']['verify_s']:.3f} s)", flush=True)
        for how, rows in got["saved"].items():
            if how.startswith("scores"):
                print(f"{'':22} saved vs original, {how}: "
                      + ("within 1e-4 + 1e-3*max|ref|" if rows["ok"] else "DIFFER")
                      + f" {rows}", flush=True)
                continue
            print(f"{'':22} saved vs original, fresh onnxruntime sessions ({how}): "
                  + ("all outputs within 1e-4 + 1e-3*|ref|" if all(r["ok"] for r in
                                                                   rows.values())
                     else "DIFFER") + f" {rows}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--side-worker":
        _side_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif "--models" in sys.argv:
        i = sys.argv.index("--models") + 1
        chosen = []
        for a in sys.argv[i:]:
            if a.startswith("--"):
                break
            chosen.append(a)
        side_by_side(chosen, int(sys.argv[sys.argv.index("--rounds") + 1])
                     if "--rounds" in sys.argv else 3,
                     sys.argv[sys.argv.index("--torchvision-venv") + 1]
                     if "--torchvision-venv" in sys.argv else None)
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        main(int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1)
