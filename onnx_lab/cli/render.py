"""CLI subcommands ``onnx-lab render`` (one call of :meth:`onnx_lab.Lab.render`) and
``onnx-lab report`` (:func:`onnx_lab.reporting.write_report` in its two steps, to name the
sections that could not be built)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onnx_lab.cli._advice import command_line_text
from onnx_lab.cli._common import add_dims_args, add_model_arg, open_from_args
from onnx_lab.cli._terminal import print_note
from onnx_lab.errors import LabError


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``render`` to the ``onnx-lab`` subparsers."""
    p = sub.add_parser(
        "render", help="draw the graph (a neighbourhood, collapsed scopes) to SVG/PNG/PDF/DOT",
        description="Draw part of a model. The suffix of -o picks the format (.svg, .png, "
        ".pdf, .dot). Large models: use --collapse auto, --around, or --max-nodes.")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("-o", "--out", required=True, help="output file (.svg, .png, .pdf, .dot)")
    p.add_argument("--nodes", action="append", metavar="ID",
                   help="draw these node ids / tensor names (repeatable)")
    p.add_argument("--around", action="append", metavar="ID",
                   help="node id or tensor name whose neighbourhood is drawn (repeatable)")
    p.add_argument("--radius", type=int, default=2, help="hops around --around (default 2)")
    p.add_argument("--direction", default="both", choices=("both", "up", "down"))
    p.add_argument("--collapse", default=None, metavar="auto|N",
                   help="group nodes by name scope: 'auto' or a depth N")
    p.add_argument("--expand", action="append", metavar="SCOPE",
                   help="scope drawn open inside a collapsed view (repeatable)")
    p.add_argument("--max-nodes", type=int, default=300, help="cap on drawn nodes (default 300)")
    p.add_argument("--graph", default="", metavar="PATH",
                   help="body to draw, e.g. If_0/then_branch (default: main graph)")
    p.add_argument("--show-initializers", action="store_true",
                   help="draw weights and Constant nodes as nodes")
    p.add_argument("--no-shapes", action="store_true", help="no shapes on edges")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per layout attempt")
    p.add_argument("--title", default=None)
    p.set_defaults(func=_render)

    p = sub.add_parser(
        "report", help="one self-contained HTML report (graph, tables, findings, cost...)",
        description="Write one HTML file that opens from disk with nothing running: the "
        "interactive graph, summary, sortable node/initializer/tensor tables, check findings "
        "and cost; with --profile, --against and --precision more sections. A section that "
        "fails is a note in the report.")
    add_model_arg(p)
    add_dims_args(p)
    p.add_argument("-o", "--out", required=True, help="the .html file to write")
    p.add_argument("--title", default=None, help="title of the report (default: file name)")
    p.add_argument("--profile", action="store_true",
                   help="profile the model with onnxruntime (a section with per-op times)")
    p.add_argument("--runs", type=int, default=20, help="profiled runs for --profile (20)")
    p.add_argument("--against", metavar="OTHER", default=None,
                   help="another version: a numerical comparison and a side-by-side diff")
    p.add_argument("--precision", metavar="TARGET", default=None,
                   choices=("fp16", "bf16", "int8"),
                   help="search a precision plan (fp16, bf16, int8) and include it")
    p.add_argument("--no-tables", action="store_true", help="leave out the big tables")
    p.add_argument("--max-nodes", type=int, default=300,
                   help="drawn elements per graph view (default 300)")
    p.add_argument("--max-views", type=int, default=300,
                   help="pre-drawn views (overview, boxes, bodies; default 300)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per layout attempt")
    p.set_defaults(func=_report)


def _render(args: argparse.Namespace) -> int:
    # here, not at the top: the CLI's start-up (render.view takes 0.3 s to import)
    from onnx_lab.render.view import check_save_suffix

    out = Path(args.out)
    check_save_suffix(out)  # before the layout, not after it
    lab = open_from_args(args)
    r = lab.render(args.nodes, around=args.around, radius=args.radius,
                   direction=args.direction, graph=args.graph, collapse=args.collapse,
                   expand=args.expand, max_nodes=args.max_nodes,
                   show_initializers=args.show_initializers, show_shapes=not args.no_shapes,
                   timeout=args.timeout, title=args.title)
    for note in r.notes:
        print_note(note, file=sys.stderr)
    r.save(out)
    print(f"{out}: {len(r.nodes)} nodes, {len(r.groups)} boxes, {len(r.edges)} edges "
          f"({r.seconds:.2f} s)")
    return 0


def _report(args: argparse.Namespace) -> int:
    # on use: other commands need not pay
    from onnx_lab.core.outputs import input_files, refuse_inputs
    from onnx_lab.reporting import report_results, write_report_results

    lab = open_from_args(args)
    # before the work, as write_report does: the report would replace an input
    refuse_inputs(args.out, input_files([lab, args.against]))
    res = report_results(lab, title=args.title,
                         profile={"runs": args.runs} if args.profile else False,
                         against=args.against, precision=args.precision,
                         tables=not args.no_tables, max_nodes=args.max_nodes,
                         max_views=args.max_views, timeout=args.timeout)
    out = write_report_results(res, args.out)
    # A failed section is a note in the page; say so here too, or the exit status and the size
    # line read as a complete report (a dynamic-batch export without --dims loses its cost,
    # profile and comparison).
    for name, e in res.failures():
        text = command_line_text(e) if isinstance(e, LabError) else f"{type(e).__name__}: {e}"
        print_note(f"{name} not in the report: {text}", file=sys.stderr)
    print(f"{out}: {out.stat().st_size / 1e6:.2f} MB")
    return 0
