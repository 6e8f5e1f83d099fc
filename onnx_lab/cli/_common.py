"""Helpers every area of the CLI shares: arguments, parsing, opening the model, JSON.

They live here rather than in ``onnx_lab/cli/__init__.py`` so that the area modules import them
at module level without a cycle (``__init__`` imports the areas to build the parser);
``onnx_lab.cli`` re-exports them.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_lab.errors import InputError
from onnx_lab.lab import Lab, open_lab

__all__ = ["add_model_arg", "add_dims_args", "open_from_args", "parse_dims", "parse_shapes",
           "print_json"]


def parse_dims(items: Sequence[str] | None) -> dict[str, int]:
    """``["batch=1", "seq=128"]`` -> ``{"batch": 1, "seq": 128}``."""
    out: dict[str, int] = {}
    for item in items or ():
        for part in item.split(","):
            name, sep, value = part.partition("=")
            if not sep or not name.strip():
                raise InputError(f"--dims {part!r} is not NAME=VALUE.", fix="Write --dims batch=1.")
            try:
                out[name.strip()] = int(value)
            except ValueError:
                raise InputError(f"--dims {part!r}: {value!r} is not an integer.",
                                 fix="Write --dims batch=1.") from None
    return out


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
            raise InputError(f"--shape {item!r}: {dims!r} is not a list of integers.",
                             fix="Write --shape input:1x3x224x224.") from None
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
