"""CLI subcommands of transforms: passes, patterns, optimize (presets, passes, or one tool with
its culprit finder), extract, fix-dims."""

from __future__ import annotations

import argparse
import ast
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from onnx_lab.cli._common import (
    add_dims_args,
    add_model_arg,
    open_from_args,
    parse_dims,
    print_json,
)
from onnx_lab.cli._terminal import print_note
from onnx_lab.errors import DimError, InputError
from onnx_lab.render.tables import format_bytes

if TYPE_CHECKING:
    from onnx_lab.lab import Lab


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``passes``, ``patterns``, ``optimize``, ``extract`` and ``fix-dims``."""
    p = sub.add_parser("passes", help="list the registered passes")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_passes)

    p = sub.add_parser("patterns", help="optimization opportunities of a model")
    add_model_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_patterns)

    p = sub.add_parser("optimize", help="apply a preset or passes, verify each step, save")
    add_model_arg(p, "input")
    p.add_argument("output", help="where to write the optimized model")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--preset", default=None, help="preset name (default: safe)")
    group.add_argument("--passes", default=None, help="comma-separated pass names")
    group.add_argument("--tool", default=None,
                       help="one whole-model tool step (onnxslim, onnxsim, onnxoptimizer, "
                       "ort:basic, ort:extended, ort:all)")
    p.add_argument("--skip", default=None,
                   help="with --tool: comma-separated switches of the tool to leave out "
                   "(onnxslim patterns, onnxoptimizer passes, onnxruntime optimizers)")
    p.add_argument("--find-culprit", action="store_true",
                   help="with --tool: bisect the tool's switches on the verdict and name the "
                   "one that breaks verification")
    p.add_argument("--param", action="append", metavar="PASS.NAME=VALUE",
                   help="a parameter of a pass the step runs (repeatable; see onnx-lab passes), "
                   "e.g. fold_constants.max_growth_bytes=1_000_000_000; with --tool, "
                   "NAME=VALUE. VALUE is a Python literal (1_000_000, 0.5, [\"a\"], true) or a word")
    add_dims_args(p)
    p.add_argument("--feeds", default=None, help=".npz file with one array per input")
    p.add_argument("--no-verify", action="store_true", help="skip numerical verification")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_optimize)

    p = sub.add_parser("extract", help="cut a subgraph into a new model")
    add_model_arg(p, "input")
    p.add_argument("output", help="where to write the subgraph")
    p.add_argument("--inputs", default=None, help="comma-separated tensor names")
    p.add_argument("--outputs", default=None, help="comma-separated tensor names")
    p.add_argument("--nodes", default=None, help="comma-separated node ids (boundary computed)")
    add_dims_args(p)
    p.add_argument("--no-verify", action="store_true", help="skip numerical verification")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_extract)

    p = sub.add_parser("fix-dims", help="replace symbolic dims by sizes (batch=1)")
    add_model_arg(p, "input")
    p.add_argument("output", help="where to write the model")
    p.add_argument("fix", nargs="+", metavar="NAME=V", help="dims to fix, e.g. batch=1")
    add_dims_args(p)  # the dims left symbolic, sized for the verification only
    p.add_argument("--no-verify", action="store_true", help="skip numerical verification")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_fix_dims)


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [x.strip() for x in value.split(",") if x.strip()]


def _passes(args: argparse.Namespace) -> int:
    from onnx_lab.transforms.base import available  # here, not at the top: the CLI's start-up

    df = available()
    if args.json:
        print_json(df.to_dict(orient="records"))
        return 0
    for row in df.itertuples(index=False):
        params = ", ".join(row.parameters) if row.parameters else ""
        print(f"{row.name:44} {row.kind:5} {row.summary}" + (f"  [{params}]" if params else ""))
    return 0


def _patterns(args: argparse.Namespace) -> int:
    df = open_from_args(args).patterns()
    if args.json:
        print_json(df.to_dict(orient="records"))
        return 0
    if df.empty:
        print("no optimization opportunities found")
        return 0
    for row in df.itertuples(index=False):
        saving = [f"-{row.saving_nodes} nodes"] if row.saving_nodes else []
        if row.saving_bytes:
            saving.append(f"-{format_bytes(row.saving_bytes)}")
        print(f"{row.match_id}: {row.description}"
              + (f" ({', '.join(saving)})" if saving else ""))
    return 0


def _step_json(r: Any) -> dict[str, Any]:
    # a step the preset dropped changed a version the output does not hold: its "modified"
    # says what the output holds; "dropped" says why, nodes_before/nodes_after what it made
    dropped = getattr(r, "dropped", None)
    return {"name": r.name, "modified": bool(r.modified and not dropped),
            "nodes_before": r.nodes_before,
            "nodes_after": r.nodes_after, "seconds": round(r.seconds, 4),
            "verify_passed": r.verify_passed, "max_abs_err": r.max_abs_err,
            "first_failure": r.first_failure, "verified_by": r.verified_by,
            "reason": r.reason, "dropped": dropped,
            "notes": list(r.notes)}


def _report(args: argparse.Namespace, results: Sequence[Any], lab: Lab, n0: int,
            out: str) -> int:
    """Print the steps (text or JSON); exit code 1 when a step failed verification."""
    failed = [r for r in results if r.verify_passed is False]
    found = [r.culprit for r in results if getattr(r, "culprit", None) is not None]
    if args.json:
        doc = {"passes": [_step_json(r) for r in results], "nodes_before": n0,
               "nodes_after": len(lab.index), "output": out,
               "verify_passed": None if all(r.verify_passed is None for r in results)
               else not failed}
        if getattr(args, "find_culprit", False):
            doc["culprit"] = found[0].summary() if found else None
        print_json(doc)
    else:
        from onnx_lab.numerics.verify import failed_where
        from onnx_lab.transforms.base import pass_kind

        for r in results:
            ver = "" if r.verify_passed is None else \
                (" verified" if r.verify_passed else f" VERIFICATION FAILED{failed_where(r)}")
            what = f"{r.nodes_before} -> {r.nodes_after} nodes" if r.modified else \
                f"unchanged ({r.reason})"
            if getattr(r, "dropped", None):
                what += ", dropped (its version does not load at onnxruntime's defaults)"
            print(f"{r.name}: {what}{ver}")
            if r.modified and (pass_kind(r.name) == "tool" or r.verify_passed is False):
                for note in r.notes:  # a tool's notes say what it did to the model's interface
                    print_note(note, indent="  ")
            elif r.modified:
                # what a pass refused or skipped (and, last, the preset's verdict): the first
                # two and the last; --json has them all
                notes = list(r.notes)
                shown = notes if len(notes) <= 3 else [*notes[:2], None, notes[-1]]
                for note in shown:
                    print_note(note if note is not None else
                               f"... {len(notes) - 3} more (--json lists them)", indent="  ")
        for c in found:
            print(f"{c.message} ({c.verification_runs} verification runs, at most {c.bound} "
                  f"for {len(c.switches)} switches)")
            if c.cli_fix:
                paths = f"{shlex.quote(str(args.input))} {shlex.quote(str(out))}"
                print(f"fix: {c.cli_fix.replace('IN OUT', paths, 1)}")
        print(f"{n0} -> {len(lab.index)} nodes, written to {out}")
    if failed:
        print(f"onnx-lab: verification failed for {', '.join(r.name for r in failed)}",
              file=sys.stderr)
        return 1
    return 0


def _parse_params(items: Sequence[str] | None, tool: str | None) -> dict[str, dict[str, Any]]:
    """``--param PASS.NAME=VALUE`` (``NAME=VALUE`` with ``--tool``) as pass -> {name: value}."""
    out: dict[str, dict[str, Any]] = {}
    for item in items or ():
        key, eq, text = item.partition("=")
        owner, dot, name = key.rpartition(".")
        if not eq or not name or not (owner or tool):
            raise InputError(f"--param {item!r} is not PASS.NAME=VALUE.",
                             fix="Write --param fold_constants.max_growth_bytes=1_000_000_000 "
                             "(see onnx-lab passes for each pass's parameters).")
        if text.strip().lower() in ("true", "false"):  # as a shell user writes them
            value: Any = text.strip().lower() == "true"
        else:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                value = text  # a word: a string parameter
        out.setdefault(owner or str(tool), {})[name] = value
    return out


def _verify_arg(args: argparse.Namespace) -> bool | dict[str, Any]:
    if args.no_verify:
        if getattr(args, "feeds", None):  # the feeds serve verification alone: dropped unread
            raise InputError("--feeds is given with --no-verify: the feeds are the inputs "
                             "verification runs, and nothing is verified.",
                             fix="Drop --no-verify to verify on those inputs, or drop --feeds.")
        return False
    return {"feeds": args.feeds} if getattr(args, "feeds", None) else True


def _optimize(args: argparse.Namespace) -> int:
    if (args.skip or args.find_culprit) and not args.tool:
        raise InputError(f"{'--skip' if args.skip else '--find-culprit'} needs --tool.",
                         fix="Name the tool step, e.g. --tool onnxslim.")
    lab = open_from_args(args, "input")
    n0 = len(lab.index)
    if args.tool:
        skip = _split(args.skip)
        from onnx_lab.culprit import skip_params  # here, not at the top: the CLI's start-up

        given = _parse_params(args.param, args.tool)
        if set(given) - {args.tool}:
            raise InputError(f"--param names {', '.join(sorted(set(given) - {args.tool}))}, "
                             f"but --tool runs {args.tool} only.",
                             fix=f"Write --param NAME=VALUE for {args.tool}'s parameters.")
        skipped = skip_params(args.tool, skip) if skip else {}
        both = sorted(set(skipped) & set(given.get(args.tool, {})))
        if both:  # one would silently replace the other's list
            raise InputError(f"--skip and --param {both[0]}=... both set {args.tool}'s "
                             f"{both[0]}.", fix=f"Give the whole list in --param {both[0]}=[...], "
                             "or use --skip alone.")
        params = {**skipped, **given.get(args.tool, {})}
        results = [lab.apply(args.tool, verify=_verify_arg(args),
                             find_culprit=args.find_culprit, **params)]
        lab.save(args.output)
        return _report(args, results, lab, n0, args.output)
    passes = _split(args.passes)
    if passes is not None and not passes:
        raise InputError("--passes is empty.", fix="Write --passes a,b,c (see onnx-lab passes).")
    results = lab.apply_preset(passes if passes is not None else (args.preset or "safe"),
                               verify=_verify_arg(args),
                               params=_parse_params(args.param, None))
    lab.save(args.output)
    return _report(args, results, lab, n0, args.output)


def _extract(args: argparse.Namespace) -> int:
    lab = open_from_args(args, "input")
    sub = lab.extract(inputs=_split(args.inputs), outputs=_split(args.outputs),
                      nodes=_split(args.nodes), verify=not args.no_verify)
    sub.save(args.output)
    r = sub.results[0]
    return _report(args, [r], sub, len(lab.index), args.output)


def _fix_dims(args: argparse.Namespace) -> int:
    # the Lab sizes every dim for the verification: the ones fixed and --dims for the others
    fixed = parse_dims(args.fix, "fix-dims argument", "onnx-lab fix-dims IN OUT batch=1")
    args.dims = [*(args.dims or []), *args.fix]
    try:
        lab = open_from_args(args, "input")
    except DimError as e:
        if not e.problem.startswith("Unknown dim name") or "no named dims" not in e.problem:
            raise
        # --shape does not fix anything here: an unnamed dim is fixed by setting the shape
        raise DimError(e.problem, fix="fix-dims fixes named dims only; give an input with "
                       "unnamed dims its whole shape with onnx-lab edit IN OUT --input-shape "
                       "INPUT:AxBxC.") from e
    n0 = len(lab.index)
    r = lab.fix_dims(fixed, verify=not args.no_verify)
    lab.save(args.output)
    return _report(args, [r], lab, n0, args.output)
