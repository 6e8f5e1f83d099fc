"""``onnx-lab``: every subcommand is a call of one public function.

Each area registers its subcommands from its own ``_cli.py`` module (``register(subparsers)``),
so the CLI grows with the package without one file knowing every feature. Errors: one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

from onnx_lab.errors import InputError, LabError

__all__ = ["main", "build_parser", "add_model_arg", "add_dims_args", "open_from_args",
           "parse_dims", "parse_shapes", "print_json"]

_AREAS = (
    "onnx_lab.analysis._cli",
    "onnx_lab.render._cli",
    "onnx_lab.transforms._cli",
    "onnx_lab.numerics._cli",
    "onnx_lab.profiling._cli",
)


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
    p.add_argument(name, help=help)


def add_dims_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dims", action="append", metavar="NAME=V",
                   help="value of a symbolic dim (repeatable)")
    p.add_argument("--shape", action="append", metavar="INPUT:AxBxC",
                   help="full shape of an input (repeatable)")


def open_from_args(args: argparse.Namespace, attr: str = "model"):
    """``onnx_lab.open`` of the MODEL argument with --dims/--shape applied.

    The file is memory-mapped (``mmap=True``): a command's process is short-lived, and
    its saves replace files atomically.
    """
    from onnx_lab.lab import open_lab

    return open_lab(getattr(args, attr), dims=parse_dims(getattr(args, "dims", None)),
                    shapes=parse_shapes(getattr(args, "shape", None)), mmap=True)


def _default(o: Any) -> Any:
    import numpy as np

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
    import math

    if isinstance(o, float) and not math.isfinite(o):
        return None if math.isnan(o) else ("inf" if o > 0 else "-inf")
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-lab",
        description="Understand, optimize and debug ONNX models. MODEL is a path or sample:NAME "
        "(samples: convnet, transformer_block, control_flow).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in _AREAS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onnx-lab`` console script; returns the exit code."""
    from onnx_lab import _exit

    _exit.install()  # this process is ours: skip the slow collector passes at exit
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        code = args.func(args)
    except LabError as e:
        print(f"onnx-lab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("onnx-lab: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
