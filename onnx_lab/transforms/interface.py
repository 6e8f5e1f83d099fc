"""The interface guard: a step may not change the model's inputs and outputs silently.

Every pass ``run_pass`` runs (graph passes and tools alike) is checked here before its result
goes to verification: the new graph's inputs and outputs are compared with the previous
version's by name (and, for tools, element type and rank). A pass that removes or renames an
input the user feeds (onnxslim drops the ``past_key_values.*`` inputs of a merged decoder when their length
is given as 0), removes or renames an output, or (a tool) changes an element type fails with a
:class:`~onnx_lab.errors.PassError` naming the step, the values and the likely cause. So does a
result with no nodes left, or with a graph output nothing produces (onnxruntime's transformer
optimizer given a ``model_type`` that does not fit): verification would only say the output
"does not exist".

Passes that change the interface on purpose declare it (``register_pass(..., kind="edit")``:
``rename_tensor``, ``fix_dims``...) and are not checked. Inputs backed by an initializer are
weights, not part of what a runtime must feed: removing them is not an interface change.

Example:
    >>> check_interface(before, result, kind="tool", dims={"past_decoder_sequence_length": 0})
    PassError: onnxslim removed input(s) past_key_values.0.decoder.key, ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.errors import PassError
from onnx_lab.transforms.base import PassResult

__all__ = ["check_interface", "fed_inputs", "INTERFACE_KINDS"]

#: Pass kinds that change the model's interface on purpose (not checked).
INTERFACE_KINDS = frozenset({"edit"})

_MAX_NAMED = 6


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMED])
    return shown + (f" and {len(names) - _MAX_NAMED} more" if len(names) > _MAX_NAMED else "")


def fed_inputs(g: ir.Graph) -> dict[str, ir.Value]:
    """The graph inputs a runtime feeds (those backed by an initializer are weights)."""
    return {v.name: v for v in g.inputs if v.name and v.name not in g.initializers}


def _dtype(v: ir.Value) -> Any:
    t = v.type
    if t is None:
        return None
    return getattr(t, "dtype", None) if isinstance(t, ir.TensorType) else str(t)


def _rank(v: ir.Value) -> int | None:
    return None if v.shape is None else len(v.shape)


def _dtype_name(d: Any) -> str:
    return getattr(d, "name", str(d)).lower()


def _empty_dims(v: ir.Value, dims: Mapping[str, int], shapes: Mapping[str, Sequence[int]]
                ) -> list[str]:
    """The dims of input ``v`` the user gave as 0 (names, or positions of a given shape)."""
    given = shapes.get(v.name)
    if given is not None:
        return [f"{v.name}[{i}]" for i, d in enumerate(given) if d == 0]
    return [d.value for d in v.shape or () if isinstance(d, ir.SymbolicDim)
            and d.value is not None and dims.get(d.value) == 0]


def _declared_empty(v: ir.Value) -> list[str]:
    """The dims of input ``v`` the model itself declares 0 (``like[0]``)."""
    return [f"{v.name}[{i}]" for i, d in enumerate(v.shape or ())
            if isinstance(d, int) and d == 0]


def _removed_cause(removed: list[ir.Value], dims: Mapping[str, int],
                   shapes: Mapping[str, Sequence[int]]) -> str:
    zero = sorted({z for v in removed for z in _empty_dims(v, dims, shapes)})
    declared = sorted({z for v in removed for z in _declared_empty(v)})
    if declared and not zero:
        return (f"the model declares them empty ({', '.join(declared)}: no values), so the "
                "tool dropped them; no dims change that")
    if zero:
        names = [z for z in zero if "[" not in z]
        give = (f"give {' and '.join(f'{n} >= 1' for n in names)}" if names
                else "give those dims >= 1")
        return f"a dim given as 0 ({', '.join(zero)}) makes them empty; {give}"
    if all(not v.uses() for v in removed):
        return "nothing in the model reads them, so the tool dropped them"
    return "the tool rebuilt the graph without them"


def _is_zipmap_output(v: ir.Value) -> bool:
    """A value a ZipMap writes: seq(map(...)), the probabilities of skl2onnx's classifiers."""
    p = v.producer()
    return p is not None and p.op_type == "ZipMap" and p.domain == "ai.onnx.ml"


