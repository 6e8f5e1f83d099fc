"""CLI subcommand ``audit``: every model under some folders audited in isolated processes.

``onnx-lab audit zoo/ --out audit/ --workers 2 [--fp16] [--against old-audit/] [--json]``
writes ``audit.csv``, ``audit.parquet``, ``index.html`` and ``manifest.jsonl`` into ``--out``
(rows are appended to the manifest as models finish; a second run reuses unchanged models).
Exit codes: 0 done (failing models are rows of the table, not errors of the command); 1 with
``--against`` when a model got worse; 2 on errors (bad options, no model found); 130 when
interrupted (the finished models are written).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from onnx_lab.cli._common import add_dims_args, parse_dims, parse_shapes, print_json
from onnx_lab.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``audit`` to the ``onnx-lab`` subparsers."""
    # on use: other commands need not load the zoo
    from onnx_lab.zoo import (
        DEFAULT_BATCH,
        DEFAULT_BUDGET_S,
        DEFAULT_MEMORY_GB,
        DEFAULT_TIMEOUT_S,
    )

    p = sub.add_parser("audit", help="audit every model under folders (summary, check, cost, "
                       "safe preset verified, profile, fp16 plan), each in its own process; "
                       "exit 1 when --against finds a regression")
    p.add_argument("paths", nargs="+", metavar="PATH", help="model files or folders "
                   "(searched recursively for *.onnx)")
    p.add_argument("--out", required=True, help="output folder: audit.csv, audit.parquet, "
                   "index.html, manifest.jsonl (reused by the next run), logs/")
    p.add_argument("--workers", type=int, default=1, help="models audited at once (default 1)")
    p.add_argument("--engine", choices=("local", "dask"), default=None,
                   help="local processes (default) or a Dask cluster (a LocalCluster of "
                   "--workers workers unless --scheduler is given; each model still runs in "
                   "its own process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run on this Dask distributed scheduler (implies --engine dask)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per model before its process is killed (default "
                   f"{DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--memory-gb", type=float, default=DEFAULT_MEMORY_GB,
                   help="address space per model process in GiB, about twice the resident "
                   f"memory it may use; 0: no limit (default {DEFAULT_MEMORY_GB:g})")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help=f"profiling seconds per model (default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--fp16", action="store_true", help="also search an fp16 precision plan")
    p.add_argument("--fp16-max-trials", type=int, default=24,
                   help="bound on the fp16 search's pruning trials (default 24)")
    p.add_argument("--providers", default="cpu", help="execution providers of check and "
                   "profile (default cpu; 'all': every installed one of CPU, CUDA, TensorRT)")
    p.add_argument("--threads", type=int, default=None,
                   help="onnxruntime threads of the profile (default: cores / workers)")
    add_dims_args(p)
    p.add_argument("--batch", type=_batch, default=DEFAULT_BATCH, metavar="N|none",
                   help="size of a leading dim no --dims name can give (skl2onnx's X [None, 4], "
                   f"tf2onnx's unk__N), where the input's other dims are known (default "
                   f"{DEFAULT_BATCH}; none: leave it open)")
    p.add_argument("--model-options", metavar="FILE.json",
                   help='per-model options: {"GLOB": {"dims": {...}, "shapes": {...}, '
                   '"feeds": "x.npz"}}; GLOB matches the model\'s path in the table or its '
                   "file name; feeds paths are relative to the file")
    p.add_argument("--force", action="store_true", help="rerun every model (ignore the "
                   "manifest of --out)")
    p.add_argument("--against", metavar="OLD_DIR", help="an earlier audit's --out: report "
                   "what got worse per model and exit 1 if anything did")
    p.add_argument("--latency-effect", type=float, default=None,
                   help="smallest latency change --against calls real (default 0.1: 10%%)")
    p.add_argument("--json", action="store_true", help="print the rows (and the regressions) "
                   "as JSON")
    p.set_defaults(func=_audit)


def _batch(text: str) -> int | None:
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size >= 1 or 'none'")
    return value


def _model_options(path: str | None) -> dict | None:
    if not path:
        return None
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"--model-options {path!r}: {e.strerror}.",
                         fix="Give a JSON file of per-model options.") from e
    except ValueError as e:
        raise InputError(f"--model-options {path!r} is not valid JSON: {e}.",
                         fix='Write {"GLOB": {"shapes": {"x": [1, 3, 224, 224]}}}.') from e
    if not isinstance(doc, dict):
        raise InputError(f"--model-options {path!r} must hold a JSON object.",
                         fix='Write {"GLOB": {"shapes": {"x": [1, 3, 224, 224]}}}.')
    base = Path(path).resolve().parent
    for opts in doc.values():
        if isinstance(opts, dict) and isinstance(opts.get("feeds"), str):
            opts["feeds"] = str(base / opts["feeds"])
    return doc


def _audit(args: argparse.Namespace) -> int:
    # on use: other commands need not load the zoo
    from onnx_lab.zoo import audit

    if args.latency_effect is not None and not 0 <= args.latency_effect < 10:
        raise InputError(f"--latency-effect {args.latency_effect!r} must be a ratio >= 0 "
                         "(0.05: 5%).", fix="Use e.g. --latency-effect 0.1.")
    res = audit(args.paths, args.out, workers=args.workers, engine=args.engine,
                scheduler=args.scheduler, timeout_s=args.timeout,
                memory_gb=args.memory_gb, budget_s=args.budget, fp16=args.fp16,
                fp16_max_trials=args.fp16_max_trials,
                providers=None if args.providers == "all" else args.providers,
                threads=args.threads, dims=parse_dims(args.dims),
                shapes=parse_shapes(args.shape), batch=args.batch, model_options=_model_options(
                    args.model_options), force=args.force, against=args.against,
                latency_effect=args.latency_effect)
    if args.json:
        print_json(res.to_dict())
    else:
        _print_text(res)
    if res.interrupted:
        print("onnx-lab: interrupted: the finished models are written", file=sys.stderr)
        return 130
    return 1 if res.regressed else 0


def _line(value: object) -> str:
    r"""A model string on the one line it is printed in: a file named ``"x.onnx\nREGRESSION
    ..."`` began a line of its own that read as the command's, and a carriage return wrote
    over the start of the line (VisibleText lets both pass, for progress lines)."""
    return str(value).replace("\r", "\\r").replace("\n", "\\n")


def _print_text(res) -> None:
    for r in res.failed.itertuples():
        # no stage: the process was killed after its last stage (or before its first)
        stage = f" in the {_line(r.error_stage)} stage" if isinstance(r.error_stage, str) else ""
        print(f"{_line(r.model)}: {r.status}{stage}: {_line(r.error_type)}: {_line(r.error)}")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(res.counts().items()))
    print(f"{len(res.table)} models ({counts}); {res.reused} unchanged since the last audit; "
          f"{res.seconds:.1f} s")
    for kind in ("csv", "parquet", "html"):
        if kind in res.files:
            print(f"wrote {res.files[kind]}")
    if res.regressions is not None:
        worse = res.regressions.loc[res.regressions.worse]
        for r in worse.itertuples():
            print(f"REGRESSION {_line(r.model)}: {r.check}: {_line(r.detail)}")
        print(f"{len(worse)} regression(s) against the earlier audit" if len(worse)
              else "no regression against the earlier audit")
