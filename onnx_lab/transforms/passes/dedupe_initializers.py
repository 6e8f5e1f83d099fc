"""dedupe_initializers: initializers with the same dtype, shape and bytes are merged."""

from __future__ import annotations

import hashlib

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel, mapped_briefly
from onnx_lab.core.values import overridable
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import users


def _groups(model: LabModel) -> list[list[ir.Value]]:
    """Groups (2+) of main-graph initializers with equal dtype, shape and bytes."""
    by_meta: dict[tuple, list[ir.Value]] = {}
    for v in model.ir.graph.initializers.values():
        t = v.const_value
        if t is None or overridable(v) or v.is_graph_output():
            continue
        by_meta.setdefault((t.dtype, tuple(t.shape.numpy()), t.nbytes), []).append(v)
    out: list[list[ir.Value]] = []
    for same_meta in by_meta.values():
        if len(same_meta) < 2:
            continue
        # Read in full only where dtype/shape/size and a sample of the values agree: most
        # weights differ by shape or in their first values (reading and hashing 48 distinct
        # 64 MB external weights took 3.7 s and mapped 3 GB).
        by_probe: dict[bytes | None, list[ir.Value]] = {}
        for v in same_meta:
            by_probe.setdefault(_probe(v.const_value), []).append(v)
        for vals in by_probe.values():
            if len(vals) > 1:
                out.extend(_same_bytes(vals))
    return out


def _probe(t: ir.TensorProtocol) -> bytes | None:
    """A few KB sampled across the tensor (None when it cannot be sampled)."""
    # External data is a memory map: each sampled page costs a read-ahead, so few samples,
    # and a map this call opened is closed again (as weight_stats does).
    with mapped_briefly(t):  # no view of the map survives _sample
        try:
            return _sample(t.numpy())
        except Exception:  # noqa: BLE001 - strings, packed 4-bit types...: hash them in full
            return None


def _sample(array: np.ndarray) -> bytes:
    a = np.asarray(array).reshape(-1)
    step = max(1, a.size // 16)
    return b"".join(np.ascontiguousarray(p).view(np.uint8).tobytes()
                    for p in (a[:256], a[::step][:16], a[-256:]))


def _same_bytes(vals: list[ir.Value]) -> list[list[ir.Value]]:
    """Groups (2+) of ``vals`` whose bytes are identical."""
    by_hash: dict[str, list[ir.Value]] = {}
    for v in vals:
        t = v.const_value
        with mapped_briefly(t):
            try:
                digest = hashlib.sha256(t.tobytes()).hexdigest()
            except Exception:  # noqa: BLE001 - unreadable external data: leave it alone
                continue
        by_hash.setdefault(digest, []).append(v)
    return [g for g in by_hash.values() if len(g) > 1]


@register_pass("dedupe_initializers")
class DedupeInitializers(LabPass):
    r"""Merge initializers that hold identical data (same dtype, shape and bytes).

    ### Duplicate initializers (`dedupe_initializers`)

    Initializers with the same dtype, shape and bytes (compared by SHA-256 of the data, only
    within groups whose dtype and shape already agree) are merged: readers of the copies read the
    first one and the copies are removed. Tied embeddings exported twice are the typical case."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("duplicate_initializer",)

    no_match_reason = "no two initializers hold the same data"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        idx = model.index
        for group in _groups(model):
            keep, dups = group[0], group[1:]
            readers = [idx.node_id(n) for v in dups for n in users(v)]
            nb = sum(int(v.const_value.nbytes) for v in dups)
            out.append(Match(f"{self.name}:{keep.name}", "duplicate_initializer", self.name,
                             readers, keep.name,
                             f"{', '.join(repr(v.name) for v in dups)} hold the same data as "
                             f"{keep.name!r}", 0, nb, {"keep": keep, "dups": dups}))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            keep = m.data["keep"]
            for v in m.data["dups"]:
                v.replace_all_uses_with(keep)
                rw.drop_if_unused(v)
