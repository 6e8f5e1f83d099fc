"""Every file onnx_lab writes: never over an input, always through a fresh temporary.

One guard for every output (reports, diff pages, audit tables, renderings, CSV files, saved
models): :func:`refuse_inputs` refuses a target that resolves (links and ``..`` followed) to a
file the command reads — a model, one of its external data files, a model a Lab was derived
from — and :func:`write_atomic` writes the new file to a temporary created exclusively
(``O_EXCL``, a random name) in the target's folder and renames it over the target only once
it is complete: a planted ``<out>.tmp`` link is never followed, and a full disk leaves the old
file as it was.

Example:
    >>> refuse_inputs("r.html", [lab], flag="-o")
    >>> write_atomic("r.html", html_text)
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from onnx_lab.core._location import user_path
from onnx_lab.core._wire import external_locations
from onnx_lab.core.model import LabModel
from onnx_lab.core.save import protected_files, write_error
from onnx_lab.errors import SaveError

__all__ = ["input_files", "refuse_inputs", "write_atomic", "atomic_path", "csv_writer"]


def _real(p: str | os.PathLike) -> Path:
    return Path(os.path.realpath(p))


def _file_and_data(path: str | os.PathLike, label: str, out: dict[Path, str]) -> None:
    """``path`` and the external data files its model names (read from its headers)."""
    real = _real(user_path(path))
    out.setdefault(real, label)
    try:
        if not real.is_file() or real.suffix == ".npz":
            return
        with open(real, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            locations = external_locations(buf)
    except (OSError, ValueError):
        return
    for loc in locations:
        with contextlib.suppress(OSError, ValueError):
            out.setdefault(_real(real.parent / loc), f"the data file {loc!r} of {label}")


def _model_files(model: LabModel, label: str, out: dict[Path, str]) -> None:
    if model.path is not None:
        _file_and_data(model.path, label, out)
    for t in model.external_tensors():
        with contextlib.suppress(OSError, ValueError):
            out.setdefault(_real(os.path.join(os.fspath(t.base_dir), os.fspath(t.location))),
                           f"the data file {str(t.location)!r} of {label}")


def input_files(sources: Iterable[Any]) -> dict[Path, str]:
    """The files the given sources read, resolved, with what each is.

    A source is a path (``sample:`` names skipped), a :class:`LabModel`, an object with a
    ``history`` (a Lab: every version's files, the models it was derived from) or a
    ``model`` (a Comparison's side, a History), or None (skipped).
    """
    out: dict[Path, str] = {}
    for s in sources:
        if s is None:
            continue
        if isinstance(s, (str, os.PathLike)):
            if not str(s).startswith("sample:"):
                _file_and_data(s, f"the input {str(s)!r}", out)
            continue
        history = getattr(s, "history", None)
        if history is not None and hasattr(history, "files_read"):
            for f, kind in protected_files(history).items():
                out.setdefault(f, "the model this Lab was opened from" if kind == "source"
                               else kind)
            for v in getattr(history, "versions", ()):
                _model_files(v.model, "the Lab's model", out)
            continue
        if hasattr(s, "files_read") and hasattr(s, "versions"):  # a History
            for f, kind in protected_files(s).items():
                out.setdefault(f, "the model" if kind == "source" else kind)
            continue
        model = s if isinstance(s, LabModel) else getattr(s, "model", None)
        if isinstance(model, LabModel):
            _model_files(model, f"the model {str(model.path or '<memory>')!r}", out)
    return out


def refuse_inputs(target: str | os.PathLike, sources: Iterable[Any] | dict[Path, str], *,
                  flag: str = "the output") -> None:
    """Refuse to write ``target`` when it resolves to a file one of ``sources`` reads.

    Args:
        sources: what :func:`input_files` takes, or its result.
        flag: how the output is named in the message (``-o``, ``--csv``).

    Raises:
        SaveError: naming the output, the path and the input it would destroy.
    """
    if not isinstance(target, (str, os.PathLike)):
        raise SaveError(f"{flag} must be a file path, got {type(target).__name__} "
                        f"{target!r:.60}.", fix="Pass e.g. 'model.html'.")
    inputs = sources if isinstance(sources, dict) else input_files(sources)
    what = inputs.get(_real(user_path(target)))
    if what is not None:
        raise SaveError(f"{flag} {str(target)!r} is {what}, which is read here: writing it "
                        "would destroy the input.", fix="Write to another path.")


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """A fresh temporary path beside ``target`` (created exclusively, mode as the old file
    or the umask allows) that replaces ``target`` when the block ends without error; on any
    error it is removed and ``target`` is unchanged. A link at ``target`` is followed (the
    file it points to is replaced).

    Raises:
        WriteError: the folder is missing or not writable, no space, ...
    """
    target = user_path(target)
    final = _real(target) if target.is_symlink() else target
    try:
        fd, name = tempfile.mkstemp(dir=final.parent or ".", prefix=f".{final.name}.",
                                    suffix=".tmp")
    except OSError as e:
        raise write_error(target, e) from e
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        try:
            mode = final.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, final)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_error(target, e) from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(target: str | os.PathLike, data: str | bytes | Callable[[Path], Any], *,
                 sources: Iterable[Any] | dict[Path, str] = (), flag: str = "the output"
                 ) -> Path:
    """Write ``data`` (text, bytes, or a function that writes the file it is given) to
    ``target`` through :func:`atomic_path`, after :func:`refuse_inputs` against
    ``sources``. Returns ``target``.

    Raises:
        SaveError: ``target`` is an input, or a folder.
        WriteError: the file system refused the write; the old file is unchanged.
    """
    target = user_path(target)
    refuse_inputs(target, sources, flag=flag)
    if target.is_dir():
        raise SaveError(f"{flag} {str(target)!r} is a folder.",
                        fix=f"Pass a file path such as {str(target / 'out')!r}.")
    with atomic_path(target) as tmp:
        if callable(data):
            data(tmp)
        else:
            with open(tmp, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
    return target


#: What a spreadsheet reads as a formula at the start of a cell (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_writer(frame: Any) -> Callable[[Path], None]:
    """A writer (for :func:`write_atomic`) of ``frame`` as CSV, each text cell that a
    spreadsheet would read as a formula (starting with ``= + - @``, a tab or a carriage
    return: a node named ``=HYPERLINK(...)`` or ``=cmd|' /C calc'!A0``) written with a
    leading ``'``, as OWASP advises; numbers and other cells as they are.

    Example:
        >>> write_atomic("nodes.csv", csv_writer(lab.nodes))
    """
    def safe(v: Any) -> Any:
        return "'" + v if isinstance(v, str) and v.startswith(_FORMULA_START) else v

    def write(path: Path) -> None:
        text = frame.select_dtypes(include=["object", "string"]).columns
        out = frame.copy()
        for col in text:
            out[col] = out[col].map(safe)
        out.rename(columns={c: safe(c) for c in out.columns if isinstance(c, str)}
                   ).to_csv(path, index=False)
    return write
