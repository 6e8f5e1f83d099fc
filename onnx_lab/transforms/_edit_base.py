"""What every edit pass shares: the node lookup and the checker run after the rewrite
(``_EditPass``). Importable from :mod:`onnx_lab.transforms.edit`."""

from __future__ import annotations

from typing import ClassVar

import onnx
import onnx_ir as ir

from onnx_lab.core._proto import weights_as_inputs
from onnx_lab.core.model import LabModel
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
        onnx.checker.check_model(proto, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        text = " ".join(str(e).split())
        return text[:400]
    except ValueError:  # a proto over 2 GB cannot be checked in memory
        return None
    return None


def _drop_intermediate_shapes(model: LabModel) -> int:
    """Forget the declared shape (not the type) of every tensor a node makes that is not a
    graph output, in every graph of ``model`` (in place); returns how many had one."""
    n = 0
    for g in model.ir.graphs():
        outputs = set(id(v) for v in g.outputs)
        for node in g:
            for v in node.outputs:
                if v.shape is not None and id(v) not in outputs:
                    v.shape = None
                    n += 1
    if n:
        model.invalidate()
    return n


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
                dropped = _drop_intermediate_shapes(result.model)
                again = _model_problem(result.model) if dropped else problem
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
