"""OpenVINO as a second runtime beside onnxruntime (optional: ``pip install openvino``).

:class:`OpenVINOSession` looks like an ``onnxruntime.InferenceSession`` to the timing loops
(``run(None, feeds) -> list of arrays``, ``get_providers()``), so profiling and sweeps time
both runtimes with the same code. OpenVINO reads the ONNX model itself (its own frontend) from
a temporary file and compiles it for a device (``CPU`` here).

Example:
    >>> from onnx_lab.runtime.openvino import openvino_available, OpenVINOSession
    >>> if openvino_available():
    ...     s = OpenVINOSession(lab.model, device="CPU")
    ...     outs = s.run(None, feeds)
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_lab.core.handoff import model_folder
from onnx_lab.core.model import LabModel
from onnx_lab.errors import ProviderError, RuntimeLoadError, clip_text

logger = logging.getLogger(__name__)

__all__ = ["openvino_available", "OpenVINOSession", "INSTALL_HINT", "is_openvino",
           "openvino_device", "BACKEND_PREFIX"]

INSTALL_HINT = ("OpenVINO is not installed: pip install openvino (the openvino extra of "
                "onnx_lab) to time it beside onnxruntime")
#: Session names of OpenVINO backends: ``"OpenVINO:CPU"``.
BACKEND_PREFIX = "OpenVINO"


def openvino_available() -> bool:
    """Whether the ``openvino`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("openvino") is not None


def is_openvino(name: str) -> bool:
    """Whether a backend name means the OpenVINO runtime (``"openvino"``, ``"openvino:CPU"``,
    ``"OpenVINO:GPU"``), not onnxruntime's OpenVINO execution provider."""
    return isinstance(name, str) and name.strip().lower().split(":")[0] == "openvino"


def openvino_device(name: str) -> str:
    """The device of an OpenVINO backend name (``CPU`` when none is given)."""
    parts = name.strip().split(":", 1)
    return parts[1].upper() if len(parts) > 1 and parts[1] else "CPU"


class OpenVINOSession:
    """A compiled OpenVINO model with the ``run``/``get_providers`` of an ORT session.

    Args:
        model: the LabModel (written to a temporary ONNX file for OpenVINO's reader).
        device: an OpenVINO device (``CPU``, ``GPU``...).
        threads: inference threads (None: OpenVINO's default).
        shapes: input name -> shape with ints for fixed dims and -1 for dims left dynamic
            (None: the model's own, dynamic dims staying dynamic).
        hint: OpenVINO's performance hint, ``LATENCY`` (one request at a time, as timed here)
            or ``THROUGHPUT``.
        precision: OpenVINO's inference precision. ``"f32"`` by default: on CPUs with bf16
            or AMX units the CPU plugin otherwise computes float32 models in bfloat16 (faster,
            and differing from onnxruntime by ~1e-2); None keeps the plugin's own choice.

    Raises:
        ProviderError: openvino is not installed, or the device does not exist.
        RuntimeLoadError: OpenVINO cannot read or compile the model.
    """

    def __init__(self, model: LabModel, *, device: str = "CPU", threads: int | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 hint: str = "LATENCY", precision: str | None = "f32") -> None:
        if not openvino_available():
            raise ProviderError("The OpenVINO backend needs the openvino package.",
                                fix="pip install openvino")
        import openvino as ov

        core = ov.Core()
        if device not in core.available_devices and device not in ("AUTO", "HETERO"):
            raise ProviderError(f"OpenVINO has no device {device!r} here "
                                f"(available: {', '.join(core.available_devices)}).",
                                fix="Use 'openvino:CPU' or one of the available devices.")
        self.device = device
        # OpenVINO reads a file: the model written with its own data file beside it in a
        # temporary folder (core.handoff), removed once compiled.
        with model_folder(model, "OpenVINO") as path:
            try:
                ov_model = core.read_model(str(path))
                if shapes:
                    ov_model.reshape({k: ov.PartialShape([int(d) for d in v])
                                      for k, v in shapes.items()})
                config: dict[str, Any] = {"PERFORMANCE_HINT": hint}
                if threads is not None:
                    config["INFERENCE_NUM_THREADS"] = int(threads)
                if precision is not None:
                    config["INFERENCE_PRECISION_HINT"] = precision
                self._compiled = core.compile_model(ov_model, device, config)
            except Exception as e:  # noqa: BLE001 - OpenVINO raises RuntimeError and others
                why, ops = _ov_reason(str(e))
                raise RuntimeLoadError(
                    f"OpenVINO cannot read or compile the model: {why or type(e).__name__}",
                    fix=(f"OpenVINO {ov.get_version()} does not convert {', '.join(ops)}: "
                         "compare onnxruntime's providers only (backends=[...] without "
                         "'openvino'), or keep those ops out of the model." if ops else
                         "Check lab.check(); ops of custom domains (com.microsoft) do not "
                         "run in OpenVINO.")) from e
        self._request = self._compiled.create_infer_request()
        # A port has several tensor names (an output behind an Identity keeps both; an input
        # read only by a Cast that OpenVINO folds into it carries the Cast's output name too,
        # and get_any_name() may give either): use the model's own names where the port
        # carries them. Inputs are fed by port, so none is left unset.
        declared_in = [v.name for v in model.graph.inputs]
        self._inputs = [next((n for n in declared_in if n in p.get_names()), p.get_any_name())
                        for p in self._compiled.inputs]
        declared = [o.name for o in model.graph.outputs]
        self._outputs = [next((n for n in declared if n in p.get_names()), p.get_any_name())
                         for p in self._compiled.outputs]
        self.version = ov.get_version()

    def get_providers(self) -> list[str]:
        """``['OpenVINO:CPU']`` (the name profiling tables use)."""
        return [f"{BACKEND_PREFIX}:{self.device}"]

    def get_outputs_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]
            ) -> list[np.ndarray]:
        """Outputs in the model's order (``output_names`` picks some), as numpy arrays."""
        missing = [n for n in self._inputs if n not in feeds]
        if missing:
            # infer() would run on whatever the request's input tensors hold (uninitialized,
            # or the previous run's values): garbage that looks like a result
            raise ValueError(f"no value fed for the input(s) {', '.join(map(repr, missing))}")
        res = self._request.infer({i: feeds[n] for i, n in enumerate(self._inputs)})
        arrays = [np.asarray(res[i]) for i in range(len(self._outputs))]
        if output_names is None:
            return arrays
        by_name = dict(zip(self._outputs, arrays, strict=True))
        return [by_name[n] for n in output_names]


def _ov_reason(text: str) -> tuple[str, list[str]]:
    """(the lines of an OpenVINO error that say why, the ops it could not convert): its
    frontend puts them under a "Summary:" after lines of C++ source locations (the first
    line alone said "Exception from src/inference/src/cpp/core.cpp:84:")."""
    lines = [ln.strip(" -") for ln in text.strip().splitlines() if ln.strip()]
    ops: list[str] = []
    said: list[str] = []
    for ln in lines:
        for lead in ("No conversion rule found for operations:", "Conversion is failed for:"):
            if ln.startswith(lead):
                said.append(ln)
                ops += [o.strip() for o in ln[len(lead):].split(",") if o.strip()]
    if not said:
        said = [ln for ln in lines if not ln.startswith(("Exception from", "Check '"))][:2] \
            or lines[:1]
    return clip_text("; ".join(said), 400), list(dict.fromkeys(ops))
