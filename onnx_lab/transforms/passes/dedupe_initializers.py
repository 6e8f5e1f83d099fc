"""dedupe_initializers: initializers with the same dtype, shape and bytes are merged."""

from __future__ import annotations

import hashlib

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, overridable, register_pass
from onnx_lab.transforms.passes._util import users


def _groups(model: LabModel) -> list[list[ir.Value]]:
    """Groups (2+) of main-graph initializers with equal dtype, shape and bytes."""
    by_meta: dict[tuple, list[ir.Value]] = {}
    for v in model.ir.graph.initializers.values():
        t = v.const_value
        if t is None or overridable(v) or v.is_graph_output():
            continue
        by_meta.setdefault((t.dtype, tuple(t.shape.numpy()), t.nbytes), []).append(v)
    out: list[list[ir.Value]] = []
    for vals in by_meta.values():
        if len(vals) < 2:
            continue
        # Hash only where dtype/shape/size already agree (most weights are unique by shape).
        by_hash: dict[str, list[ir.Value]] = {}
        for v in vals:
            try:
                digest = hashlib.sha256(v.const_value.tobytes()).hexdigest()
            except Exception:  # noqa: BLE001 - unreadable external data: leave it alone
                continue
            by_hash.setdefault(digest, []).append(v)
        out.extend(g for g in by_hash.values() if len(g) > 1)
    return out


@register_pass("dedupe_initializers")
class DedupeInitializers(LabPass):
    """Merge initializers that hold identical data (same dtype, shape and bytes)."""

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
