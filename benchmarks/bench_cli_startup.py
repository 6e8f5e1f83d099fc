"""Start-up of the ``onnx-lab`` CLI against the bare libraries it wraps (prints figures; asserts
nothing).

Each command runs in a fresh process on a 1-node model (a Relu, written to a temporary folder):

- ``baseline``: ``python -c "import onnx, onnxruntime; onnxruntime.InferenceSession(path)"``;
- ``--help``: ``python -m onnx_lab.cli --help``;
- ``summary``: ``python -m onnx_lab.cli summary MODEL --json``;
- ``cost``: ``python -m onnx_lab.cli cost MODEL --json``;
- ``check``: ``python -m onnx_lab.cli check MODEL --json`` (loads a session per provider).

onnx_lab's modules are byte-compiled first (``compileall``, into their ``__pycache__``), as
``pip install`` does for a wheel and as onnx and onnxruntime's modules already are: in a
checkout with ``PYTHONDONTWRITEBYTECODE`` set, every start would otherwise compile onnx_lab's
sources again (~0.1 s of a ~1 s start here) and time that instead of the start-up itself.

The commands are interleaved (one of each per round, in rotated order) so that a change in the
machine's load hits all of them alike; each figure is the median wall time over the rounds and
the ratio is that median over the baseline's. Target: every ratio <= 1.2. Beside the wall
time, the CPU time of the process (user + system, from ``resource.getrusage``): on a machine
shared with other jobs the wall time swings with the load, the CPU time much less. The load
average is printed beside the figures.

Run: ``.venv/bin/python benchmarks/bench_cli_startup.py [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent


def _model(folder: Path) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "one", [x], [y])
    path = folder / "one.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def commands(path: str) -> dict[str, list[str]]:
    """The commands timed, by label: argv lists run as they are."""
    py = sys.executable
    cli = [py, "-m", "onnx_lab.cli"]
    return {
        "baseline": [py, "-c", "import sys, onnx, onnxruntime; "
                     "onnxruntime.InferenceSession(sys.argv[1])", path],
        "--help": [*cli, "--help"],
        "summary --json": [*cli, "summary", path, "--json"],
        "cost --json": [*cli, "cost", path, "--json"],
        "check --json": [*cli, "check", path, "--json"],
    }


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _time(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of argv."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    c0 = _cpu()
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{argv[2:]} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed, _cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds (median over them)")
    args = ap.parse_args()
    # As pip does on install: the bytecode the baseline's libraries already have.
    compileall.compile_dir(str(ROOT / "onnx_lab"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(_model(Path(tmp)))
        labels = list(cmds)
        for label in labels:  # warm the file cache: the first start of each is not timed
            _time(cmds[label])
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in labels}
        for r in range(args.rounds):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                times[label].append(_time(cmds[label]))
    def med(label: str, i: int) -> float:
        return statistics.median(t[i] for t in times[label])

    print(f"load average {os.getloadavg()[0]:.1f}, {args.rounds} rounds, "
          f"python {sys.version.split()[0]}")
    print(f"{'command':16} {'wall s':>7} {'ratio':>6} {'CPU s':>7} {'ratio':>6}")
    for label in labels:
        print(f"{label:16} {med(label, 0):7.2f} {med(label, 0) / med('baseline', 0):6.2f} "
              f"{med(label, 1):7.2f} {med(label, 1) / med('baseline', 1):6.2f}")


if __name__ == "__main__":
    main()
