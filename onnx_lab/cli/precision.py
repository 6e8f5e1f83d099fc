"""CLI subcommand ``precision``: which nodes to keep in higher precision, found automatically.

``onnx-lab precision MODEL --target fp16 --atol 1e-3 --rtol 1e-2 --feeds x.npz --out m.onnx``
exits 0 when the plan meets the tolerance, 1 when none does (a cancelled or failed search), 2 on
errors (every LabError). ``--json`` prints ``{"kept": [node ids], "passed", "trials", ...}``.
"""

from __future__ import annotations

import argparse

from onnx_lab.cli._common import add_dims_args, add_model_arg, open_from_args, print_json


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``precision`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser("precision", help="find the fewest nodes to keep in fp32 (or out of "
                       "int8) so the outputs meet a tolerance (exit 0 met, 1 not, 2 error)")
    add_model_arg(p)
    p.add_argument("--target", default="fp16", help="fp16, bf16 (emulated) or int8 (static QDQ)")
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
    p.add_argument("--out", help="write the converted model here")
    p.add_argument("--json", action="store_true",
                   help='print {"kept", "passed", "target", "tolerance", "notes", "trials", '
                   '"outputs"}')
    p.set_defaults(func=_precision)


def _precision(args: argparse.Namespace) -> int:
    from onnx_lab.errors import InputError
    from onnx_lab.numerics.precision import PrecisionCancelled, ToleranceUnreachable

    if args.max_trials < 0:
        raise InputError(f"--max-trials must be >= 0, got {args.max_trials}.",
                         fix="Use e.g. --max-trials 48.")
    lab = open_from_args(args)
    try:
        plan = lab.find_precision(args.target, args.feeds, metric=args.metric,
                                  tolerance=args.tolerance, atol=args.atol, rtol=args.rtol,
                                  calibration=args.calibration, max_trials=args.max_trials,
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
            print(f"note: {note}")
        for nid in plan.kept:
            print(f"  keep {nid}")
        if args.out:
            print(f"wrote {args.out}")
    return 0 if plan.passed else 1
