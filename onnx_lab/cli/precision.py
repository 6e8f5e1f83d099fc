"""CLI subcommand ``precision``: which nodes to keep in higher precision, found automatically.

``onnx-lab precision MODEL --target fp16 --atol 1e-3 --rtol 1e-2 --feeds x.npz --out m.onnx``
exits 0 when the plan meets the tolerance, 1 when none does (a cancelled or failed search, or
a plan that does not hold as onnxruntime deploys it: ``confirmed`` False), 2 on errors (every
LabError). ``--json`` prints ``{"kept": [node ids], "passed", "trials", ...}``.
"""

from __future__ import annotations

import argparse

from onnx_lab.cli._common import add_dims_args, add_model_arg, open_from_args, print_json
from onnx_lab.cli._terminal import print_note
from onnx_lab.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``precision`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser("precision", help="find the fewest nodes to keep in fp32 (or out of "
                       "int8) so the outputs meet a tolerance (exit 0 met, 1 not, 2 error)")
    add_model_arg(p)
    p.add_argument("--target", default="fp16", help="fp16, bf16 (emulated), int8 (static QDQ) "
                   "or int4 (decoder LLMs: weight-only MatMulNBits, MatMuls kept in int8 or "
                   "float to meet --min-top1/--max-kl)")
    p.add_argument("--feeds", help=".npz file of inputs the outputs are judged on")
    p.add_argument("--calibration", help="int8: .npz file or folder of .npz calibration samples "
                   "(default: --feeds, else 8 seeded samples)")
    add_dims_args(p)
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (element-wise)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (element-wise)")
    p.add_argument("--metric", default=None, help="elementwise, max_abs, sqnr or cosine "
                   "(default: the target's preset: element-wise for fp16/bf16, sqnr for int8)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="threshold of --metric (sqnr: dB, cosine: minimum similarity)")
    p.add_argument("--max-trials", type=int, default=48, help="bound on pruning trials")
    p.add_argument("--min-top1", type=float, default=None,
                   help="int4: top-1 agreement target against the float model (0.85)")
    p.add_argument("--max-kl", type=float, default=None,
                   help="int4: mean KL target in nats (0.1)")
    p.add_argument("--block-size", type=int, default=32, help="int4: quantizer block (32)")
    p.add_argument("--accuracy-level", type=int, default=None,
                   help="int4: MatMulNBits accuracy_level (4: int8 activations on CPU)")
    p.add_argument("--keep", action="append", default=None, metavar="NODE",
                   help="fp16/bf16/int8: a node id to keep in float32 (out of int8) in every "
                   "trial and in the plan (repeat for more); int4: how kept MatMuls are "
                   "stored, int8, float or auto (the default)")
    p.add_argument("--out", help="write the converted model here")
    p.add_argument("--json", action="store_true",
                   help='print {"kept", "passed", "target", "tolerance", "notes", "trials", '
                   '"outputs"}')
    p.set_defaults(func=_precision)


def _precision(args: argparse.Namespace) -> int:
    # on use: other commands need not pay
    from onnx_lab.numerics.precision import PrecisionCancelled, ToleranceUnreachable

    if args.max_trials < 0:
        raise InputError(f"--max-trials must be >= 0, got {args.max_trials}.",
                         fix="Use e.g. --max-trials 48.")
    level = "auto"
    if args.target == "int4" and args.keep:
        if len(args.keep) != 1 or args.keep[0] not in ("auto", "int8", "float"):
            raise InputError(f"--keep for int4 is how kept MatMuls are stored (int8, float or "
                             f"auto), got {' '.join(args.keep)!r}.", fix="Use --keep int8.")
        level = args.keep[0]
    lab = open_from_args(args)
    try:
        if args.target == "int4":
            plan = lab.find_precision("int4", min_top1=args.min_top1, max_kl=args.max_kl,
                                      block_size=args.block_size, keep=level,
                                      accuracy_level=args.accuracy_level,
                                      max_trials=args.max_trials,
                                      progress=False if args.json else None)
        else:
            plan = lab.find_precision(args.target, args.feeds, metric=args.metric,
                                      tolerance=args.tolerance, atol=args.atol,
                                      rtol=args.rtol, calibration=args.calibration,
                                      max_trials=args.max_trials, keep=args.keep,
                                      progress=False if args.json else None)
    except (PrecisionCancelled, ToleranceUnreachable) as e:  # no plan meets it: exit 1
        if args.json:
            print_json({"kept": None, "passed": False, "error": e.problem, "fix": e.fix})
        else:
            print(f"onnx-lab: {e}")
        return 1
    if args.out:
        lab.save(args.out)
    if args.json:
        print_json(plan.to_dict())
    else:
        print(plan.summary_text())
        for note in plan.notes:
            print_note(note)
        costs = getattr(plan, "costs", None)  # int4: what each kept node costs
        for i, nid in enumerate(plan.kept):
            extra = ""
            if costs is not None and i < len(costs):
                r = costs.iloc[i]
                extra = (f" in {r['level']}: +{int(r['extra_bytes'])} bytes, "
                         f"{r['extra_ms_per_token']:+.3g} ms/token")
            asked = " (--keep)" if nid in set(getattr(plan, "forced", ())) else ""
            print(f"  keep {nid}{extra}{asked}")
        if args.out:
            print(f"wrote {args.out}")
    # a plan that does not hold as a deployment loads it (its model does not load at
    # onnxruntime's default options, or misses the tolerance with the optimizations: the
    # summary says "but NOT with onnxruntime's optimizations") is not met
    return 0 if plan.passed and getattr(plan, "confirmed", None) is not False else 1