def _structure_problem(before: LabModel, new: LabModel) -> str | None:
    """Why the new graph cannot be the model at all: no nodes, or an output nothing makes."""
    g = new.graph
    fed = {v.name for v in g.inputs}
    made = {o.name for n in g for o in n.outputs}  # a removed producer may still be linked
    missing = [v.name for v in g.outputs if v.name not in made and v.name not in fed
               and v.name not in g.initializers]
    if not missing and g.outputs:
        return None  # a graph left with no nodes that passes its inputs through is a model
    if len(new.index) == 0 and len(before.index) > 0:
        return f"left no nodes ({len(before.index)} -> 0)"
    if not g.outputs:
        return "returned a graph without outputs"
    return f"returned a graph whose output(s) {_names(missing)} nothing produces"


def _structure_cause(before: LabModel, params: Mapping[str, Any]) -> str:
    if any(n.op_type in ("If", "Loop", "Scan") for n in before.graph):
        where = ("the model's compute sits inside If/Loop bodies (a merged decoder), which the "
                 "tool does not handle")
    else:
        where = "the tool did not recognize the model's layout"
    if "model_type" in params:
        where += f"; the model_type {params['model_type']!r} does not fit this model"
    return where


def check_interface(before: LabModel, result: PassResult, *, kind: str = "graph",
                    dims: Mapping[str, int] | None = None,
                    shapes: Mapping[str, Sequence[int]] | None = None) -> None:
    """Refuse a step whose result changed the model's interface or lost the graph.

    Args:
        before: the version the pass ran on.
        result: the pass's result (not checked when it did not modify the model).
        kind: the pass's registered kind; kinds in :data:`INTERFACE_KINDS` change the
            interface on purpose and are only checked for a graph that lost its outputs.
        dims, shapes: the Lab's dim values and input shapes (to name a dim given as 0).

    Raises:
        PassError: naming the step, what changed and the likely cause.
    """
    if not result.modified or result.model is before:
        return
    new = result.model
    dims, shapes = dict(dims or {}), dict(shapes or {})
    step = result.name
    problem = _structure_problem(before, new)
    if problem is not None:
        raise PassError(f"{step} {problem}: refused before verification (the history is "
                        f"unchanged). Likely cause: {_structure_cause(before, result.params)}.",
                        fix=f"Leave {step} out for this model, or run it with other "
                        "parameters.")
    if kind in INTERFACE_KINDS:
        return
    changes: list[str] = []
    causes: list[str] = []
    b_in, a_in = fed_inputs(before.graph), fed_inputs(new.graph)
    removed = [v for n, v in b_in.items() if n not in a_in]
    added = [n for n in a_in if n not in b_in]
    if removed:
        changes.append(f"removed input(s) {_names([v.name for v in removed])}")
        causes.append(_removed_cause(removed, dims, shapes))
    if added:
        changes.append(f"added input(s) {_names(added)}")
    b_out = {v.name: v for v in before.graph.outputs}
    a_out = {v.name: v for v in new.graph.outputs}
    gone = [n for n in b_out if n not in a_out]
    if gone:
        changes.append(f"removed output(s) {_names(gone)}")
    new_outs = [n for n in a_out if n not in b_out]
    if new_outs:
        changes.append(f"added output(s) {_names(new_outs)}")
    # Element types and ranks: a tool's retyped value is a silent change; onnx_lab's own
    # passes change a type only as what they are for (remove_zipmap turns the ZipMap's
    # seq(map) output into its probabilities tensor, under the same name) and are verified.
    for what, b, a in (("input", b_in, a_in), ("output", b_out, a_out)) if kind == "tool" \
            else ():
        for name, bv in b.items():
            av = a.get(name)
            if av is None:
                continue
            bd, ad = _dtype(bv), _dtype(av)
            if bd is not None and ad is not None and bd != ad:
                changes.append(f"changed {what} {name} from {_dtype_name(bd)} to "
                               f"{_dtype_name(ad)}")
                if _is_zipmap_output(bv):
                    causes.append(f"the tool does not keep the sequence of maps a ZipMap "
                                  f"writes; lab.apply('remove_zipmap') first turns {name} "
                                  f"into the probabilities tensor (a verified step), after "
                                  f"which {step} keeps the interface")
            br, ar = _rank(bv), _rank(av)
            if br is not None and ar is not None and br != ar:
                changes.append(f"changed the rank of {what} {name} from {br} to {ar}")
    if not changes:
        return
    cause = f" Likely cause: {'; '.join(causes)}." if causes else ""
    raise PassError(f"{step} {'; '.join(changes)}: a step may not change the model's "
                    f"interface (a runtime feeding the previous inputs would fail); refused "
                    f"before verification, the history is unchanged.{cause}",
                    fix="Change the parameters or dims that led the tool there, or leave "
                    f"{step} out; to change the interface on purpose use an edit pass "
                    "(rename_tensor, extract).")
