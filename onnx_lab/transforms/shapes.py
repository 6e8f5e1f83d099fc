"""Shape and version surgery: fix symbolic dims, set an input's shape, convert the opset.

Each is a registered pass (kind ``edit``) so it goes through ``lab.apply``: a new version in
history, verified against the previous one.

Example:
    >>> lab.fix_dims({"batch": 1})
    >>> lab.set_input_shape("x", [1, 3, 224, 224])
    >>> lab.convert_opset(17)
"""

from __future__ import annotations

import re

import onnx
import onnx_ir as ir

from onnx_lab.core.derived import length_sums
from onnx_lab.core.dimexpr import dim_expression
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import (
    anonymous_dim,
    dynamic_dims,
    expression_dims,
    resolve_dim,
    shape_tuple,
)
from onnx_lab.errors import DimError, PassError, unknown_name
from onnx_lab.transforms._whole import WholeModelPass
from onnx_lab.transforms.base import LabPass, Match, Param, Rewrite, register_pass

__all__ = ["FixDims", "SetInputShape", "ConvertOpset"]


def _replace_dims(shape: ir.Shape | None, dims: dict[str, int],
                  sums: dict[str, int | str]) -> ir.Shape | None:
    if shape is None:
        return None
    new = []
    changed = False
    for d in shape:
        text = getattr(d, "value", None) if not isinstance(d, int) else None
        expr = dim_expression(text) if isinstance(text, str) and text not in dims else None
        # A name; a dim expression's names (all fixed: its value; some: ``4 + seq``); a
        # decoder's total length, which is the sum of its past and new lengths.
        value = (sums[text] if isinstance(text, str) and text in sums
                 else expr.substitute(dims) if expr is not None else resolve_dim(text, dims))
        if isinstance(text, str) and value != text:
            new.append(value)
            changed = True
        else:
            new.append(d)
    return ir.Shape(new) if changed else None


