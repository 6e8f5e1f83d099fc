"""CLI subcommand ``edit``: manual edits of a model, each flag one verified step, in
command-line order, then the result saved.

Example:
    onnx-lab edit model.onnx out.onnx --set-attr /bn:epsilon=1e-3 --rename input=image \
        --add-output /stem/relu/Relu_output_0 --add-node logits:Softmax:axis=-1 --json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from onnx_lab.cli._common import (
    add_dims_args,
    add_model_arg,
    open_from_args,
    print_json,
)
from onnx_lab.errors import InputError

if TYPE_CHECKING:
    from onnx_lab.lab import Lab

__all__ = ["register"]

# flag -> (metavar, help)
_FLAGS = {
    "--set-attr": ("NODE:NAME=VALUE", "set an attribute (VALUE: a number, a string, a JSON "
                   "list like [1,2]); checked against the op schema"),
    "--remove": ("NODE", "remove a node, reconnecting its input to its consumers"),
    "--remove-cascade": ("NODE", "remove a node and every node after it"),
    "--rename": ("OLD=NEW", "rename a tensor (graph inputs and outputs too; a node when OLD "
                 "is a node id and no tensor)"),
    "--add-output": ("TENSOR", "make a tensor a graph output"),
    "--remove-output": ("OUTPUT", "remove a graph output and the nodes only it needed"),
    "--input-shape": ("NAME:1x3x224x224", "set the declared shape of an input (dim names "
                      "allowed: batchx3x224x224)"),
    "--replace-init": ("NAME=FILE", "replace an initializer from a .npy / .npz (same shape "
                       "and dtype)"),
    "--scale-init": ("NAME=FACTOR", "multiply a float initializer by FACTOR"),
    "--convert-opset": ("N", "convert the model to opset N of ai.onnx (onnx's version "
                        "converter; verified like any edit)"),
    "--add-node": ("TENSOR:OP[:ATTR=VALUE,...]", "insert a node after a tensor, checked "
                   "against the op schema, e.g. logits:Softmax:axis=-1, x:Cast:to=FLOAT16, "
                   "y:Mul:inputs=[0.5] (inputs: the extra inputs, as constants)"),
}


class _Ordered(argparse.Action):
    """Collect every edit flag into one list of (flag, value), in command-line order."""

    def __call__(self, parser, namespace, values, option_string=None):
        steps = list(getattr(namespace, "edits", None) or [])
        steps.append((option_string, values))
        namespace.edits = steps


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``edit``."""
    p = sub.add_parser("edit", help="edit a model: attributes, removals, renames, outputs, "
                       "shapes, weights (each flag a verified step)")
    add_model_arg(p, "input")
    p.add_argument("output", help="where to write the edited model")
    for flag, (metavar, text) in _FLAGS.items():
        p.add_argument(flag, action=_Ordered, dest="edits", metavar=metavar, help=text)
    add_dims_args(p)
    p.add_argument("--script", default=None, help="also write the replay script (Python) here")
    p.add_argument("--no-verify", action="store_true", help="skip numerical verification")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_edit, edits=None)


def parse_value(text: str) -> Any:
    """A command-line attribute value: JSON (numbers, lists, quoted strings, true/false),
    else a Python literal, else the text itself (``SAME_UPPER``)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _pair(flag: str, value: str, sep: str, form: str) -> tuple[str, str]:
    left, s, right = value.partition(sep) if sep == "=" else value.rpartition(sep)
    if not s or not left or not right:
        raise InputError(f"{flag} {value!r} is not {form}.", fix=f"Write {flag} {form}.")
    return left, right


def _named_pair(flag: str, value: str, sep: str, form: str, known: Any) -> tuple[str, str]:
    """``value`` split at the ``sep`` whose left side is a name in ``known`` (names may hold
    ``=`` and ``:``: PyTorch and TensorFlow exports write such names), else as
    :func:`_pair` splits it (the API then names the closest known names)."""
    at = value.find(sep)
    while at > 0:
        if value[:at] in known and at + 1 < len(value):
            return value[:at], value[at + 1:]
        at = value.find(sep, at + 1)
    return _pair(flag, value, sep, form)


def _dims(flag: str, value: str) -> tuple[str, list[int | str]]:
    name, dims = _pair(flag, value, ":", "NAME:1x3x224x224")
    out: list[int | str] = []
    for d in dims.replace(",", "x").split("x"):
        if not d:
            continue
        out.append(int(d) if d.isdecimal() else d)  # "²" is a digit int() cannot read
    return name, out


def _split_top(text: str) -> list[str]:
    """``a=1,perm=[0,2,1]`` -> ``['a=1', 'perm=[0,2,1]']`` (commas inside brackets kept)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth <= 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    return [x for x in (*items, cur) if x.strip()]


def add_node_spec(flag: str, value: str) -> tuple[str, str, dict[str, Any], list | None]:
    """``TENSOR:OP[:ATTR=VALUE,...]`` -> (tensor, op type, attributes, extra inputs).

    The tensor may hold colons (the op is the last part without ``=``); ``inputs=[...]``
    gives the extra inputs (constants), every other ``NAME=VALUE`` an attribute (VALUE as
    in --set-attr; a data type by name for Cast's ``to``).
    """
    form = "TENSOR:OP[:ATTR=VALUE,...]"
    parts = value.split(":")
    attrs_text = parts.pop() if len(parts) >= 3 and "=" in parts[-1] else ""
    op = parts.pop().strip() if len(parts) >= 2 else ""
    tensor = ":".join(parts)
    if not op or not tensor or "=" in op:
        raise InputError(f"{flag} {value!r} is not {form}.",
                         fix=f"Write e.g. {flag} logits:Softmax:axis=-1.")
    attrs: dict[str, Any] = {}
    inputs: list | None = None
    for item in _split_top(attrs_text):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise InputError(f"{flag} {value!r}: {item!r} is not ATTR=VALUE.",
                             fix=f"Write e.g. {flag} x:Cast:to=FLOAT16.")
        if key == "inputs":
            v = parse_value(raw)
            inputs = v if isinstance(v, list) else [v]
        else:
            attrs[key] = parse_value(raw)
    return tensor, op, attrs, inputs


