"""A minimal repro of a divergence: the candidate's node alone, the reference's activations as
its inputs, the reference's outputs, and a short script that shows the difference with
onnxruntime alone — what one attaches to an issue of onnxruntime or of the exporter.

Example:
    >>> c = onnx_lab.compare("model.onnx", "model.opt.onnx")
    >>> r = c.repro("repro/")            # or onnx_lab.repro(c, "repro/")
    >>> print(open(r.script).read())     # python repro/repro.py prints the difference
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from onnx_lab.core._location import user_path
from onnx_lab.core.history import History
from onnx_lab.core.outputs import write_atomic
from onnx_lab.core.save import save
from onnx_lab.errors import SaveError
from onnx_lab.numerics._values import is_structured
from onnx_lab.numerics.confirm import LocalCheck, local_check

__all__ = ["Repro", "write_repro"]

# Every name of the model (hostile input) stays in names.json, read as data: none is written
# into the script, where a node named 'a"""+__import__("os").system(...)+"""' ran as code.
_SCRIPT = '''"""Repro: one node of the candidate model (names.json: "node"), fed the reference model's
activations, differs from the reference's outputs (tolerance: {rule}). Run: python repro.py"""
import json, os
import numpy as np
import onnxruntime as ort
here = os.path.dirname(os.path.abspath(__file__))
names = json.load(open(os.path.join(here, "names.json")))
inputs, expected = (np.load(os.path.join(here, f)) for f in ("inputs.npz", "expected.npz"))
{held}so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
sess = ort.InferenceSession(os.path.join(here, "node.onnx"), so, providers=["CPUExecutionProvider"])
print(f"node {{names['node']!r}}")
got = sess.run(names["outputs"], {{n: {feed} for i, n in enumerate(names["inputs"])}})
for i, (name, g) in enumerate(zip(names["outputs"], got)):
{compare}    want = expected[f"arr_{{i}}"]
    if want.dtype.kind in "US":  # strings: equal or not
        print(f"{{name!r}}: {{int((np.asarray(g).astype(str) != want).sum())}} of {{want.size}} strings differ"); continue
    if np.shape(g) != want.shape or not want.size: print(f"{{name!r}}: shape {{list(np.shape(g))}}, expected {{list(want.shape)}}"); continue
    want = want.astype(np.float64); err = np.abs(g.astype(np.float64) - want)
    print(f"{{name!r}}: max_abs {{err.max():.6g}}, max |expected| {{np.abs(want).max():.6g}}")
'''

# Written into the script only when a value is a sequence or a map (a ZipMap's output).
_HELD = '''held = names["values"]  # sequences and maps, as data


def dec(v):  # a sequence or map value from names.json
    if "seq" in v:
        return [dec(x) for x in v["seq"]]
    if "map" in v:
        return {{k: (lambda a: a.item() if a.ndim == 0 else a)(dec(x)) for k, x in v["map"]}}
    return np.array(v["tensor"], dtype=v["dtype"])


def flat(v, at=""):  # (where, number) of a sequence or map, element by element
    if isinstance(v, (list, dict)):
        for k, x in (v.items() if isinstance(v, dict) else enumerate(v)):
            yield from flat(x, f"{{at}}[{{k!r}}]")
    else:
        yield at, np.asarray(v)


def gap(a, b):  # max_abs of two leaves: inf where their shapes or strings differ
    if a.shape != b.shape:
        return float("inf")
    if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
        return 0.0 if (a.astype(str) == b.astype(str)).all() else float("inf")
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0


'''
_HELD_FEED = '(dec(held["inputs"][str(i)]) if str(i) in held["inputs"] else inputs[f"arr_{i}"])'
_HELD_COMPARE = '''    if str(i) in held["expected"]:  # a sequence or a map: key by key
        w, h = dict(flat(dec(held["expected"][str(i)]))), dict(flat(g))
        both = [k for k in w if k in h]
        err = max((gap(h[k], w[k]) for k in both), default=0.0)
        shaped = sum(h[k].shape != w[k].shape for k in both)
        print(f"{name!r}: {len(set(w) ^ set(h))} keys or items on one side only, "
              f"{shaped} of another shape, max_abs {err:.6g} over {len(both)}"); continue
