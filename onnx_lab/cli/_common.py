"""Helpers every area of the CLI shares: arguments, parsing, opening the model, JSON.

They live here rather than in ``onnx_lab/cli/__init__.py`` so that the area modules import them
at module level without a cycle (``__init__`` imports the areas to build the parser);
``onnx_lab.cli`` re-exports them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_lab.errors import InputError, SaveError, WriteError

if TYPE_CHECKING:
    from onnx_lab.lab import Lab

__all__ = ["add_model_arg", "add_dims_args", "open_from_args", "parse_dims", "parse_shapes",
           "print_json", "check_numbers", "input_files", "refuse_outputs", "write_atomic",
           "write_error"]

# Numeric options of every command, by argparse destination: (smallest value, whether the
# smallest is excluded, what to write). None (not given) is always fine.
_NUMBERS: dict[str, tuple[float, bool, str]] = {
    "top": (1, False, "a positive int"), "runs": (1, False, "a positive int (at most 10**7)"),
    "threads": (1, False, "a positive int (at most 1024)"),
    "max_nodes": (1, False, "a positive int"),
    "max_bytes": (1, False, "a positive int"), "warmup": (0, False, "an int >= 0 (at most 10**7)"),
    "radius": (0, False, "an int >= 0"),
    "timeout": (0, True, "a number of seconds > 0 and at most a day (86400)"),
    "atol": (0, False, "a finite number >= 0"), "rtol": (0, False, "a finite number >= 0"),
    "workers": (1, False, "a positive int (at most 1024)"),
    "max_views": (1, False, "a positive int"), "new_tokens": (1, False, "a positive int"),
    "prompt_length": (1, False, "a positive int"), "block_size": (1, False, "a positive int"),
    "budget": (0, True, "a number of seconds > 0 and at most a day (86400)"),
    "tolerance": (-math.inf, False, "a finite number"),
    "min_top1": (0, False, "a fraction between 0 and 1"),
    "max_kl": (0, False, "a finite number >= 0"),
}


# Upper bounds where the standard library or onnxruntime refuse more (a thread's timeout past
# ~292 years, a thread count past a C int) or where a value cannot be meant (10**20 runs).
_HIGHEST = {"timeout": 86400, "budget": 86400, "threads": 1024, "workers": 1024,
            "runs": 10**7, "warmup": 10**7, "min_top1": 1, "new_tokens": 10**6,
            "prompt_length": 10**7}


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse numeric options out of range (``--top -3``, ``--threads -2``, ``--atol nan``).

    Raises:
        InputError: naming the option, the value and what it must be.
    """
    for dest, (low, strict, want) in _NUMBERS.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        bad = not math.isfinite(value) or value < low or (strict and value == low) \
            or value > _HIGHEST.get(dest, math.inf)
        if bad:
            flag = "--" + dest.replace("_", "-")
            raise InputError(f"{flag} {value!r}: {dest.replace('_', ' ')} must be {want}.",
                             fix=f"See onnx-lab {getattr(args, 'command', '')} --help.")


# Options that name files a command writes, and the options naming what it reads; a folder
# output (``tables --out``) lists the files written into it. Commands that write models
# (optimize, extract, fix-dims) also go through Lab.save's guard.
_OUTPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "compare": (("csv",), ("reference", "candidate", "feeds"), ()),
    "render": (("out",), ("model",), ()),
    "tables": (("out",), ("model",), ("nodes.csv", "initializers.csv", "tensors.csv")),
    # the model and its data files are guarded by Lab.save itself (SaveError, "overwrite")
    "optimize": (("output",), ("feeds",), ()),
    "report": (("out",), ("model", "against"), ()),
    "diff": (("html",), ("a", "b"), ()),
}


def input_files(paths: Iterable[str | os.PathLike | None]) -> dict[Path, str]:
    """The files a command reads, resolved, with what each is: the given paths (``sample:``
    names skipped) and the external data files their models refer to
    (:func:`onnx_lab.core.outputs.input_files`, the one guard of every output)."""
    from onnx_lab.core.outputs import input_files as _input_files  # on use: the CLI's start-up

    return _input_files(paths)


def refuse_outputs(args: argparse.Namespace) -> None:
    """Refuse an output option that resolves to a file the command reads (``compare a.onnx
    b.onnx --csv a.onnx``, ``render m.onnx -o m.onnx``, ``tables`` over a data file).

    Raises:
        SaveError: naming the option, the path and the input it would destroy.
    """
    rule = _OUTPUTS.get(getattr(args, "command", ""))
    if rule is None:
        return
    outs, ins, inside = rule
    targets = [(dest, getattr(args, dest, None)) for dest in outs]
    targets = [(d, v) for d, v in targets if v]
    if not targets:
        return
    inputs = input_files(getattr(args, dest, None) for dest in ins)
    for dest, value in targets:
        flag = "-o" if dest == "out" and args.command in ("render", "report") else \
            "--" + dest if args.command in ("compare", "tables", "diff") else dest.upper()
        paths = [Path(value)] + [Path(value) / name for name in inside]
        for path in paths:
            what = inputs.get(Path(os.path.realpath(path)))
            if what is not None:
                raise SaveError(f"{flag} {str(path)!r} is {what}, which this command reads: "
                                "writing it would destroy the input.",
                                fix="Write to another path.")


