"""Saving a Lab's current version, never over the user's source file unless asked.

Node provenance (``onnx_lab.origin`` metadata) is saved with the nodes, so ``origins``
survive save/load. External data: ``"auto"`` writes weights to ``<file>.data`` when the model
was opened with external data or would pass protobuf's 2 GB limit; a data file the model still
reads from is never overwritten (a new name is chosen), so earlier versions stay valid.

Example:
    >>> lab.apply_preset("safe")
    >>> lab.save("model.opt.onnx")
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import onnx_ir as ir

from onnx_lab.errors import SaveError

if TYPE_CHECKING:
    from onnx_lab.lab import Lab

logger = logging.getLogger(__name__)

__all__ = ["save"]

_LIMIT = 2_000_000_000
_GRAPH_MARGIN = 64 << 20  # room for the graph itself next to the weights


def _same(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _read_files(lab: Lab) -> set[Path]:
    """External data files any version of the Lab reads from."""
    files: set[Path] = set()
    for v in lab._history.versions:
        for t in v.model.external_tensors():
            files.add((Path(t.base_dir) / t.location).resolve())
    return files


def save(lab: Lab, path: str | os.PathLike, *, external_data: bool | str = "auto",
         overwrite: bool = False) -> Path:
    """Write the Lab's current version to ``path``.

    Args:
        path: the .onnx file to write (its folder is created).
        external_data: "auto" (external when the source had external data or the model
            passes 2 GB), True (``<file name>.data``), False (one file), or a data file name
            (relative, in the same folder).
        overwrite: allow writing over the file the model was opened from.

    Returns:
        The path written.

    Raises:
        SaveError: the path is the source file (without ``overwrite=True``), a folder, or
            the model is too large for one file.

    Example:
        >>> lab.save("out/model.onnx", external_data=True)
    """
    target = Path(path)
    if target.is_dir():
        raise SaveError(f"{str(target)!r} is a folder.", fix="Pass a file path such as "
                        f"{str(target / 'model.onnx')!r}.")
    source = lab.path
    if source is not None and not overwrite and (
            _same(target, source) or target.resolve() == Path(source).resolve()):
        raise SaveError(f"Refusing to overwrite the source model {str(source)!r}.",
                        fix="Save to another path, or pass overwrite=True.")
    if not isinstance(external_data, (bool, str)):
        raise SaveError(f"external_data must be 'auto', True, False or a file name, got "
                        f"{external_data!r}.", fix="Pass external_data=True.")
    model = lab.model
    size = model.weights_nbytes()
    if external_data == "auto":
        use_external = lab._history.original.model.has_external_data or \
            size + _GRAPH_MARGIN >= _LIMIT
        data_name = f"{target.name}.data"
    elif external_data is True:
        use_external, data_name = True, f"{target.name}.data"
    elif external_data is False:
        use_external, data_name = False, ""
    else:
        if os.path.isabs(external_data) or Path(external_data).name != external_data:
            raise SaveError(f"external_data {external_data!r} must be a file name in the "
                            "model's folder.", fix="Pass e.g. 'model.onnx.data'.")
        use_external, data_name = True, external_data
    if not use_external and size + _GRAPH_MARGIN >= _LIMIT:
        raise SaveError(f"The model's weights take {size / 1e9:.2f} GB; one .onnx file is "
                        "limited to 2 GB.", fix="Pass external_data=True.")
    target.parent.mkdir(parents=True, exist_ok=True)
    if use_external:
        reading = _read_files(lab)
        base, k = data_name, 1
        while (target.parent / data_name).resolve() in reading:
            data_name = f"{base}.{k}"
            k += 1
        if data_name != base:
            logger.info("%s is read by the model; writing weights to %s", base, data_name)
        ir.save(model.ir, target, external_data=data_name)
    else:
        m = model.ir
        if model.has_external_data:
            m = model.clone().ir
            ir.external_data.load_to_model(m)
        ir.save(m, target)
    return target