'''


@dataclass
class Repro:
    """The files of a repro and the check they reproduce.

    Attributes:
        folder: where they were written; model (node.onnx), inputs (inputs.npz),
            expected (expected.npz), names (names.json), script (repro.py): their paths.
        check: the :class:`~onnx_lab.numerics.confirm.LocalCheck` the files reproduce.
    """

    folder: Path
    model: Path
    inputs: Path
    expected: Path
    names: Path
    script: Path
    check: LocalCheck

    def __repr__(self) -> str:
        return (f"<onnx_lab.Repro {self.folder}: node {self.check.node_id}, local max_abs "
                f"{self.check.max_abs:.3g}; run python {self.script}>")


def write_repro(comparison: Any, folder: str | os.PathLike,
                divergence: dict[str, Any] | None = None, *, overwrite: bool = False
                ) -> Repro:
    """Cut the candidate's node of ``divergence`` (default: the first divergence) and write
    a repro into ``folder``: node.onnx (weights inside), inputs.npz (the reference's values of
    its inputs), expected.npz (the reference's outputs), names.json and repro.py.

    Args:
        comparison: a Comparison of two models (see :func:`~onnx_lab.numerics.confirm.local_check`).
        folder: a new or empty folder (created).
        divergence: another divergence-like dict than the first one.
        overwrite: allow a folder that already holds files.

    Raises:
        InputError: nothing to cut (see local_check). SaveError: the folder is a file or not
            empty.
    """
    check = local_check(comparison, divergence)
    out = user_path(folder)
    if out.exists() and not out.is_dir():
        raise SaveError(f"{str(out)!r} is a file, not a folder.", fix="Pass a folder path.")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise SaveError(f"Folder {str(out)!r} is not empty.",
                        fix="Pass a new folder, or overwrite=True.")
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: out / f for k, f in (("model", "node.onnx"), ("inputs", "inputs.npz"),
                                      ("expected", "expected.npz"), ("names", "names.json"),
                                      ("script", "repro.py"))}
    save(History(check.model), paths["model"], external_data=False, overwrite=True)
    inputs = list(check.feeds)
    outputs = list(check.expected)
    # sequences and maps (a ZipMap's output) go to names.json as data: np.load refuses the
    # object arrays they would be, and repro.py stopped there
    held = {"inputs": _held([check.feeds[n] for n in inputs]),
            "expected": _held([check.expected[n] for n in outputs])}
    # each file through a fresh temporary renamed into place (never through a planted link)
    write_atomic(paths["inputs"], _npz([check.feeds[n] for n in inputs]))
    write_atomic(paths["expected"], _npz([check.expected[n] for n in outputs]))
    write_atomic(paths["names"], json.dumps({"node": check.node_id, "inputs": inputs,
                                             "outputs": outputs, "values": held}, indent=1))
    rule = next(iter(check.rules.values())).describe() if check.rules else ""
    structured = bool(held["inputs"] or held["expected"])
    write_atomic(paths["script"], _SCRIPT.format(
        rule=rule.replace('"', "'"), held=_HELD.format() if structured else "",
        feed=_HELD_FEED if structured else 'inputs[f"arr_{i}"]',
        compare=_HELD_COMPARE if structured else ""))
    return Repro(out, check=check, **paths)


def _npz(arrays: list[Any]) -> Any:
    """A writer of ``arrays`` as an .npz file at the path it is given (``np.savez`` to an
    open file: a path without the suffix would get ``.npz`` appended); a sequence or map
    (held in names.json, :func:`_held`) is an empty array in its place."""
    def write(path: Path) -> None:
        with open(path, "wb") as f:
            np.savez(f, *[np.zeros(0) if is_structured(a) else _loadable(a) for a in arrays])
    return write


def _held(values: list[Any]) -> dict[str, Any]:
    """{position: value as JSON data} of the sequences and maps among ``values``."""
    return {str(i): _as_data(v) for i, v in enumerate(values) if is_structured(v)}


def _as_data(v: Any) -> dict[str, Any]:
    if isinstance(v, (list, tuple)):
        return {"seq": [_as_data(x) for x in v]}
    if isinstance(v, dict):
        return {"map": [[k.item() if isinstance(k, np.generic) else k, _as_data(x)]
                        for k, x in v.items()]}
    a = np.asarray(v)
    return {"tensor": a.tolist(), "dtype": a.dtype.str if a.dtype.kind not in "OU" else "U"}


def _loadable(a: Any) -> Any:
    """A string tensor (an object array, as onnxruntime returns it) as a numpy str array:
    ``np.load`` refuses object arrays without ``allow_pickle``, and repro.py stopped there
    on a LabelEncoder's or OneHotEncoder's string input (onnxruntime takes str arrays)."""
    arr = np.asarray(a) if isinstance(a, np.ndarray) else a
    if isinstance(arr, np.ndarray) and arr.dtype == object and arr.size \
            and all(isinstance(x, str) for x in arr.reshape(-1)):
        return arr.astype(str)
    return a
