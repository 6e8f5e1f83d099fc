"""remove_unused_initializers: drop initializers no node reads."""

from __future__ import annotations

from onnx_lab.core.model import LabModel
from onnx_lab.core.values import overridable
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass


def _unused(model: LabModel):
    for path, graph in model.index.graphs.items():
        for name, v in list(graph.initializers.items()):
            if v.uses() or v.is_graph_output() or overridable(v):
                continue
            yield path, graph, name, v


@register_pass("remove_unused_initializers")
class RemoveUnusedInitializers(LabPass):
    r"""Remove initializers that no node reads (graph inputs/outputs are kept).

    ### Unused initializers (`remove_unused_initializers`)

    Initializers no node reads (often left behind by other rewrites) are removed. Initializers that
    are also graph inputs or outputs are kept: they are part of the model's interface."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("unused_initializer",)
    presets = {"safe": (100,)}  # last of all (transforms/presets.py)

    no_match_reason = "no unused initializer"

    def find(self, model: LabModel) -> list[Match]:
        out = []
        for path, _, name, v in _unused(model):
            nb = int(v.const_value.nbytes) if v.const_value is not None else 0
            where = f" in {path}" if path else ""
            key = f"{path}/{name}" if path else name
            out.append(Match(f"{self.name}:{key}", "unused_initializer", self.name, [], key,
                             f"initializer {name!r}{where} is read by no node", 0, nb,
                             {"graph": path, "name": name}))
        return out

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        for m in matches:
            graph = model.index.graphs[m.data["graph"]]
            v = graph.initializers.get(m.data["name"])
            if v is not None:
                rw.drop_if_unused(v)