def _step(lab: Lab, flag: str, value: str, verify: bool):
    if flag == "--set-attr":
        node, rest = _named_pair(flag, value, ":", "NODE:NAME=VALUE", lab.index.entries)
        if node in lab.index.entries:  # NAME=VALUE: attribute names hold neither sign
            attr, raw = _pair(flag, rest, "=", "NODE:NAME=VALUE")
        else:
            left, raw = _pair(flag, value, "=", "NODE:NAME=VALUE")
            node, attr = _pair(flag, left, ":", "NODE:NAME=VALUE")
        return lab.set_attribute(node, attr, parse_value(raw), verify=verify)
    if flag == "--remove":
        return lab.remove_node(value, verify=verify)
    if flag == "--remove-cascade":
        return lab.remove_node_cascade(value, verify=verify)
    if flag == "--rename":
        old, new = _named_pair(flag, value, "=", "OLD=NEW",
                               lab.index.values.keys() | lab.index.entries.keys())
        if old not in lab.index.values and old in lab.index.entries:
            return lab.rename_node(old, new, verify=verify)
        return lab.rename_tensor(old, new, verify=verify)
    if flag == "--add-output":
        return lab.add_output(value, verify=verify)
    if flag == "--remove-output":
        return lab.remove_output(value, verify=verify)
    if flag == "--input-shape":
        name, dims = _dims(flag, value)
        return lab.set_input_shape(name, dims, verify=verify)
    if flag == "--replace-init":
        name, path = _named_pair(flag, value, "=", "NAME=FILE", set(lab.initializers.name))
        return lab.replace_initializer(name, path, verify=verify)
    if flag == "--scale-init":
        name, factor = _named_pair(flag, value, "=", "NAME=FACTOR",
                                   set(lab.initializers.name))
        try:
            f = float(factor)
        except ValueError:
            raise InputError(f"{flag} {value!r}: {factor!r} is not a number.",
                             fix=f"Write {flag} NAME=0.5.") from None
        return lab.scale_initializer(name, f, verify=verify)
    if flag == "--convert-opset":
        try:
            target = int(value)
        except ValueError:
            raise InputError(f"{flag} {value!r}: the opset is not an integer.",
                             fix=f"Write e.g. {flag} 17.") from None
        return lab.convert_opset(target, verify=verify)
    if flag == "--add-node":
        tensor, op, attrs, inputs = add_node_spec(flag, value)
        return lab.add_node(tensor, op, attrs, inputs, verify=verify)
    raise InputError(f"Unknown edit flag {flag}.", fix="See onnx-lab edit --help.")


def _verdict(r: Any) -> str:
    if r.verify_passed is True:
        return "outputs unchanged (verified)"
    if r.verify_passed is False:
        from onnx_lab.numerics.verify import failed_where

        return f"VERIFICATION FAILED{failed_where(r)}"
    if r.outputs_changed is False:  # only intermediate values changed
        return r.notes[-1]
    if r.outputs_changed:
        return (f"outputs changed (expected for this edit): max_abs {r.max_abs_err:.3g}"
                if r.max_abs_err is not None else "outputs changed (expected for this edit)")
    return "not verified"


def _edit(args: argparse.Namespace) -> int:
    if not args.edits:
        raise InputError("onnx-lab edit needs at least one edit flag.",
                         fix="e.g. --set-attr NODE:NAME=VALUE, --rename OLD=NEW; see "
                         "onnx-lab edit --help.")
    lab = open_from_args(args, "input")
    n0 = len(lab.index)
    results = []
    for flag, value in args.edits:
        r = _step(lab, flag, value, not args.no_verify)
        results.append((flag, value, r))
    if args.script:
        # on use: `onnx-lab --help` registers this command without loading the model core
        from onnx_lab.core.outputs import refuse_inputs, write_atomic

        # never over the input or the model written here: refused before anything is written
        refuse_inputs(args.script, [lab, args.input, args.output], flag="--script")
    out = lab.save(args.output)
    script = None
    if args.script:
        # the model's absolute path: the script replays from any folder (as typed, a
        # relative path only replayed from the folder the edit ran in)
        source = str(args.input)
        script = lab.to_script(source=source if source.startswith("sample:") or not
                               os.path.exists(source) else os.path.abspath(source))
        write_atomic(args.script, script)  # through a fresh temporary
    failed = [r for _f, _v, r in results if r.verify_passed is False]
    if args.json:
        # on use: `onnx-lab --help` registers this command without loading the model core
        from onnx_lab.core.history import step_call
        from onnx_lab.transforms.edit import edit_provenance

        print_json({"steps": [{"flag": f, "value": v, "call": step_call(r), **r.summary(),
                               **edit_provenance(r)} for f, v, r in results],
                    "nodes_before": n0, "nodes_after": len(lab.index), "output": str(out),
                    "script": args.script})
    else:
        for f, v, r in results:
            what = f"{r.nodes_before} -> {r.nodes_after} nodes" if r.modified else \
                f"unchanged ({r.reason})"
            print(f"{f} {v}: {what}, {_verdict(r)}")
        print(f"{n0} -> {len(lab.index)} nodes, written to {out}")
    if failed:
        print(f"onnx-lab: verification failed for {', '.join(r.name for r in failed)}",
              file=sys.stderr)
        return 1
    return 0
