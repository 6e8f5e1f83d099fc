"""Passes wrapping other tools: onnxsim, onnxoptimizer (one pass per optimizer pass) and
onnxruntime's offline graph optimization (``ort:basic``, ``ort:extended``, ``ort:all``).

They return the same :class:`~onnx_lab.transforms.base.PassResult` as onnx_lab's own passes;
provenance is recovered by node tags and names (see ``_whole.py``), else marked unknown.
Models with external data are read into memory for onnxsim/onnxoptimizer (which only take
a whole protobuf; over 2 GB they refuse with a PassError); onnxruntime reads the weights where
they lie.

Example:
    >>> lab.apply("onnxsim")
    >>> lab.apply("onnxoptimizer:fuse_bn_into_conv")
    >>> r = lab.apply("ort:extended"); r.notes   # mentions com.microsoft ops
"""

from __future__ import annotations

import logging
import os
import tempfile

import onnx
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.errors import PassError
from onnx_lab.transforms._whole import PROTO_LIMIT, WholeModelPass
from onnx_lab.transforms.base import Param, _register_factory

logger = logging.getLogger(__name__)

__all__ = ["OnnxsimPass", "OnnxoptimizerPass", "OrtPass", "optimizer_passes"]

_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


class OnnxsimPass(WholeModelPass):
    """onnxsim.simplify: constant folding, shape inference and onnxoptimizer fusions at once."""

    params = (
        Param("skip_fuse_bn", bool, False, "do not fuse BatchNormalization into Conv"),
        Param("skip_constant_folding", bool, False, "do not fold constants"),
        Param("skip_shape_inference", bool, False, "do not run shape inference"),
        Param("skipped_optimizers", (list, tuple), None, "onnxoptimizer passes to skip"),
    )
    no_match_reason = "onnxsim found nothing to simplify"

    def rebuild(self, model: LabModel) -> ir.Model | None:
        import onnxsim

        proto = self.proto_with_weights(model)
        shapes = self.lab_input_shapes(model)
        o = self.options
        try:
            out, ok = onnxsim.simplify(
                proto, check_n=0, skip_fuse_bn=o["skip_fuse_bn"],
                skip_constant_folding=o["skip_constant_folding"],
                skip_shape_inference=o["skip_shape_inference"],
                skipped_optimizers=list(o["skipped_optimizers"] or []) or None,
                overwrite_input_shapes=shapes or None)
        except Exception as e:  # noqa: BLE001 - onnxsim raises many types from C++
            raise PassError(f"onnxsim failed: {str(e).strip().splitlines()[0][:300]}",
                            fix="Give input shapes (dims=/shapes= at open) or use onnx_lab's "
                            "own passes.") from e
        if shapes:
            self.notes.append(f"onnxsim ran with input shapes {shapes}")
        return self.from_proto(out, model)


class OnnxoptimizerPass(WholeModelPass):
    """One onnxoptimizer pass."""

    params = (Param("fixed_point", bool, False, "repeat until nothing changes"),)
    optimizer_pass = ""

    def rebuild(self, model: LabModel) -> ir.Model | None:
        import onnxoptimizer

        proto = self.proto_with_weights(model)
        try:
            out = onnxoptimizer.optimize(proto, [self.optimizer_pass],
                                         fixed_point=self.options["fixed_point"])
        except Exception as e:  # noqa: BLE001 - onnxoptimizer raises from C++
            raise PassError(f"onnxoptimizer pass {self.optimizer_pass!r} failed: "
                            f"{str(e).strip().splitlines()[0][:300]}",
                            fix="Try onnx_lab's own pass for the same rewrite.") from e
        return self.from_proto(out, model)


class OrtPass(WholeModelPass):
    """onnxruntime offline graph optimization (the model onnxruntime would run)."""

    level = "basic"
    needs_weights = False

    def rebuild(self, model: LabModel) -> ir.Model | None:
        from onnx_lab.runtime.session import make_session

        if model.weights_nbytes() >= PROTO_LIMIT:
            raise PassError(f"ort:{self.level} writes the optimized model as one protobuf, "
                            "which cannot hold over 2 GB of weights.",
                            fix="Use onnx_lab's own passes, or onnxruntime's "
                            "session.optimized_model_external_initializers_file_name option.")
        with tempfile.TemporaryDirectory(prefix="onnx_lab_ort_") as tmp:
            target = os.path.join(tmp, "optimized.onnx")
            make_session(model, opt_level=self.level, optimized_model_path=target)
            proto = onnx.load_model(target)
        new = self.from_proto(proto, model)
        domains = sorted({n.domain for g in new.graphs() for n in g
                          if n.domain not in _STANDARD_DOMAINS})
        if domains:
            self.notes.append(f"the result holds ops of domain(s) {', '.join(domains)} that only "
                              "onnxruntime runs")
        if self.level == "all":
            self.notes.append("ort:all applies layout optimizations specific to this machine's "
                              "CPU; save ort:extended for portable models")
        return new


def optimizer_passes() -> list[str]:
    """Names of onnxoptimizer's passes (empty when onnxoptimizer is not installed)."""
    try:
        import onnxoptimizer
    except ImportError:
        return []
    return list(onnxoptimizer.get_available_passes())


def _register() -> None:
    from onnx_lab.transforms.base import register_pass

    register_pass("onnxsim", kind="tool")(OnnxsimPass)
    for level in ("basic", "extended", "all"):
        cls = type(f"Ort{level.title()}Pass", (OrtPass,),
                   {"level": level, "__doc__": f"onnxruntime offline optimization at level "
                    f"{level!r} (graph as ORT would run it)."})
        register_pass(f"ort:{level}", kind="tool")(cls)
    for name in optimizer_passes():
        cls = type(f"Onnxoptimizer_{name}", (OnnxoptimizerPass,),
                   {"optimizer_pass": name, "__doc__": f"onnxoptimizer pass {name}."})
        cls.name = f"onnxoptimizer:{name}"
        _register_factory(f"onnxoptimizer:{name}", cls, f"onnxoptimizer pass {name}",
                          OnnxoptimizerPass.params, kind="tool")


_register()
