"""Where an external-data location leads: the one rule every reader of a model's data files
follows (:func:`onnx_lab.core.load.check_external_data` before anything is read, the audit's
manifest of the files it hashes).

A location is a relative path inside the model's folder, with no NUL byte; it must not leave
the folder, neither by ``..``, an absolute path nor a symbolic link out of it.
"""

from __future__ import annotations

import os
from pathlib import Path

from onnx_lab.errors import ExternalDataError

__all__ = ["data_file", "user_path"]


def data_file(base: Path, location: str | None, tensor: str = "") -> Path:
    """The real path of the file ``location`` names in ``base`` (the model's folder, a real
    absolute path); it may be missing or not a regular file (the caller decides).

    Raises:
        ExternalDataError: no location, a NUL byte, a location outside ``base`` (``..``, an
            absolute path, a link out of it) or one that cannot be resolved; the message names
            ``tensor``.

    Example:
        >>> data_file(Path("/models/m"), "m.onnx.data", "w")
        PosixPath('/models/m/m.onnx.data')
    """
    if not location:
        raise ExternalDataError(f"Tensor {tensor!r} is marked external but has no location.",
                                fix="Re-export the model with its external data.")
    if "\x00" in location:
        raise ExternalDataError(
            f"Tensor {tensor!r} has an external data location with a NUL byte "
            f"({location[:80]!r}), which no file name can hold.",
            fix="Re-export the model with its external data.")
    normalized = os.path.normpath(location)
    if os.path.isabs(location) or normalized == ".." or normalized.startswith(".." + os.sep):
        raise ExternalDataError(
            f"Tensor {tensor!r} points to external data {location!r} outside the model's "
            f"folder {str(base)!r}; onnx_lab refuses to read it (a model file must not "
            "read arbitrary files).",
            fix="Move the data file next to the model and set a relative location.",
        )
    try:
        target = (base / location).resolve()
    except (OSError, RuntimeError, ValueError) as e:  # too long, a loop of links...
        raise ExternalDataError(
            f"External data location {location[:80]!r} (tensor {tensor!r}) cannot be "
            f"resolved in {str(base)!r}: {e}.",
            fix="Re-export the model with its external data.") from e
    if not target.is_relative_to(base):
        # The location is inside the folder but a symbolic link leads out of it (the
        # Hugging Face cache keeps blobs elsewhere); onnx and onnx_ir refuse those too.
        raise ExternalDataError(
            f"External data file {location!r} (tensor {tensor!r}) is a symbolic link to "
            f"{str(target)!r}, outside the model's folder {str(base)!r}; onnx_lab, like "
            "onnx and onnx_ir, does not follow links out of the folder.",
            fix="Copy the model and its data into one folder as real files (cp -L, or "
            "huggingface_hub.snapshot_download(..., local_dir=DIR)).",
        )
    return target


def user_path(path: str | os.PathLike) -> Path:
    """``path`` as the user meant it: a leading ``~`` or ``~user`` is their home folder (as
    pandas and the shell read it). Every path a user passes to open, save or write goes
    through here: ``lab.save("~/out.onnx")`` wrote a folder named ``~`` in the current one."""
    return Path(os.path.expanduser(os.fspath(path)))
