"""CLI subcommand ``onnx-lab profile``: :meth:`onnx_lab.Lab.profile`, and a batch sweep."""

from __future__ import annotations

import argparse

from onnx_lab.cli._common import add_dims_args, add_model_arg, open_from_args, print_json
from onnx_lab.cli._terminal import print_note
from onnx_lab.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``profile`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser("profile", help="per-operator latency with onnxruntime's profiler")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--providers", default=None,
                   help="comma-separated providers (cpu,cuda,...) or openvino (the OpenVINO "
                   "runtime, optional extra); default: all installed ORT providers")
    p.add_argument("--runs", type=int, default=None,
                   help="fixed timed runs (default: until the median is stable or --budget "
                   "is spent)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="time budget of the profile (and of the batch sweep; default 6 s "
                   "each when --runs is not given); with --runs, a cap on those runs")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed runs first (default 5; with --generate: generations, default 1)")
    p.add_argument("--feeds", default=None, help=".npz file with one array per input")
    p.add_argument("--opt-level", default="all", help="disable, basic, extended, all")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads")
    p.add_argument("--batch-sweep", default=None, metavar="1,2,4",
                   help="also sweep these batch sizes")
    p.add_argument("--dim", default="batch", help="dim the batch sweep changes")
    p.add_argument("--generate", type=int, default=None, metavar="N",
                   help="profile greedy generation of a decoder LLM instead: the prefill of "
                   "--prompt tokens and N decode steps, the KV cache fed back")
    p.add_argument("--prompt", default=None, metavar="P",
                   help="with --generate: prompt length (random ids), or comma-separated "
                   "token ids (default 16)")
    p.add_argument("--profile-runs", type=int, default=None, metavar="K",
                   help="runs (generations with --generate) under ORT's profiler for the "
                   "operator shares; 0 skips it (generation only)")
    p.add_argument("--top", type=int, default=15, help="nodes to print")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_profile)


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"{flag} {text!r} is not a comma-separated list of integers.",
                         fix=f"Write {flag} 1,2,4,8.") from None
    if not values or any(v < 1 for v in values):
        raise InputError(f"{flag} {text!r}: every size must be a positive integer.",
                         fix=f"Write {flag} 1,2,4,8.")
    return values


def _profile(args: argparse.Namespace) -> int:
    # On use: pandas and the sweep module cost other commands ~0.2 s of start-up.
    import pandas as pd

    # on use: other commands need not pay
    from onnx_lab.profiling.advice import profile_advice, sweep_advice
    from onnx_lab.profiling.sweep import batch_sweep

    if args.generate is not None:
        return _generate(args)
    if args.prompt is not None:  # it was dropped without a word
        raise InputError(f"--prompt {args.prompt!r} is given without --generate: a plain "
                         "profile runs the model's own inputs, not a prompt.",
                         fix="Add --generate N (N decode steps after the prompt), or drop "
                         "--prompt.")
    sizes = _ints(args.batch_sweep, "--batch-sweep") if args.batch_sweep else None
    lab = open_from_args(args)
    dims = None
    if sizes and args.dim not in lab.dims and args.feeds is None:
        # The swept dim needs no --dims: the profile runs at the first swept size.
        from onnx_lab.core.shapes import dynamic_dims  # here, not at the top: the CLI's start-up

        if args.dim in dynamic_dims(lab.model):
            dims = {args.dim: sizes[0]}
    prof = lab.profile(providers=args.providers, runs=args.runs, budget_s=args.budget,
                       warmup=5 if args.warmup is None else args.warmup,
                       profile_runs=args.profile_runs,
                       feeds=args.feeds, dims=dims, threads=args.threads,
                       opt_level=args.opt_level, progress=None if not args.json else False)
    sweep = None
    if sizes:
        sweep = batch_sweep(lab, sizes, dim=args.dim, runs=args.runs, budget_s=args.budget,
                            providers=args.providers.split(",")[0] if args.providers else None,
                            threads=args.threads, opt_level=args.opt_level,
                            progress=None if not args.json else False)
    advice = [a for a in (profile_advice(prof), sweep_advice(sweep, sizes) if sweep else None)
              if a is not None]
    if args.json:
        out = prof.to_dict(top=args.top)
        out["budget_advice"] = [{"text": a.text, "runs": a.runs, "budget_s": a.budget_s,
                                 "suggested_s": a.suggested_s} for a in advice]
        if sweep is not None:
            out["batch_sweep"] = {"dim": sweep.dim, "knee": sweep.knee, "knees": sweep.knees,
                                  "table": sweep.table.to_dict(orient="records"),
                                  "notes": sweep.notes}
        print_json(out)
        return 0
    with pd.option_context("display.width", 160, "display.max_columns", 20,
                           "display.max_colwidth", 50):
        cols = ["session", "runs", "profiled_runs", "p10_ms", "p50_ms", "ci_low_ms",
                "ci_high_ms", "p90_ms", "mean_ms", "stopped"]
        node_cols = ["session", "node_id", "op_type", "calls", "mean_ms", "p90_ms", "total_ms",
                     "share", "mapped"]
        top = f"top {args.top}, " if args.top is not None else ""
        tables = [
            ("latency per run (timed runs; ci_*: the median's 95% interval)",
             prof.latency_stats[cols]),
            ("memory (bytes)", prof.memory),
            ("sessions", prof.session),
            (f"time by operator type ({top}from the profiled runs; share of the kernel time)",
             prof.ops.head(args.top)),
            (f"time by node ({top}from the profiled runs; mapped: found in the model, False: "
             "added by onnxruntime or not found)", prof.nodes[node_cols].head(args.top)),
        ]
        if sweep is not None:
            tables.append((f"batch sweep over {sweep.dim!r} (knee: {sweep.knee})", sweep.table))
        for k, (title, table) in enumerate(tables):
            print(("\n" if k else "") + f"== {title}")
            # (a backend without per-operator times, OpenVINO: said, not pandas' "Empty
            # DataFrame / Columns: [...]")
            print(table.to_string(index=False) if len(table) else
                  "(none: no profiled runs with per-operator times; the notes say why)")
    for n in prof.notes + (sweep.notes if sweep else []):
        print_note(n)
    for a in advice:  # and the budget that would give a measurement: --budget X
        print_note(f"{a.text} (--budget {a.suggested_s:g})")
    return 0


def _prompt(text: str) -> int | list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--prompt {text!r} is neither a token count nor comma-separated "
                         "token ids.", fix="Write --prompt 32 or --prompt 1,15043,3186.") from None
    if not values:
        raise InputError("--prompt is empty.", fix="Write --prompt 32.")
    return values[0] if len(values) == 1 and "," not in text else values


def _generate(args: argparse.Namespace) -> int:
    """``onnx-lab profile MODEL --generate N --prompt P``: :meth:`Lab.profile_generation`."""
    import pandas as pd

    if args.batch_sweep:
        raise InputError("--generate and --batch-sweep cannot be combined.",
                         fix="Run them as two commands.")
    lab = open_from_args(args)
    g = lab.profile_generation(prompt=_prompt("16" if args.prompt is None else args.prompt), new_tokens=args.generate,
                               providers=args.providers, runs=args.runs, budget_s=args.budget,
                               warmup=1 if args.warmup is None else args.warmup,
                               profile_runs=args.profile_runs, threads=args.threads,
                               opt_level=args.opt_level, progress=None if not args.json
                               else False)
    if args.json:
        print_json(g.to_dict(top=args.top))
        return 0
    with pd.option_context("display.width", 160, "display.max_columns", 20,
                           "display.max_colwidth", 50):
        cols = ["session", "phase", "tokens", "runs", "p10_ms", "p50_ms", "ci_low_ms",
                "ci_high_ms", "p90_ms", "tokens_per_s", "generations", "stopped"]
        print(g.latency_stats[cols].to_string(index=False))
        print()
        print(g.memory.to_string(index=False))
        for phase in ("prefill", "decode"):
            ops = g.ops.loc[g.ops.phase == phase]
            if len(ops):
                print()
                print(f"{phase}: op types per run")
                print(ops.drop(columns=["phase"]).head(args.top).to_string(index=False))
    print()
    print(f"tokens: {g.tokens[0].tolist()}")
    for n in g.notes:
        print_note(n)
    return 0
