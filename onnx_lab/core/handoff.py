"""Handing a model to another tool, and taking its result back: the one way every tool step
does it.

Tools read models in one of two forms, and each gets the form it supports:

- **in memory, weights loaded** (onnxsim, onnxslim, onnxoptimizer and onnxruntime's
  transformer optimizer take a ``ModelProto``, as do the float16 conversion and
  onnxruntime's MatMulNBits quantizer; onnxscript's rewriter an ``onnx_ir.Model``):
  :func:`proto_with_weights`, :func:`ir_with_weights`. Weights in external files are read
  into a copy; the model itself is left as it was. A tool that serializes the message
  cannot take more than 2 GB: larger models are refused with a PassError naming the step.
- **a folder** (onnxruntime's quantizers read a path; onnxruntime's optimizer writes one):
  :func:`model_folder` writes the model into a fresh temporary folder by
  :func:`onnx_lab.core.save.write_model`'s rule (its own data file beside it, regular files,
  small tensors inline), :func:`work_folder` gives an empty one for a tool's output, and
  :func:`read_output` reads a result back with every weight in memory, so nothing refers
  to the temporary folder once it is gone.

A tool's own exceptions become a :class:`~onnx_lab.errors.PassError` naming the step and the
fix (:func:`tool_errors`); LabErrors pass through.

Example:
    >>> with tool_errors("onnxsim", "Give input shapes (dims=)."):
    ...     out = onnxsim.simplify(proto_with_weights(model, "onnxsim"))[0]
    >>> with model_folder(model, "int8 dynamic") as src, work_folder("int8 dynamic") as out:
    ...     quantize_dynamic(str(src), str(out / "model.onnx"))
    ...     result = read_output(out / "model.onnx", "int8 dynamic")
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import onnx
import onnx_ir as ir

from onnx_lab.core._files import verify_files
from onnx_lab.core._proto import graph_protos
from onnx_lab.core.model import LabModel
from onnx_lab.core.save import wants_external, write_model
from onnx_lab.errors import LabError, PassError

__all__ = ["proto_with_weights", "ir_with_weights", "model_folder", "work_folder",
           "read_output", "tool_errors", "PROTO_LIMIT"]

#: protobuf's limit on one serialized message.
PROTO_LIMIT = 2_000_000_000


def _check_proto_size(model: LabModel, step: str) -> None:
    nbytes = model.weights_nbytes()
    if nbytes >= PROTO_LIMIT:
        raise PassError(f"{step} needs the whole model in one protobuf, but its weights "
                        f"take {nbytes / 1e9:.1f} GB (protobuf's limit is 2 GB).",
                        fix="Use onnx_lab's own passes (lab.apply_preset('safe')), which "
                        "keep external data where it lies.")


def ir_with_weights(model: LabModel, step: str) -> ir.Model:
    """A copy of ``model`` with every external weight read into memory (``model`` keeps
    its references).

    Raises:
        PassError: a data file cannot be read any more (naming ``step``).
    """
    copy = model.sorted_clone().ir  # tools (onnx's checker, onnxsim) refuse another order
    if model.has_external_data:
        with tool_errors(step, "Check that the model's data files are still where they "
                         "were when it was opened."):
            ir.external_data.load_to_model(copy)
    return copy


def proto_with_weights(model: LabModel, step: str, *, limit: bool = True) -> onnx.ModelProto:
    """``model`` as a ModelProto with every weight inside (tools that read no files); each
    external tensor's bytes are read once, straight into the message.

    Args:
        limit: refuse weights past protobuf's 2 GB (tools that serialize the message);
            False for tools that work on the message in memory (the float16 conversion,
            onnxruntime's MatMulNBits quantizer).

    Raises:
        PassError: the weights pass 2 GB (with ``limit``), or a data file cannot be read any
            more (naming ``step``).
    """
    if limit:
        _check_proto_size(model, step)
    # tools (onnx's checker, onnxsim) refuse a graph stored out of order
    proto = ir.to_proto(model.ir if model.index.stored_in_order() else model.sorted_clone().ir)
    if model.has_external_data:
        verify_files(model.ir)  # the folder and data files are the ones opened
        with tool_errors(step, "Check that the model's data files are still where they "
                         "were when it was opened."):
            _load_external(proto, model)
    return proto


def _load_external(proto: onnx.ModelProto, model: LabModel) -> None:
    """Read the data of ``proto``'s external initializers (bodies included) into them, each
    from the folder its onnx_ir tensor names."""
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    folders = {t.name: str(t.base_dir) for t in model.external_tensors()}
    default = str(model.base_dir) if model.base_dir is not None else None
    for g in graph_protos(proto.graph):
        for t in g.initializer:
            if not uses_external_data(t):
                continue
            folder = folders.get(t.name, default)
            if folder is None:
                raise PassError(f"Weight {t.name!r} refers to external data without a folder.",
                                fix="Open the model from its path.")
            load_external_data_for_tensor(t, folder)
            t.data_location = onnx.TensorProto.DEFAULT
            del t.external_data[:]


@contextlib.contextmanager
def work_folder(step: str) -> Iterator[Path]:
    """An empty temporary folder for ``step``'s files, removed after the block."""
    name = "".join(c if c.isalnum() else "_" for c in step)[:40]
    with tempfile.TemporaryDirectory(prefix=f"onnx_lab_{name}_") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def model_folder(model: LabModel, step: str, name: str = "model.onnx") -> Iterator[Path]:
    """``model`` written to ``name`` in a fresh temporary folder (removed after the block);
    yields the model's path.

    The file is written by :func:`onnx_lab.core.save.write_model`: with external data (its
    own ``<name>.data`` beside it, regular files) when the model reads external data or
    passes 2 GB, else one file; tensors up to 4 KiB inline either way.
    """
    with work_folder(step) as folder:
        path = folder / name
        write_model(model, path, f"{name}.data" if wants_external(model) else None)
        yield path


def read_output(path: str | os.PathLike, step: str) -> ir.Model:
    """The model a tool wrote to ``path``, with every weight read into memory (the folder
    can be removed after).

    Raises:
        PassError: the tool wrote no model, or one whose data cannot be read (naming
            ``step``).
    """
    path = Path(path)
    fix = "Run the tool on the saved model (lab.save) to see its own message, or use " \
          "onnx_lab's own passes."
    if not path.is_file():
        raise PassError(f"{step} wrote no model (expected {path.name}).", fix=fix)
    with tool_errors(step, fix, what="its result cannot be read"):
        m = ir.load(path)
        ir.external_data.load_to_model(m)
    return m


@contextlib.contextmanager
def tool_errors(step: str, fix: str, *, what: str = "failed") -> Iterator[None]:
    """Turn a tool's own exception inside the block into a PassError: "``step`` ``what``:
    its first line", with ``fix``. LabErrors pass through unchanged."""
    try:
        yield
    except LabError:
        raise
    except Exception as e:  # noqa: BLE001 - tools raise any type (C++ errors, ValidationError)
        text = str(e).strip()
        first = text.splitlines()[0][:300] if text else type(e).__name__
        root, seen = e, {id(e)}
        while root.__cause__ is not None and id(root.__cause__) not in seen:
            root = root.__cause__
            seen.add(id(root))
        if root is not e:  # onnx_ir's "Error calling _deserialize_graph with: ..." hides it
            inner = str(root).strip()
            first += f" ({inner.splitlines()[0][:300] if inner else type(root).__name__})"
        raise PassError(f"{step} {what}: {first}", fix=fix) from e