@register_pass("fix_dims", kind="edit")
class FixDims(LabPass):
    """Replace symbolic dims by fixed sizes in inputs, outputs and value shapes."""

    params = (Param("dims", dict, None, "{dim name: size}, e.g. {'batch': 1}"),)
    no_match_reason = "no dims given"

    def find(self, model: LabModel) -> list[Match]:
        dims = self.options["dims"] or {}
        known = dynamic_dims(model)
        exprs = expression_dims(model)
        for name, value in dims.items():
            if (name not in known or name == "?") and name not in exprs:
                named = sorted(k for k in known if k != "?")
                raise DimError(f"Unknown dim name {name!r}: the model's inputs have "
                               f"{'symbolic dims ' + ', '.join(map(repr, named)) if named else 'no named dims'}.",
                               fix="Use one of those names; for unnamed dims use "
                               "lab.set_input_shape(name, shape).")
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise DimError(f"Dim {name!r} must be an int >= 0, got {value!r}.",
                               fix=f"Pass {{{name!r}: 1}} (0 for an empty KV cache).")
        if not dims:
            return []
        return [Match(f"fix_dims:{','.join(sorted(dims))}", "fix_dims", self.name, [], "",
                      f"fix {', '.join(f'{k}={v}' for k, v in dims.items())}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        dims = dict(self.options["dims"])
        sums = _total_lengths(model, dims)
        for name, value in sums.items():
            rw.notes.append(f"{name} is {length_sums(model)[name]}: "
                            + (f"fixed to {value}" if isinstance(value, int)
                               else f"declared as {value!r} now"))
        rw.modified = _replace_all_dims(model, dims, sums) or rw.modified
        filled = _fill_anonymous(model, dims)
        if filled:
            rw.notes.append(f"{filled} anonymous dim{'s' if filled > 1 else ''} (unk__N or "
                            "unnamed) of outputs and intermediates set to the size shape "
                            "inference gives at these dims")
            rw.modified = True


def _replace_all_dims(model: LabModel, dims: dict[str, int],
                      sums: dict[str, int | str]) -> bool:
    """Replace ``dims`` (and the total lengths ``sums``) in the shapes of every graph's
    inputs, outputs and node outputs, bodies included; whether any shape changed."""
    changed = False
    for g in model.ir.graphs():
        values = list(g.inputs) + list(g.outputs)
        for node in g:
            values.extend(node.outputs)
        for v in values:
            new = _replace_dims(v.shape, dims, sums)
            if new is not None:
                v.shape = new
                changed = True
    return changed


def _fill_anonymous(model: LabModel, dims: dict[str, int]) -> int:
    """Give the anonymous dims (:func:`~onnx_lab.core.shapes.anonymous_dim`: tf2onnx's
    ``unk__N``, unnamed) of graph outputs and node outputs, bodies included, the size shape
    inference computes at ``dims``; how many it gave. A tf2onnx model fixed at batch 1 still
    declared its outputs ``[unk__13, 10]``: no dims name reaches ``unk__13``, and a fixed model
    should say its sizes. Named dims the user did not give stay names."""
    wanted = {}  # a graph output is its node's output too: one entry per value
    for g in model.ir.graphs():
        for v in [*g.outputs, *(o for node in g for o in node.outputs)]:
            declared = shape_tuple(v.shape)
            if declared and any(anonymous_dim(d) for d in declared):
                wanted[id(v)] = (model.index.graph_path(g), v, declared)
    if not wanted:
        return 0
    types = model.types(dims)
    filled = 0
    for path, v, declared in wanted.values():
        info = types.at(v.name, path)
        if info is None or info.shape is None or len(info.shape) != len(declared):
            continue
        new, n = [], 0
        for d, old, inferred in zip(declared, v.shape, info.shape, strict=True):
            if anonymous_dim(d) and isinstance(inferred, int):
                new.append(inferred)
                n += 1
            else:
                new.append(old)
        if n:
            v.shape = ir.Shape(new)
            filled += n
    return filled


def _total_lengths(model: LabModel, dims: dict[str, int]) -> dict[str, int | str]:
    """A KV-cache decoder's total length (genai's ``total_sequence_length``) once its past or
    new length is fixed: the sum of the two (``4 + sequence_length`` when only the past is).
    Left as a name, the fixed model would no longer say what it is: the total is derived
    from the past and new lengths, and a fixed past is no longer a length to add."""
    out: dict[str, int | str] = {}
    for name, text in length_sums(model).items():
        expr = dim_expression(text)
        if name in dims or expr is None or not any(n in dims for n in expr.names):
            continue
        out[name] = expr.substitute(dims)
    return out


# a number written as text: '1.5', '-3', '16.0', '1e3' (not a dim name; 'inf'/'nan' are names)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _number_text(text: str) -> bool:
    """Whether ``text`` is a number written as text, not a dim name: '1.5', '1e3', '-3',
    and digits str.isdecimal does not take, which a shape field hands on as text: '²', '½',
    'Ⅷ', '1_000' (each had become a symbolic dim of that name, sized 1)."""
    t = text.strip()
    if _NUMBER.fullmatch(t):
        return True
    t = t.lstrip("+-")
    return any(c.isnumeric() for c in t) and all(c.isnumeric() or c in "._" for c in t)


@register_pass("set_input_shape", kind="edit")
class SetInputShape(LabPass):
    """Set the declared shape of one graph input (ints, or names for symbolic dims)."""

    params = (Param("input", str, "", "the input"),
              Param("shape", (list, tuple), None, "sizes, e.g. [1, 3, 224, 224] or ['batch', 3]"))

    def find(self, model: LabModel) -> list[Match]:
        g = model.graph
        inputs = {v.name: v for v in g.inputs if v.name not in g.initializers}
        name, shape = self.options["input"], self.options["shape"]
        if name not in inputs:
            raise unknown_name("input", name, inputs, fix=f"Model inputs: {sorted(inputs)}.")
        if shape is None:
            raise PassError("set_input_shape needs shape=[...].", fix="Pass e.g. [1, 3, 32, 32].")
        declared = shape_tuple(inputs[name].shape)
        for i, d in enumerate(shape):
            if not (isinstance(d, str) and d) and not (isinstance(d, int) and d >= 0
                                                       and not isinstance(d, bool)):
                raise DimError(f"Shape {list(shape)} for input {name!r}: dim {i} must be an "
                               f"int >= 0 or a dim name, got {d!r}.",
                               fix="Use e.g. [1, 3, 224, 224] or ['batch', 3, 224, 224].")
            if isinstance(d, str) and _number_text(d):
                # '1.5', '16.0', '1e3' typed in a shape field: a number, not a name (it had
                # become a symbolic dim named '1.5', sized by the Lab's guess of 1)
                raise DimError(f"Shape {list(shape)} for input {name!r}: dim {i} is {d!r}, a "
                               "number written as text, not a size (an int >= 0) or a dim "
                               "name.", fix="Give each size as an int (16, not '16' or "
                               "'16.0') or a name such as 'batch'.")
        if declared is not None:
            if len(declared) != len(shape):
                raise DimError(f"Input {name!r} has rank {len(declared)} ({list(declared)}); "
                               f"the new shape {list(shape)} has rank {len(shape)}.",
                               fix="Give one size per dim (changing the rank changes the model).")
            for i, (old, new) in enumerate(zip(declared, shape)):
                if isinstance(old, int) and old > 0 and new != old:
                    raise DimError(f"Input {name!r}: dim {i} is fixed to {old}, not {new}.",
                                   fix=f"Keep {old} for dim {i}.")
        return [Match(f"set_input_shape:{name}", "set_input_shape", self.name, [], "",
                      f"input {name} shape {list(shape)}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        g = model.graph
        v = next(v for v in g.inputs if v.name == self.options["input"])
        new = ir.Shape(list(self.options["shape"]))
        if v.shape is not None and shape_tuple(v.shape) == shape_tuple(new):
            rw.notes.append("the input already has this shape")
            return
        old = shape_tuple(v.shape) or ()
        v.shape = new
        rw.modified = True
        # A dim name this input alone declares, now a size: the outputs and values that name
        # it have that size too (they read "batch" in the saved file after
        # --input-shape x:1x3x32x32). A name another input still declares stays a name.
        others = {d for u in g.inputs if u is not v and u.name not in g.initializers
                  for d in (shape_tuple(u.shape) or ()) if isinstance(d, str)}
        fixed = {o: n for o, n in zip(old, self.options["shape"])
                 if isinstance(o, str) and isinstance(n, int) and o not in others}
        if not fixed:
            return
        # (the input itself holds sizes there now, and no other input declares these names)
        _replace_all_dims(model, fixed, {})
        rw.notes.append(", ".join(f"{k}={n}" for k, n in fixed.items())
                        + " in the outputs and value shapes too (no other input declares "
                        + ("it" if len(fixed) == 1 else "them") + ")")


@register_pass("convert_opset", kind="edit")
class ConvertOpset(WholeModelPass):
    """Convert the model to another default-domain opset with onnx.version_converter."""

    params = (Param("target", int, 0, "the opset version to convert to"),)

    def rebuild(self, model: LabModel) -> ir.Model | None:
        target = self.options["target"]
        latest = onnx.defs.onnx_opset_version()
        current = model.ir.opset_imports.get("", model.ir.opset_imports.get("ai.onnx"))
        if not 1 <= target <= latest:
            raise PassError(f"Opset {target} is not supported: this onnx ({onnx.__version__}) "
                            f"knows opsets 1..{latest}.", fix=f"Pick a target in 1..{latest}.")
        if current == target:
            self._reason = f"the model already uses opset {target}"
            return None
        # The converter copies tensors through its own IR; weights stay external references.
        proto = model.to_proto()
        try:
            out = onnx.version_converter.convert_version(proto, target)
        except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError/ValueError
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            raise PassError(f"onnx.version_converter cannot convert opset {current} -> "
                            f"{target}: {msg}",
                            fix="A missing adapter means an op changed between these opsets "
                            "in a way the converter cannot rewrite; try a closer target or "
                            "re-export the model at that opset.") from e
        self.notes.append(f"opset {current} -> {target}")
        # The converter keeps the IR version; opset 17 in an IR 3 file is out of spec.
        need = onnx.helper.find_min_ir_version_for(list(out.opset_import), ignore_unknown=True)
        if out.ir_version < need:
            if out.ir_version < 4:
                # IR < 4 listed every initializer as a graph input (constants there); from
                # IR 4 on such an entry makes it an overridable input: drop the entries.
                inits = {t.name for t in out.graph.initializer}
                keep = [i for i in out.graph.input if i.name not in inits]
                del out.graph.input[:]
                out.graph.input.extend(keep)
            self.notes.append(f"IR version {out.ir_version} -> {need} (opset {target} needs it)")
            out.ir_version = need
        return self.from_proto(out, model)
