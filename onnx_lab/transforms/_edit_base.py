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
            if problem is not None:
                already = _model_problem(model)
                if already is None:
                    raise PassError(f"{self.name} refused: the edited model fails onnx's "
                                    f"checker / shape inference: {problem}",
                                    fix="The model is unchanged; pass values the op accepts.")
                result.notes.append("the model failed onnx's checker before this edit too: "
                                    f"{already}")
        return result
