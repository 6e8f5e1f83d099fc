"""fuse_transposes: Transpose pairs that cancel are removed, pairs that compose become one."""

from __future__ import annotations

import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.passes._util import alive, is_std, match, names_of, perm_of, users, walk
from onnx_lab.transforms.passes.eliminate_identity import bypass_blocker


def compose(p1: list[int], p2: list[int]) -> list[int]:
    """Transpose(Transpose(x, p1), p2) == Transpose(x, p) with p[i] = p1[p2[i]]."""
    return [p1[i] for i in p2]


@register_pass("fuse_transposes")
class FuseTransposes(LabPass):
    """Remove Transpose pairs that cancel and merge pairs that compose into one Transpose."""

    no_match_reason = "no Transpose directly follows another Transpose"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        used: set[int] = set()
        for nid, t2 in walk(model):
            if not is_std(t2, "Transpose"):
                continue
            x = t2.inputs[0]
            t1 = x.producer() if x is not None else None
            if t1 is None or not is_std(t1, "Transpose") or id(t1) in used:
                continue
            fid = model.index.node_id(t1)
            if x.is_graph_output():
                self.skip(fid, f"its output {x.name!r} is a graph output")
                continue
            others = [u for u in users(x) if u is not t2]
            if others:
                self.skip(fid, f"its output is also read by {names_of(model, others)}")
                continue
            p1, p2 = perm_of(model, t1), perm_of(model, t2)
            if p1 is None or p2 is None:
                self.skip(fid, "the rank is unknown and a perm is implicit")
                continue
            p = compose(p1, p2)
            if p == sorted(p):
                why = bypass_blocker(t2, src=t1.inputs[0])
                if why:
                    self.skip(fid, why)
                    continue
                out.append(match(self.name, "transpose_cancel", model, t1, [t2],
                                 f"{fid} ({p1}) and {nid} ({p2}) cancel", 2, perm=p))
            else:
                out.append(match(self.name, "transpose_merge", model, t1, [t2],
                                 f"{fid} ({p1}) then {nid} ({p2}) is one Transpose {p}", 1,
                                 perm=p))
            used.update((id(t1), id(t2)))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            t1, t2 = m.data["nodes"][:2]
            if not alive(t1, t2):
                continue
            src = t1.inputs[0]
            t2.replace_input_with(0, src)
            if m.pattern == "transpose_cancel":
                if not rw.bypass(t2):
                    t2.replace_input_with(0, t1.outputs[0])  # undo: keep the pair
                    continue
            else:
                t2.attributes["perm"] = ir.AttrInt64s("perm", m.data["perm"])
                rw.record(t2, [t1, t2])
            rw.remove(t1)
