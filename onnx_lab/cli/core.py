"""CLI subcommands of the model core: summary, tables, weights."""

from __future__ import annotations

import argparse
from pathlib import Path

from onnx_lab.cli._common import (
    add_dims_args,
    add_model_arg,
    open_from_args,
    print_json,
    write_atomic,
    write_error,
)
from onnx_lab.errors import SaveError

SUMMARY_KEYS = ("ir_version", "opsets", "producer", "num_nodes", "num_nodes_main",
                "num_initializers", "num_constant_tensors", "num_params", "param_bytes",
                "inputs", "outputs", "dynamic_dims", "derived_dims", "op_counts", "op_families",
                "subgraphs", "external_data", "constant_computed_tensors",
                "constant_computed_bytes")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``summary``, ``tables`` and ``weights`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser("summary", help="versions, sizes, inputs/outputs, op counts")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_summary)

    p = sub.add_parser("tables", help="write nodes.csv, initializers.csv, tensors.csv")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("--out", required=True, help="output folder (created)")
    p.set_defaults(func=_tables)

    p = sub.add_parser("weights", help="statistics and outlier score per weight")
    add_model_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--top", type=int, default=None, help="only the N largest outlier scores")
    p.set_defaults(func=_weights)


def _summary(args: argparse.Namespace) -> int:
    s = open_from_args(args).summary()
    if args.json:
        print_json({k: s[k] for k in SUMMARY_KEYS})
        return 0
    print(f"IR {s['ir_version']}, opsets {s['opsets']}, producer {s['producer'] or '-'}")
    consts = f" + {s['num_constant_tensors']} Constant tensors" \
        if s["num_constant_tensors"] else ""
    print(f"{s['num_nodes']} nodes ({s['num_nodes_main']} main graph, {s['subgraphs']} "
          f"subgraphs), {s['num_initializers']} initializers{consts}, {s['num_params']:,} "
          f"params ({s['param_bytes'] / 1e6:,.1f} MB"
          f"{', external data' if s['external_data'] else ''})")
    if s["constant_computed_tensors"]:
        print(f"+ {s['constant_computed_tensors']} tensors "
              f"({s['constant_computed_bytes'] / 1e6:,.1f} MB) computed from constants at every "
              "run, not counted above (weights built with ConstantOfShape...: "
              "onnx-lab check says how to store them)")
    for kind in ("inputs", "outputs"):
        for x in s[kind]:
            print(f"  {kind[:-1]:6} {x['name']}: {x['dtype']} {x['shape']}")
    if s["dynamic_dims"]:
        print("dynamic dims: " + ", ".join(f"{k} <- {v}" for k, v in s["dynamic_dims"].items()))
    for k, d in s.get("derived_dims", {}).items():
        print(f"derived dim: {k} = {d['value']} ({d['source']})")
    print("op families: " + ", ".join(f"{k} {v}" for k, v in s["op_families"].items()))
    print("ops: " + ", ".join(f"{k} {v}" for k, v in s["op_counts"].items()))
    return 0


def _tables(args: argparse.Namespace) -> int:
    lab = open_from_args(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SaveError(f"--out {str(out)!r} exists and is not a folder.",
                        fix="Pass a folder path.")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, df in (("nodes", lab.nodes), ("initializers", lab.initializers),
                         ("tensors", lab.tensors)):
            from onnx_lab.core.outputs import csv_writer  # on use: `onnx-lab --help` stays light

            write_atomic(out / f"{name}.csv", csv_writer(df),
                         sources=[lab], flag="--out")
            print(f"{out / (name + '.csv')}: {len(df)} rows")
    except OSError as e:  # a read-only folder, a parent that is a file, a full disk
        raise write_error(out, e) from e
    return 0


def _weights(args: argparse.Namespace) -> int:
    df = open_from_args(args).weight_stats()
    if args.top:
        df = df.sort_values("outlier_score", ascending=False).head(args.top)
    if args.json:
        print_json(df.to_dict(orient="records"))
    else:
        print(df.to_string(index=False))
    return 0
