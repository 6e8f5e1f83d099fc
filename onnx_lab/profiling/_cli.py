"""CLI subcommands: ``profile``, ``cost``, ``check``."""

from __future__ import annotations

import argparse

from onnx_lab.errors import InputError

COST_TOTAL_KEYS = ("flops", "macs", "params", "param_bytes", "peak_activation_bytes")


def register(sub: argparse._SubParsersAction) -> None:
    from onnx_lab.cli import add_dims_args, add_model_arg

    p = sub.add_parser("profile", help="per-operator latency with onnxruntime's profiler")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--providers", default=None,
                   help="comma-separated providers (cpu,cuda,...); default: all installed")
    p.add_argument("--runs", type=int, default=50, help="timed runs (default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    p.add_argument("--feeds", default=None, help=".npz file with one array per input")
    p.add_argument("--opt-level", default="all", help="disable, basic, extended, all")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads")
    p.add_argument("--batch-sweep", default=None, metavar="1,2,4",
                   help="also sweep these batch sizes")
    p.add_argument("--dim", default="batch", help="dim the batch sweep changes")
    p.add_argument("--top", type=int, default=15, help="nodes to print")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_profile)

    p = sub.add_parser("cost", help="FLOPs, MACs, params, peak activation memory per node")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--top", type=int, default=15, help="nodes to print")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cost)

    p = sub.add_parser("check", help="compatibility findings (checker, ops, opsets, providers)")
    add_model_arg(p)
    p.add_argument("--no-load", action="store_true", help="skip the onnxruntime session loads")
    p.add_argument("--strict", action="store_true", help="exit 1 when there are errors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_check)


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r} is not a comma-separated list of integers.",
                         fix=f"Write {flag} 1,2,4,8.") from None


def _profile(args) -> int:
    import pandas as pd

    from onnx_lab.cli import open_from_args, print_json
    from onnx_lab.profiling.run import profile
    from onnx_lab.profiling.sweep import batch_sweep

    sizes = _ints(args.batch_sweep, "--batch-sweep") if args.batch_sweep else None
    lab = open_from_args(args)
    dims = None
    if sizes and args.dim not in lab.dims and args.feeds is None:
        from onnx_lab.core.shapes import dynamic_dims

        # The swept dim needs no --dims: the profile runs at the first swept size.
        if args.dim in dynamic_dims(lab.model):
            dims = {args.dim: sizes[0]}
    prof = profile(lab, providers=args.providers, runs=args.runs, warmup=args.warmup,
                   feeds=args.feeds, dims=dims, threads=args.threads, opt_level=args.opt_level,
                   progress=None if not args.json else False)
    sweep = None
    if sizes:
        sweep = batch_sweep(lab, sizes, dim=args.dim,
                            providers=args.providers.split(",")[0] if args.providers else None,
                            threads=args.threads, opt_level=args.opt_level,
                            progress=None if not args.json else False)
    if args.json:
        out = prof.to_dict(top=args.top)
        if sweep is not None:
            out["batch_sweep"] = {"dim": sweep.dim, "knee": sweep.knee,
                                  "table": sweep.table.to_dict(orient="records"),
                                  "notes": sweep.notes}
        print_json(out)
        return 0
    with pd.option_context("display.width", 160, "display.max_columns", 20,
                           "display.max_colwidth", 50):
        print(prof.latency_stats.to_string(index=False))
        print()
        print(prof.session.to_string(index=False))
        print()
        print(prof.ops.head(args.top).to_string(index=False))
        print()
        cols = ["session", "node_id", "op_type", "calls", "mean_ms", "p90_ms", "total_ms",
                "share", "mapped"]
        print(prof.nodes[cols].head(args.top).to_string(index=False))
        if sweep is not None:
            print()
            print(sweep.table.to_string(index=False))
            print(f"knee: {sweep.knee}")
    for n in prof.notes + (sweep.notes if sweep else []):
        print(f"note: {n}")
    return 0


def _cost(args) -> int:
    from onnx_lab.analysis.cost import cost
    from onnx_lab.cli import open_from_args, print_json

    c = cost(open_from_args(args))
    if args.json:
        d = c.to_dict()
        d["total"] = {**{k: c.total[k] for k in COST_TOTAL_KEYS},
                      **{k: v for k, v in c.total.items() if k not in COST_TOTAL_KEYS}}
        print_json(d)
        return 0
    t = c.total
    print(f"{t['flops'] / 1e9:.4f} GFLOPs, {t['macs'] / 1e9:.4f} GMACs, {t['params']:,} params "
          f"({t['param_bytes']:,} bytes), peak activations {t['peak_activation_bytes']:,} bytes "
          f"at {t['peak_node']}, {t['unknown_nodes']} nodes of unknown cost")
    cols = ["node_id", "op_type", "flops", "macs", "params", "output_bytes", "intensity", "known"]
    if (c.nodes["calls"] != 1).any():  # bodies of loops: show how often each node runs
        cols.insert(2, "calls")
    print(c.nodes.sort_values("flops", ascending=False)[cols].head(args.top).to_string(
        index=False))
    for n in c.notes:
        print(f"note: {n}")
    return 0


def _check(args) -> int:
    from onnx_lab.analysis.compat import check
    from onnx_lab.cli import open_from_args, print_json

    df = check(open_from_args(args), load=not args.no_load)
    if args.json:
        print_json({"findings": df.to_dict(orient="records"),
                    "counts": df.severity.value_counts().to_dict()})
    elif not len(df):
        print("no findings")
    else:
        for r in df.itertuples():
            where = f" [{r.node_id}]" if r.node_id else ""
            print(f"{r.severity:7} {r.code}{where}: {r.message}\n        fix: {r.fix}")
    return 1 if args.strict and (df.severity == "error").any() else 0
