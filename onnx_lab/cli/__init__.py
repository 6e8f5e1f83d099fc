"""``onnx-lab``: every subcommand is a call of one public function.

One module per area registers its subcommands (``register(subparsers)``): ``core`` (summary,
tables, weights), ``render``, ``transforms`` (passes, patterns, optimize, extract, fix-dims),
``numerics`` (compare, diff), ``profiling`` (profile), ``analysis`` (cost, check) and
``audit`` (a whole folder of models). The
shared helpers live in ``_common`` and are re-exported here. Errors: every user error (a
LabError, a usage error argparse finds, a numeric option out of range) is one line on stderr
(``onnx-lab: error: ...``) and exit code 2; ``--help`` prints the usual help and exits 0.

Start-up matters (``onnx-lab optimize`` on BERT-base takes about two seconds): building the parser
loads onnx (for the sample names) and onnx_lab's light modules, not the façade or onnx_ir: the
area modules import ``onnx_lab.lab`` and the feature modules inside the command functions, and
``import onnx_lab`` loads the façade on first access. The console command (``main()`` without
arguments) defers the sympy that onnx_ir imports until onnx_ir uses it (``_startup``), and
``summary``, ``cost --json`` and ``check --json`` build no DataFrame (no pandas).
``tests/core/test_light_import.py`` checks ``--help``'s ``sys.modules``,
``tests/cli/test_startup_cli.py`` the commands'; ``benchmarks/bench_cli_startup.py`` times the
commands against ``import onnx, onnxruntime`` (figures: docs/core.md, Start-up).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from onnx_lab import _exit
from onnx_lab.cli import (
    _startup,
    analysis,
    audit,
    core,
    edit,
    numerics,
    precision,
    profiling,
    render,
    transforms,
)
from onnx_lab.cli._advice import command_line_text
from onnx_lab.cli._common import (
    add_dims_args,
    add_model_arg,
    check_numbers,
    open_from_args,
    parse_dims,
    parse_shapes,
    print_json,
    refuse_outputs,
)
from onnx_lab.cli._terminal import VisibleText
from onnx_lab.core import samples
from onnx_lab.core.limits import parse_bytes, run_limits
from onnx_lab.errors import InputError, LabError

__all__ = ["main", "build_parser", "add_model_arg", "add_dims_args", "open_from_args",
           "parse_dims", "parse_shapes", "print_json"]

# The order of the subcommands in ``onnx-lab --help``.
_AREAS = (core, render, transforms, numerics, profiling, analysis)


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors raised as an InputError instead of a usage block on stderr
    and ``sys.exit(2)``: ``main`` prints them as one line like every other error. Subcommand
    parsers are made of the same class (argparse uses the parent's type)."""

    def error(self, message: str) -> NoReturn:
        raise InputError(f"{self.prog}: {message}.", fix=f"See {self.prog} --help.")


class _Version(argparse.Action):
    """``--version``, its version looked up only when asked (every command builds the
    parser: start-up time)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        print(f"onnx-lab {_package_version()}")
        parser.exit()


def _package_version() -> str:
    """The installed distribution's version (the package root is no layer to import from)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("onnx_lab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``onnx-lab`` argument parser with every area's subcommands."""
    parser = _Parser(
        prog="onnx-lab",
        description="Understand, optimize and debug ONNX models. MODEL is a path or sample:NAME "
        f"(samples: {', '.join(samples.names())}).")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print the version and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument("--max-memory", metavar="SIZE", default=None,
                        help="memory a run of a model may take by its estimate (e.g. 32G; 0: "
                        "no limit; default: half the available memory)")
    parser.add_argument("--run-timeout", metavar="SECONDS", default=None,
                        help="seconds one run of a model may take (0: no limit; default 600)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for area in _AREAS:
        area.register(sub)
    precision.register(sub)  # onnx_lab/cli/precision.py: the precision doctor
    audit.register(sub)  # onnx_lab/cli/audit.py: a whole model zoo, isolated per model
    edit.register(sub)  # onnx_lab/cli/edit.py: manual edits, each flag a step
    return parser


def _limits(args: argparse.Namespace) -> dict[str, object]:
    """``--max-memory`` and ``--run-timeout`` as keywords of ``core.limits.run_limits``."""
    out: dict[str, object] = {}
    if args.max_memory is not None:
        value = args.max_memory.strip()
        try:
            out["memory"] = None if value.lower() in ("0", "off") else parse_bytes(value)
        except LabError as e:
            raise InputError(f"--max-memory: {e.problem}", fix=e.fix) from e
    if args.run_timeout is not None:
        try:
            t = float(args.run_timeout)
        except ValueError:
            t = math.nan
        if not (t == 0 or 0 < t <= 10 ** 7):
            raise InputError(f"--run-timeout {args.run_timeout[:40]!r} is not a number of "
                             "seconds (0: no limit).", fix="Write --run-timeout 3600.")
        out["timeout_s"] = t or None
    return out


#: The exit code of an unexpected exception (a defect): not 1, which the gates (``compare``,
#: ``optimize``, ``audit``...) return for a verdict, nor 2, a user error.
INTERNAL_ERROR = 3
#: The exit code when the reader of the output closed the pipe (128 + SIGPIPE).
BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onnx-lab`` console script; returns the exit code. What it
    prints goes through :class:`~onnx_lab.cli._terminal.VisibleText`: a model's strings
    never reach the terminal as escape sequences.

    Example:
        >>> code = main(["summary", "sample:convnet", "--json"])  # prints the JSON, returns 0
    """
    with contextlib.redirect_stdout(VisibleText(sys.stdout)), \
            contextlib.redirect_stderr(VisibleText(sys.stderr)):
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    _exit.install()  # this process is ours: skip the slow collector passes at exit
    if argv is None:  # the console command: sympy loads when onnx_ir first uses it
        _startup.defer_sympy()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        check_numbers(args)
        limits = _limits(args)
    except LabError as e:
        print(f"onnx-lab: error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        refuse_outputs(args)
        with run_limits(**limits, origin="set by onnx-lab --max-memory"):  # this command's only
            code = args.func(args)
    except LabError as e:
        print(f"onnx-lab: error: {command_line_text(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("onnx-lab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`onnx-lab passes | head`): nothing more to write. Python's
        # flush at exit would fail again, so standard output goes to devnull; 141 is the
        # shells' code for a write to a closed pipe (not 0 or 1: no verdict was printed whole).
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
        return BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 - a defect of onnx_lab: not exit 1 ("drift")
        import traceback

        traceback.print_exc()
        first = str(e).splitlines()[0][:300] if str(e) else ""
        print(f"onnx-lab: internal error: {type(e).__name__}: {first} (a defect of onnx_lab, "
              "not a verdict on the model: please report it with the traceback above)",
              file=sys.stderr)
        return INTERNAL_ERROR
    return int(code or 0)
