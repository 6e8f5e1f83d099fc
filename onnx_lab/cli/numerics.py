"""CLI subcommands of numerics: ``compare`` (a CI regression gate), ``repro`` and ``diff``.

``onnx-lab compare`` exits 0 when the final outputs are within tolerance, 1 when not, 2 on
errors (the CLI maps every LabError to exit code 2).
"""

from __future__ import annotations

import argparse
import sys

from onnx_lab.cli._common import (
    add_dims_args,
    parse_dims,
    parse_shapes,
    print_json,
    write_atomic,
)
from onnx_lab.cli._terminal import print_note
from onnx_lab.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compare``, ``repro`` and ``diff`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser("compare", help="compare two models output by output and layer by layer "
                       "(exit 0 within tolerance, 1 not, 2 error)")
    p.add_argument("reference", help="reference model path or sample:NAME")
    p.add_argument("candidate", help="candidate model path or sample:NAME")
    p.add_argument("--feeds", help=".npz file of inputs (default: one seeded sample)")
    add_dims_args(p)
    p.add_argument("--layerwise", action="store_true",
                   help="also compare every aligned intermediate tensor and report the first "
                   "divergence")
    _add_tolerance_args(p)
    p.add_argument("--max-bytes", type=int, default=1 << 30,
                   help="bound on captured activations held at once (1 GiB)")
    p.add_argument("--confirm", action="store_true",
                   help="run the candidate's first divergent node on the reference's "
                   "activations: does it compute differently or receive different inputs?")
    p.add_argument("--providers", help="providers for both, e.g. cpu or cuda,cpu")
    p.add_argument("--llm", action="store_true",
                   help="decoder LLMs: next-token metrics on a teacher-forced sequence (top-1 "
                   "agreement, top-5 overlap, KL, perplexity of both) and the nodes that lose "
                   "most SQNR; exit 0 when the next-token targets are met")
    p.add_argument("--tokens", help="--llm: comma-separated token ids to score on (default: "
                   "a seeded prompt continued greedily by the reference)")
    p.add_argument("--new-tokens", type=int, default=24,
                   help="--llm: tokens the reference generates after the prompt (24)")
    p.add_argument("--prompt-length", type=int, default=8, help="--llm: prompt length (8)")
    p.add_argument("--min-top1", type=float, default=None,
                   help="--llm: top-1 agreement target (default: the preset's, int4 0.85)")
    p.add_argument("--max-kl", type=float, default=None,
                   help="--llm: mean KL target in nats (default: the preset's, int4 0.1)")
    p.add_argument("--json", action="store_true",
                   help='print {"passed", "outputs", "layers", "first_divergence", "unexercised", '
                   '"feeds_notes"...} (--llm: '
                   '{"passed", "metrics", "positions", "losses", "layerwise"...})')
    p.add_argument("--csv", metavar="OUT", help="write the layers (or outputs) table as CSV "
                   "(--llm: the nodes ranked by local SQNR)")
    p.set_defaults(func=_compare)

    p = sub.add_parser("repro", help="write a minimal repro of the first divergence: the "
                       "candidate's node, the reference's activations as inputs, a script")
    p.add_argument("reference", help="reference model path or sample:NAME")
    p.add_argument("candidate", help="candidate model path or sample:NAME")
    p.add_argument("out", help="a new or empty folder for node.onnx, inputs.npz, "
                   "expected.npz, names.json and repro.py")
    p.add_argument("--feeds", help=".npz file of inputs (default: one seeded sample)")
    add_dims_args(p)
    _add_tolerance_args(p)
    p.set_defaults(func=_repro)

    p = sub.add_parser("diff", help="nodes added, removed and changed between two models")
    p.add_argument("a", help="first model (path or sample:NAME)")
    p.add_argument("b", help="second model")
    p.add_argument("--json", action="store_true", help="print the table as JSON records")
    p.add_argument("--html", metavar="OUT", default=None,
                   help="also write a side-by-side diff page (one self-contained HTML file)")
    p.set_defaults(func=_diff)


def _compare(args: argparse.Namespace) -> int:
    from onnx_lab.numerics.compare import compare  # on use: ~10 ms other commands need not pay

    if args.llm:
        return _compare_llm(args)

    c = compare(args.reference, args.candidate, feeds=args.feeds, dims=parse_dims(args.dims),
                shapes=parse_shapes(args.shape), layerwise=args.layerwise or args.confirm,
                atol=args.atol, rtol=args.rtol, preset=args.preset, providers=args.providers,
                max_bytes=args.max_bytes, progress=False if args.json else None,
                confirm=args.confirm)
    if args.csv:
        _write_csv(c.layers if args.layerwise else c.outputs, args.csv)
    if args.json:
        print_json(c.to_dict())
    else:
        print(c.summary_text())
    return 0 if c.passed else 1


def _write_csv(table, path: str) -> None:
    # a fresh temporary renamed over the file: a full disk leaves the old one intact
    from onnx_lab.core.outputs import csv_writer  # on use: `onnx-lab --help` stays light

    write_atomic(path, csv_writer(table), flag="--csv")


def _compare_llm(args: argparse.Namespace) -> int:
    # on use: other commands need not pay
    from onnx_lab.numerics.llm import compare_llm

    tokens = None
    if args.tokens:
        try:
            tokens = [int(t) for t in args.tokens.replace(" ", "").split(",") if t]
        except ValueError as e:
            raise InputError(f"--tokens must be comma-separated ids, got {args.tokens!r}.",
                             fix="E.g. --tokens 1,15043,29892,590") from e
    c = compare_llm(args.reference, args.candidate, tokens, prompt_length=args.prompt_length,
                    new_tokens=args.new_tokens, preset=args.preset, min_top1=args.min_top1,
                    max_kl=args.max_kl, dims=parse_dims(args.dims), providers=args.providers,
                    max_bytes=args.max_bytes, progress=False if args.json else None)
    if args.csv:
        _write_csv(c.losses, args.csv)
    if args.json:
        print_json(c.to_dict())
    else:
        print(c.summary_text())
    return 0 if c.passed else 1


def _add_tolerance_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help="tolerance preset: exact, fp32, fp16, bf16, int8, int4... "
                   "(default: int4 when a side has MatMulNBits, fp16/bf16 for candidates "
                   "computing in them, else by dtype)")
    p.add_argument("--atol", type=float, default=None,
                   help="absolute tolerance in place of the preset's (fp32: 1e-4)")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative tolerance in place of the preset's (fp32: 1e-3)")


def _repro(args: argparse.Namespace) -> int:
    from onnx_lab.numerics.compare import compare  # on use: ~10 ms other commands need not pay

    c = compare(args.reference, args.candidate, feeds=args.feeds, dims=parse_dims(args.dims),
                shapes=parse_shapes(args.shape), atol=args.atol, rtol=args.rtol,
                preset=args.preset, progress=False)
    if c.first_divergence is None:
        raise InputError("The models agree layer by layer: there is no divergence to "
                         "reproduce.", fix="Check the tolerances (--preset, --atol, --rtol).")
    r = c.repro(args.out)
    print(c.summary_text())
    print(f"wrote {r.folder}: node.onnx, inputs.npz, expected.npz, names.json, repro.py "
          f"(local max_abs {r.check.max_abs:.3g}); run: python {r.script}")
    if r.check.passed:  # the node alone does not reproduce it: say so, not only the number
        up = c.first_divergence.get("upstream") or []
        print_note(f"fed the reference's inputs, {r.check.node_id} agrees; the difference "
                   "comes in through its inputs" + (f" (it starts upstream, at {up[0]})" if up
                                                     else "") + ", so this repro shows none")
    return 0


def _diff(args: argparse.Namespace) -> int:
    from onnx_lab.numerics.diff import diff  # on use: ~10 ms other commands need not pay

    d = diff(args.a, args.b)
    if args.html:
        # on use: other commands need not pay
        from onnx_lab.reporting import write_diff_report

        out = write_diff_report(d, None, args.html)
        print(f"{out}: side-by-side diff", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print_json({"counts": d.counts, "nodes": d.table.to_dict(orient="records")})
        return 0
    c = d.counts
    print(f"{c['added']} added, {c['removed']} removed, {c['changed']} changed")
    for r in d.table.itertuples(index=False):
        nid = r.node_id_a if isinstance(r.node_id_a, str) else r.node_id_b
        print(f"  {r.change:8} {r.op_type:20} {nid}: {r.details}")
    return 0
