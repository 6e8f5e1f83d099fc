"""What an audit reads and keeps on disk: the models found under the given paths (with the
external data files each refers to), their content hash, the manifest of finished models in
the output folder, and the table files written from it.

The manifest (``manifest.jsonl``) gets one JSON line per finished model, appended as the model
finishes: an interrupted or killed audit loses only the models that were running. A line holds
the model's name, hash, the options it ran with, the row and the latency samples (the gate's
noise-aware comparison needs the runs, not only their median). The last line of a model wins;
the file is rewritten compactly at the end of a run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onnx_lab._pandas import pd
from onnx_lab.core._location import data_file, user_path
from onnx_lab.core._wire import external_locations
from onnx_lab.errors import ExternalDataError, InputError, ModelLoadError

MANIFEST = "manifest.jsonl"
#: Version of the manifest lines; lines of another version are not reused.
MANIFEST_VERSION = 1
#: Folder names never searched for models.
_SKIP_DIRS = {".git", ".ipynb_checkpoints", "__pycache__", ".venv", "node_modules"}


@dataclass(frozen=True)
class Found:
    """A model file found by :func:`find_models`.

    Attributes:
        name: the model's name in the table: its path relative to the folder it was found in
            (the file name for a file given directly); unique within one audit.
        path: the resolved path of the .onnx file.
        files: the model file and every external data file it refers to.
    """

    name: str
    path: Path
    files: tuple[Path, ...]


def external_files(path: Path) -> list[Path]:
    """The external data files the model at ``path`` refers to (read from the wire, the
    weights are not parsed), existing or not; only those ``onnx_lab.open`` would read: a
    relative location inside the model's folder that is a regular file (or missing). A
    location outside it (``../secret``, an absolute path, a link out), a device or a FIFO
    (``/dev/zero``: hashing it never ended, whatever ``--timeout`` said) is left out here;
    the worker's open refuses the model with the reason."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            locations = external_locations(buf)
    except (OSError, ValueError):  # empty or unreadable: the worker's open says why
        return []
    folder = Path(os.path.realpath(path.parent))
    seen: dict[Path, None] = {}
    for loc in locations:
        try:
            real = data_file(folder, loc)  # the rule open follows
        except ExternalDataError:
            continue
        if real != folder and regular_or_missing(real):
            seen.setdefault(real, None)
    return list(seen)


def regular_or_missing(path: Path) -> bool:
    """Whether ``path`` is a regular file or does not exist (not a FIFO, device, folder)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def dead_link(path: Path) -> bool:
    """Whether ``path`` is a symbolic link that resolves to nothing (a loop of links, a
    missing target): it never blocks a read, and the worker's open says what it is."""
    return os.path.islink(path) and not os.path.exists(path)


def find_models(paths: Iterable[str | os.PathLike]) -> list[Found]:
    """Every ``.onnx`` file under ``paths`` (folders searched recursively, in sorted order).

    A model with external data is one entry (the data files are listed in ``files``); a
    ``.onnx`` file another model names as its data is still audited as a model of its own.
    A FIFO or device named ``*.onnx`` in a folder is skipped; given by name it is refused.

    Raises:
        ModelLoadError: a path does not exist. InputError: no path given.

    Example:
        >>> [f.name for f in find_models(["zoo/"])]
    """
    paths = [user_path(p) for p in paths]
    if not paths:
        raise InputError("No model path given.", fix="Pass model files or folders.")
    picked: list[tuple[str, Path]] = []
    for p in paths:
        if not p.exists() and not dead_link(p):
            raise ModelLoadError(f"{str(p)!r} does not exist.",
                                 fix="Pass existing model files or folders.")
        if dead_link(p):
            picked.append((p.name, p))
        elif p.is_dir():
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
                for fname in sorted(files):
                    f = Path(root) / fname
                    # a FIFO or device named *.onnx would block the reads that follow
                    # (a link looping to itself is a row: skipped, it had no row at all)
                    if fname.endswith(".onnx") and (regular_or_missing(f) or dead_link(f)):
                        picked.append((f.relative_to(p).as_posix(), f))
        elif not regular_or_missing(p):
            raise InputError(f"{str(p)!r} is not a regular file (a FIFO or a device).",
                             fix="Pass model files or folders.")
        else:
            picked.append((p.name, p))
    out: dict[Path, Found] = {}
    names: dict[str, int] = {}
    for name, f in picked:
        real = Path(os.path.realpath(f))
        if real in out:
            continue
        names[name] = names.get(name, 0) + 1
        out[real] = Found(name, real, (real, *external_files(real)))
    # A .onnx file another model names as its data file is still a model of its own: a
    # hostile model naming its neighbour hid that one from the audit (no row, no report).
    # Two roots holding the same relative name: those models are named by their full path.
    return [Found(str(f.path) if names[f.name] > 1 else f.name, f.path, f.files)
            for f in out.values()]