def write_atomic(path: str | os.PathLike, write: Any, **kw: Any) -> Path:
    """:func:`onnx_lab.core.outputs.write_atomic`, imported on use (``onnx-lab --help`` and
    the light commands do not load the model core)."""
    from onnx_lab.core.outputs import write_atomic as _write_atomic  # on use: the start-up

    return _write_atomic(path, write, **kw)


def write_error(path: str | os.PathLike, e: OSError) -> WriteError:
    """An OSError of a write as one line naming the path and the cause."""
    # here, not at the top: the CLI's start-up
    from onnx_lab.core.save import write_error as _write_error

    return _write_error(Path(path), e)


def parse_dims(items: Sequence[str] | None, what: str = "--dims",
               example: str = "--dims batch=1") -> dict[str, int]:
    """``["batch=1", "seq=128"]`` -> ``{"batch": 1, "seq": 128}``; ``what`` names the
    argument in errors (``fix-dims`` takes them as positional arguments)."""
    out: dict[str, int] = {}
    for item in items or ():
        for part in item.split(","):
            name, sep, value = part.partition("=")
            if not sep or not name.strip():
                raise InputError(f"{what} {part!r} is not NAME=VALUE.", fix=f"Write {example}.")
            try:
                size = int(value)
            except ValueError:
                raise InputError(f"{what} {part[:80]!r}: {value[:40]!r} is not an integer.",
                                 fix=f"Write {example}.") from None
            name = name.strip()
            if out.get(name, size) != size:  # the last one silently won
                raise InputError(f"{what} gives {name!r} two sizes, {out[name]} and {size}.",
                                 fix=f"Give {name!r} one size.")
            out[name] = size
            if abs(out[name]) > _MAX_DIM:
                raise InputError(f"{what} {part[:80]!r}: no tensor dim is that large (at most "
                                 f"2**40).", fix=f"Write {example}.")
    return out


_MAX_DIM = 1 << 40  # past any tensor that can be allocated, and far below int64's limit


def parse_shapes(items: Sequence[str] | None) -> dict[str, list[int]]:
    """``["x:1x3x224x224"]`` -> ``{"x": [1, 3, 224, 224]}`` (input names may contain ':')."""
    out: dict[str, list[int]] = {}
    for item in items or ():
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise InputError(f"--shape {item!r} is not INPUT:AxBxC.",
                             fix="Write --shape input:1x3x224x224.")
        try:
            out[name] = [int(d) for d in dims.lower().replace(",", "x").split("x") if d]
        except ValueError:
            raise InputError(f"--shape {item[:80]!r}: {dims[:40]!r} is not a list of integers.",
                             fix="Write --shape input:1x3x224x224.") from None
        if any(abs(d) > _MAX_DIM for d in out[name]):
            raise InputError(f"--shape {item[:80]!r}: no tensor dim is that large (at most "
                             "2**40).", fix="Write --shape input:1x3x224x224.")
    return out


def add_model_arg(p: argparse.ArgumentParser, name: str = "model",
                  help: str = "model path or sample:NAME") -> None:
    """Add the positional MODEL argument (a path or ``sample:NAME``)."""
    p.add_argument(name, help=help)


def add_dims_args(p: argparse.ArgumentParser) -> None:
    """Add ``--dims NAME=V`` and ``--shape INPUT:AxBxC`` (both repeatable)."""
    p.add_argument("--dims", action="append", metavar="NAME=V",
                   help="value of a symbolic dim (repeatable)")
    p.add_argument("--shape", action="append", metavar="INPUT:AxBxC",
                   help="full shape of an input (repeatable)")


def open_from_args(args: argparse.Namespace, attr: str = "model") -> Lab:
    """``onnx_lab.open`` of the MODEL argument with --dims/--shape applied.

    The file is memory-mapped (``mmap=True``): a command's process is short-lived, and
    its saves replace files atomically.
    """
    from onnx_lab.lab import open_lab  # here, not at the top: the CLI's start-up

    return open_lab(getattr(args, attr), dims=parse_dims(getattr(args, "dims", None)),
                    shapes=parse_shapes(getattr(args, "shape", None)), mmap=True)


def _default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON (numpy values, tuples and NaN handled)."""
    print(json.dumps(_clean(obj), indent=2, default=_default))


def _clean(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


