"""remove_initializer_inputs: initializers listed as graph inputs become plain weights."""

from __future__ import annotations

from onnx_lab.core.model import LabModel
from onnx_lab.core.values import overridable
from onnx_lab.transforms.base import LabPass, Match, Rewrite, register_pass
from onnx_lab.transforms.matcher import users


@register_pass("remove_initializer_inputs")
class RemoveInitializerInputs(LabPass):
    r"""Stop listing initializers as graph inputs, so passes and runtimes treat them as constants.

    Exports with ``keep_initializers_as_inputs=True`` (IR >= 4) list every weight as an input a
    caller may override: neither onnx_lab's passes nor onnxruntime fold or fuse what reads
    them. Removing the entries changes the model's interface (those inputs can no longer be
    fed), never its values, which is why it is not in the ``safe`` preset.

    ### Initializers listed as inputs (`remove_initializer_inputs`)

    From IR version 4 on, an initializer that is also listed among the graph inputs is only a
    default value: a caller may feed another tensor under that name. `torch.onnx.export(...,
    keep_initializers_as_inputs=True)` exports every weight this way, and then no optimizer
    (onnx_lab's passes, onnxruntime's constant folding and fusions) may treat the weights as
    constants. Removing the input entries makes them plain weights. The values do not change; the
    interface does (those names can no longer be fed), so the pass is not in the `safe` preset.
    IR < 4 required the listing and treated the initializers as constants: nothing to do there."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("initializer_input",)

    no_match_reason = "no initializer is listed as a graph input (IR >= 4)"

    def find(self, model: LabModel) -> list[Match]:
        g = model.graph
        names = [v.name for v in g.inputs if v.name in g.initializers
                 and overridable(g.initializers[v.name])]
        if not names:
            return []
        idx = model.index
        readers = list(dict.fromkeys(idx.node_id(n) for name in names
                                     for n in users(g.initializers[name])))
        shown = ", ".join(repr(n) for n in names[:3]) + (" ..." if len(names) > 3 else "")
        # One match for the whole interface: removing a few entries would leave it half done.
        return [Match(f"{self.name}:graph", "initializer_input", self.name, readers,
                      names[0], f"{len(names)} initializer(s) are also graph inputs ({shown}): "
                      "callers may override them, so nothing that reads them folds or fuses",
                      0, 0, {"names": names})]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        g = model.graph
        for m in matches:
            for name in m.data["names"]:
                v = g.initializers.get(name)
                if v is not None and v.is_graph_input():
                    g.inputs.remove(v)
                    rw.modified = True