def file_hash(files: Sequence[Path]) -> tuple[str, int]:
    """(sha256 over the files' names and contents, total bytes); a missing file hashes as
    missing (the worker then reports it), a FIFO or device is not read."""
    h = hashlib.sha256()
    total = 0
    for i, f in enumerate(files):
        h.update(f"{i}:{f.name if i else ''}\0".encode())
        if not regular_or_missing(f):  # never read a FIFO or a device (it may never end)
            h.update(b"<not a regular file>")
            continue
        try:
            with open(f, "rb") as fh:
                total += os.fstat(fh.fileno()).st_size
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
        except OSError:
            h.update(b"<missing>")
    return h.hexdigest(), total


def options_key(options: Mapping[str, Any]) -> str:
    """A short stable hash of the options a row depends on."""
    return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def slug(name: str) -> str:
    """A file name made of a model name, one per name: the name itself where it is made of
    letters, digits and ``._-`` only, else its readable form and a hash of the name
    (``a/b.onnx`` -> ``a__b.onnx-5d1f0c2a``): ``a b.onnx`` and ``a_b.onnx``, or
    ``x/y.onnx`` and ``x__y.onnx``, shared one report and log, the second overwriting the
    first."""
    keep = "".join(c if c.isalnum() or c in "._-" else "_" for c in name.replace("/", "__"))
    keep = keep.strip("._")[:120] or "model"
    if keep == name:
        return keep
    return f"{keep}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


# ---------------------------------------------------------------------------- manifest
def read_manifest(folder: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """The last entry of every model in ``folder/manifest.jsonl`` ({} when there is none);
    torn or foreign lines (an interrupted write) are skipped."""
    path = Path(folder) / MANIFEST
    out: dict[str, dict[str, Any]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return out
    except OSError as e:
        raise ModelLoadError(f"Cannot read the audit manifest {str(path)!r}: {e.strerror}.",
                             fix="Check the folder's permissions.") from e
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("v") == MANIFEST_VERSION and "model" in entry:
            out[entry["model"]] = entry
    return out


def append_manifest(folder: Path, entry: Mapping[str, Any]) -> None:
    """Append one finished model's entry (flushed and synced: it survives a kill)."""
    line = json.dumps({"v": MANIFEST_VERSION, **entry}, default=_json_default) + "\n"
    with open(folder / MANIFEST, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def write_manifest(folder: Path, entries: Iterable[Mapping[str, Any]], *,
                   inputs: Mapping[Path, str] | None = None) -> None:
    """Rewrite the manifest with one line per model (atomically; never over ``inputs``)."""
    from onnx_lab.core.outputs import write_atomic  # on use: `onnx-lab audit --help`

    text = "".join(json.dumps({"v": MANIFEST_VERSION, **e}, default=_json_default) + "\n"
                   for e in entries)
    write_atomic(folder / MANIFEST, text, sources=dict(inputs or {}),
                 flag="the audit's manifest")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    return str(o)


# ---------------------------------------------------------------------------- the table
def typed_table(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, str]) -> pd.DataFrame:
    """The rows as a DataFrame with ``columns`` in order and their declared dtypes (nullable
    ints and booleans, strings), so CSV and Parquet agree whatever a row lacks."""
    df = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=list(columns))
    return df.astype(dict(columns))


def write_tables(folder: Path, df: pd.DataFrame, html: str, *,
                 inputs: Mapping[Path, str] | None = None) -> dict[str, Path]:
    """Write ``audit.csv``, ``audit.parquet`` (when pyarrow is installed) and ``index.html``
    into ``folder``, each atomically and never over one of ``inputs``; returns what was
    written."""
    from onnx_lab.core.outputs import csv_writer, write_atomic  # on use: `onnx-lab audit --help`

    inputs = dict(inputs or {})

    def _atomic(target: Path, write: Any) -> None:
        write_atomic(target, write, sources=inputs, flag="the audit's table")

    out: dict[str, Path] = {}
    targets = {"csv": folder / "audit.csv", "html": folder / "index.html"}
    _atomic(targets["csv"], csv_writer(df))
    out["csv"] = targets["csv"]
    with contextlib.suppress(ImportError):
        import pyarrow  # noqa: F401 - the Parquet engine

        target = folder / "audit.parquet"
        _atomic(target, lambda p: df.to_parquet(p, index=False))
        out["parquet"] = target
    _atomic(targets["html"], html)
    out["html"] = targets["html"]
    return out
