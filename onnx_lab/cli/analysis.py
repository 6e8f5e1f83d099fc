"""CLI subcommands of analysis: ``cost`` (:meth:`onnx_lab.Lab.cost`) and ``check``
(:meth:`onnx_lab.Lab.check`).

``onnx-lab check --strict`` exits 1 when there are errors.
"""

from __future__ import annotations

import argparse

from onnx_lab.cli._advice import command_line_words
from onnx_lab.cli._common import add_dims_args, add_model_arg, open_from_args, print_json
from onnx_lab.cli._terminal import print_note

COST_TOTAL_KEYS = ("flops", "macs", "params", "param_bytes", "peak_activation_bytes")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``cost`` and ``check`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser("cost", help="FLOPs, MACs, params, peak activation memory per node")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--top", type=int, default=15, help="nodes to print")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cost)

    p = sub.add_parser("check", help="compatibility findings (checker, ops, opsets, providers)")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--no-load", action="store_true", help="skip the onnxruntime session loads")
    p.add_argument("--strict", action="store_true", help="exit 1 when there are errors")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_check)


def _cost(args: argparse.Namespace) -> int:
    c = open_from_args(args).cost()
    if args.json:
        d = c.to_dict()
        d["total"] = {**{k: c.total[k] for k in COST_TOTAL_KEYS},
                      **{k: v for k, v in c.total.items() if k not in COST_TOTAL_KEYS}}
        print_json(d)
        return 0
    t = c.total
    print(f"{t['flops'] / 1e9:.4f} GFLOPs, {t['macs'] / 1e9:.4f} GMACs, {t['params']:,} params "
          f"({t['param_bytes']:,} bytes), peak activations {t['peak_activation_bytes']:,} bytes "
          f"at {str(t['peak_node'])!r}, {t['unknown_nodes']} nodes of unknown cost")
    if c.kv_cache:
        kv = c.kv_cache
        print(f"KV cache: {kv['bytes']:,} bytes for {kv['context']} tokens "
              f"({kv['bytes_per_token']:,.0f} bytes/token, {kv['layers']} layers)")
    cols = ["node_id", "op_type", "flops", "macs", "params", "output_bytes", "intensity", "known"]
    if (c.nodes["calls"] != 1).any():  # bodies of loops: show how often each node runs
        cols.insert(2, "calls")
    print(c.nodes.sort_values("flops", ascending=False)[cols].head(args.top).to_string(
        index=False))
    for n in c.notes:
        print_note(n)
    return 0


def _check(args: argparse.Namespace) -> int:
    lab = open_from_args(args)
    if args.json:  # rows: no DataFrame, so no pandas to import
        from collections import Counter

        from onnx_lab.analysis.compat import check_rows

        rows = check_rows(lab, load=not args.no_load)
        print_json({"findings": rows,
                    "counts": dict(Counter(r["severity"] for r in rows).most_common())})
        return 1 if args.strict and any(r["severity"] == "error" for r in rows) else 0
    df = lab.check(load=not args.no_load)
    if not len(df):
        print("no findings")
    else:
        for r in df.itertuples():
            # (a finding without a node holds NaN in a table where others hold one)
            where = f" [{r.node_id}]" if isinstance(r.node_id, str) and r.node_id else ""
            print(f"{r.severity:7} {r.code}{where}: {r.message}\n"
                  f"        fix: {command_line_words(str(r.fix))}")
    return 1 if args.strict and (df.severity == "error").any() else 0
