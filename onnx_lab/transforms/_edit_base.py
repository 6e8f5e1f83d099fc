"""What every edit pass shares: the node lookup and the checker run after the rewrite
(``_EditPass``). Importable from :mod:`onnx_lab.transforms.edit`."""

from __future__ import annotations

import re
from typing import ClassVar

import onnx
import onnx_ir as ir

from onnx_lab.core._proto import weights_as_inputs
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import guard_label_encoders
from onnx_lab.errors import PassError
from onnx_lab.transforms.base import (
    LabPass,
    PassContext,
    PassResult,
)


def _node(model: LabModel, node_id: str) -> ir.Node:
    return model.index.node(node_id)  # UnknownNameError with close matches


def _model_problem(model: LabModel) -> str | None:
    """Why onnx's checker (with strict shape inference) refuses ``model``, or None."""
    try:
        proto = weights_as_inputs(model.to_proto())  # the data files are not read
        guard_label_encoders(proto)  # onnx's inference would end the process on some
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        text = " ".join(str(e).split())
        return text[:400]
    except ValueError:  # a proto over 2 GB cannot be checked in memory
        return None
    return None


_NODE_NAMED = re.compile(r"node name: ([^)]*)\)")


def _drop_shapes_after(model: LabModel, problem: str) -> int:
    """Forget (in place) the declared shapes, not the types, of the tensors the node that
    onnx's message names makes and of everything they feed in its graph, graph outputs
    excepted: what an edit upstream changed (MaxPool ``ceil_mode=1``: 16 -> 17 there and
    below), and only that (an exporter's ``H_conv`` elsewhere stays). Returns how many."""
    m = _NODE_NAMED.search(problem)
    if m is None:
        return 0
    name = m.group(1).strip()
    for g in model.ir.graphs():
        start = next((n for n in g if n.name == name), None)
        if start is None:
            continue
        outputs = {id(v) for v in g.outputs}
        seen: set[int] = set()
        todo, n_dropped = list(start.outputs), 0
        while todo:
            v = todo.pop()
            if v is None or id(v) in seen:
                continue
            seen.add(id(v))
            if v.shape is not None and id(v) not in outputs:
                v.shape = None
                n_dropped += 1
            for user, _i in v.uses():
                todo.extend(user.outputs)
        if n_dropped:
            model.invalidate()
        return n_dropped
    return 0


class _EditPass(LabPass):
    """An edit: after the rewrite the model must pass onnx's checker and strict shape inference
    (else PassError, and the history is unchanged), unless the model already failed before.

    Class attributes read by the verification step (:func:`onnx_lab.steps.apply`):
        semantics_preserving: False for edits meant to change the outputs (an attribute, a
            removed node, a new weight): the step reports "outputs changed (expected for this
            edit): max_abs ..." instead of a failure.
        verify_preset: a tolerance preset the step verifies with (``"exact"`` for renames and
            output changes: every surviving output must stay bit-identical).
    """

    semantics_preserving: ClassVar[bool] = True
    verify_preset: ClassVar[str | None] = None

    def run(self, model: LabModel, context: PassContext | None = None) -> PassResult:
        result = super().run(model, context)
        if result.modified:
            problem = _model_problem(result.model)
            if problem is not None and "existing shape" in problem \
                    and _model_problem(model) is None:
                # The edit changes a shape the model declares for an intermediate tensor
                # (MaxPool ceil_mode=1: 16 -> 17): those declarations are stale, not the edit.
                dropped, again = 0, problem
                for _ in range(8):  # each round: what the refused node feeds
                    n = _drop_shapes_after(result.model, again)
                    if not n:
                        break
                    dropped += n
                    again = _model_problem(result.model)
                    if again is None or "existing shape" not in again:
                        break
                if again is None:
                    result.notes.append(f"the declared shapes of {dropped} intermediate "
                                        "tensor(s) were dropped: the edit changes them")
                    problem = None
                elif "existing shape" in again:
                    raise PassError(
                        f"{self.name} refused: the edit changes the shape of a graph output, "
                        f"which the model declares otherwise: {again}",
                        fix="The model is unchanged. Change the output's declared shape first "
                        "(set_input_shape does it for inputs; lab.fix_dims for symbolic dims), "
                        "or choose values that keep the output's shape.")
                else:
                    problem = again
            if problem is not None:
                already = _model_problem(model)
                if already is None:
                    raise PassError(f"{self.name} refused: the edited model fails onnx's "
                                    f"checker / shape inference: {problem}",
                                    fix="The model is unchanged; pass values the op accepts.")
                result.notes.append("the model failed onnx's checker before this edit too: "
                                    f"{already}")
        return result
