"""fold_constants: evaluate subgraphs that depend only on constants, store the results as
initializers (guarded against folds that grow the model)."""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir

from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import value_type
from onnx_lab.core.units import format_bytes, itemsize
from onnx_lab.core.values import QUANTIZATION_OPS, foldable_nodes, type_only_dtype
from onnx_lab.transforms.base import LabPass, Match, Param, Rewrite, register_pass
from onnx_lab.transforms.passes._util import freed_bytes, nbytes

logger = logging.getLogger(__name__)

@register_pass("fold_constants")
class FoldConstants(LabPass):
    r"""Evaluate subgraphs that depend only on initializers/Constant nodes into initializers.

    ### Constant folding (`fold_constants`)

    A node whose inputs are all constants (initializers, Constant nodes, or results of other such
    nodes) computes the same value on every run. The pass evaluates each such subgraph once with
    `onnx.reference.ReferenceEvaluator`, stores the results as initializers under the same tensor
    names, and removes the nodes (and the inputs nothing else reads).

    Example: sample:convnet stores its head weight flat and reshapes it at run time:
    `Reshape(weight_flat[160], [10, 16])` becomes the initializer `[10, 16]` itself.

    **The guard.** Folding can *grow* a model: `Expand(1.0, [4096, 4096])` is 4 bytes before and
    64 MB after. Folds are applied while the step's total growth (bytes produced minus bytes freed)
    stays within `max_growth_bytes` (default 16 MB); the others are refused, and the result's notes
    say so. An Identity of a constant is left to `eliminate_identity`: folding it would copy the
    weight.

    A `CastLike(c, x)` of a constant `c` folds when `x` declares its element type: it reads `x`
    for that type alone (the dynamo exporter writes a Conv without bias as
    `Conv(x, w, Expand(CastLike(0, x), ...))`; folded, the bias is a constant and
    `fuse_conv_bn` fuses the BatchNormalization after it).

    **Never folded.** Random ops (RandomNormal, RandomUniform, Bernoulli, Multinomial…), Dropout,
    nodes with bodies (If/Loop/Scan), and ops in non-default domains — their values are not
    fixed, or not ours to compute. A subgraph that ends in a graph output keeps its node.

    **Quantized weights stay quantized.** `DequantizeLinear(int8 weight)` and
    `QuantizeLinear(float weight)` compute constants, but they are the model's quantization:
    onnxruntime and TensorRT fuse the Q/DQ pattern around a Conv or MatMul into int8 kernels, and
    a folded weight would be stored in float (4x its int8 bytes, 8x int4) and run in float. The
    numbers would not change, so no verification could see it: the pass keeps those nodes (and
    what reads them) unless `fold_quantization=True` asks to dequantize the weights."""

    # The pattern names its matches carry (lab.patterns(), explain(pattern)).
    patterns = ("constant_subgraph",)
    presets = {"safe": (40,)}  # after the clean-up, before the fusions (transforms/presets.py)

    params = (Param("max_growth_bytes", int, 16 << 20,
                    "refuse a fold that grows the model by more than this many bytes"),
              Param("fold_quantization", bool, False,
                    "also fold QuantizeLinear/DequantizeLinear of stored weights (stores them "
                    "dequantized, in float: the model grows and runs in float)"))
    no_match_reason = "no node depends only on constants"

    def find(self, model: LabModel) -> list[Match]:
        fold = foldable_nodes(model)
        quant = [nid for nid, n in fold.values() if n.op_type in QUANTIZATION_OPS]
        if quant and not self.options["fold_quantization"]:
            others = f" and {len(quant) - 1} other Q/DQ nodes" if len(quant) > 1 else ""
            self.skip(quant[0], f"it{others} quantize stored weights: kept, since folding would "
                      "store the weights in float and undo the model's quantization "
                      "(fold_quantization=True folds them)")
            fold = foldable_nodes(model, keep=QUANTIZATION_OPS)
        types = None
        out = []
        orders: dict[int, dict[int, int]] = {}  # per graph, made once (not per match)
        for nid, node in fold.values():
            frontier = [o for o in node.outputs
                        if any(id(u.node) not in fold for u in o.uses())]
            if any(o.is_graph_output() for o in node.outputs):
                self.skip(nid, "its output is a graph output (kept as a node)")
                continue
            if not frontier:
                continue  # only feeds other foldable nodes: part of their match
            members = self._ancestors(node, fold, orders)
            if all(m.op_type in ("Identity", "Constant") for m in members):
                # Folding would copy the constant (exporters share weights through Identity);
                # eliminate_identity removes the node without duplicating data.
                self.skip(nid, f"it only copies the constant {node.inputs[0].name!r} "
                               "(eliminate_identity removes it without duplicating data)")
                continue
            if types is None:
                types = model.types()
            produced = 0
            for o in frontier:
                info = value_type(model, o, types)
                n = info.numel if info is not None else None
                produced = None if n is None or produced is None else \
                    produced + int(n * (itemsize(info.dtype) or 4))
            consts = [v for m in members for v in m.inputs]
            freed = freed_bytes(consts, members) + sum(
                nbytes(o) for m in members if m.op_type == "Constant" for o in m.outputs)
            saving = freed - produced if produced is not None else 0
            ids = [nid] + [model.index.node_id(m) for m in members if m is not node]
            limit = self.options["max_growth_bytes"]
            desc = (f"{node.op_type} {nid} depends only on constants"
                    + (f" ({len(members)} nodes)" if len(members) > 1 else "")
                    + ": its result becomes an initializer")
            if produced is not None and -saving > limit:
                desc += f"; folding would grow the model by {format_bytes(-saving)}, over the limit"
            out.append(Match(f"{self.name}:{nid}", "constant_subgraph", self.name, ids, nid,
                             desc, len(members), saving,
                             {"nodes": members, "frontier": frontier, "freed": freed,
                              "produced": produced}))
        return out

    @staticmethod
    def _ancestors(node: ir.Node, fold: dict[int, tuple[str, ir.Node]],
                   orders: dict[int, dict[int, int]] | None = None) -> list[ir.Node]:
        """``node`` and the foldable/Constant nodes it depends on, in topological order."""
        seen: dict[int, ir.Node] = {}
        stack = [node]
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen[id(n)] = n
            for v in n.inputs:
                p = v.producer() if v is not None else None
                if p is not None and (id(p) in fold or p.op_type == "Constant"):
                    stack.append(p)
        g = node.graph
        order = (orders or {}).get(id(g)) if g is not None else {}
        if order is None:
            order = {id(n): i for i, n in enumerate(g)}
            if orders is not None:
                orders[id(g)] = order
        return sorted(seen.values(), key=lambda n: order.get(id(n), 0))

    def _evaluate(self, model: LabModel, nodes: list[ir.Node], outputs: list[ir.Value]
                  ) -> list[np.ndarray]:
        """Run the small subgraph with onnx's reference evaluator (no inputs, no types
        needed, any standard op)."""
        import onnx
        from onnx.reference import ReferenceEvaluator

        inits = {}
        for n in nodes:
            for v in n.inputs:
                if v is not None and v.is_initializer() and v.name not in inits:
                    # From the values, not serialize_tensor: external tensors would stay
                    # references to files the evaluator cannot resolve.
                    inits[v.name] = onnx.numpy_helper.from_array(v.const_value.numpy(), v.name)
        graph = onnx.helper.make_graph(
            [self._serialized(n) for n in nodes], "fold", [],
            [onnx.helper.make_empty_tensor_value_info(o.name) for o in outputs],
            list(inits.values()))
        opsets = [onnx.helper.make_opsetid(d, v) for d, v in model.ir.opset_imports.items()]
        proto = onnx.helper.make_model(graph, opset_imports=opsets)
        proto.ir_version = model.ir.ir_version
        res = ReferenceEvaluator(proto).run(None, {})
        return [np.asarray(r) if not isinstance(r, np.ndarray) else r for r in res]

    @staticmethod
    def _serialized(node: ir.Node):
        """``node`` as a NodeProto; a CastLike whose target is a computed value becomes the
        Cast to its declared type (the evaluator has only the constants)."""
        import onnx

        dtype = type_only_dtype(node)
        if dtype is None:
            return ir.serde.serialize_node(node)
        cast = onnx.helper.make_node("Cast", [node.inputs[0].name], [node.outputs[0].name],
                                     to=int(dtype))
        # the CastLike's own attributes (saturate, opset 19) are Cast's too: without them a
        # saturate=0 cast to float8 folded to the saturated value (448) instead of NaN
        cast.attribute.extend(a for a in ir.serde.serialize_node(node).attribute
                              if a.name != "to")
        return cast

    def _evaluate_all(self, model: LabModel, matches: list[Match]) -> dict[int, list]:
        """The arrays of every match in one evaluator run (an evaluator per match costs
        ~0.5 ms to build: light ResNet-50 has 168 matches), keyed by id(match); {} when that
        run fails (each match is then evaluated alone, and its own failure reported)."""
        if len(matches) < 2:
            return {}
        nodes: dict[int, ir.Node] = {}
        for m in matches:
            for n in m.data["nodes"]:
                nodes.setdefault(id(n), n)
        graph = model.ir.graph
        order = {id(n): i for i, n in enumerate(graph)}
        outputs = list({id(o): o for m in matches for o in m.data["frontier"]}.values())
        try:
            arrays = self._evaluate(model, sorted(nodes.values(), key=lambda n: order[id(n)]),
                                    outputs)
        except Exception as e:  # noqa: BLE001 - any failure: each match alone
            logger.debug("batched fold evaluation failed (%s)", e)
            return {}
        got = {id(o): a for o, a in zip(outputs, arrays)}
        return {id(m): [got[id(o)] for o in m.data["frontier"]] for m in matches}

    @staticmethod
    def _refusal(anchor: str, growth: int, grown: int, limit: int) -> str:
        before = f" after {format_bytes(grown)} from earlier folds" if grown > 0 else ""
        return (f"fold of {anchor} refused: it would grow the model by {format_bytes(growth)}{before} "
                f"(> max_growth_bytes={limit})")

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        # The limit bounds the growth of the whole step, not of each fold alone.
        limit = self.options["max_growth_bytes"]
        grown = 0
        applied: list[ir.Node] = []
        renames: list[tuple[ir.Value, str, ir.Node]] = []
        # Matches whose result is known to fit the limit alone are evaluated together
        # (the others, sized by evaluation only, one by one after the guard below).
        graph = model.ir.graph
        small = [m for m in matches if m.data["produced"] is not None
                 and m.data["produced"] - m.data["freed"] <= limit
                 and all(n.graph is graph for n in m.data["nodes"])]
        evaluated = self._evaluate_all(model, small)
        for m in matches:
            nodes, frontier = m.data["nodes"], m.data["frontier"]
            if any(n.graph is None for n in nodes):
                continue
            produced = m.data["produced"]
            if produced is not None and grown + produced - m.data["freed"] > limit:
                rw.notes.append(self._refusal(m.anchor, produced - m.data["freed"], grown,
                                              limit))
                continue
            try:
                arrays = evaluated.pop(id(m), None) or self._evaluate(model, nodes, frontier)
            except Exception as e:  # noqa: BLE001 - any evaluator failure means "do not fold"
                rw.notes.append(f"fold of {m.anchor} skipped: evaluation failed "
                                f"({type(e).__name__}: {str(e).splitlines()[0][:200]})")
                continue
            if any(a.dtype == object for a in arrays):
                rw.notes.append(f"fold of {m.anchor} skipped: it yields non-tensor values")
                continue
            growth = sum(a.nbytes for a in arrays) - m.data["freed"]
            if grown + growth > limit:
                rw.notes.append(self._refusal(m.anchor, growth, grown, limit))
                continue
            grown += growth
            for o, arr in zip(frontier, arrays):
                tmp = rw.add_initializer(model.ir.graph, f"{o.name}__folded", arr)
                o.replace_all_uses_with(tmp)
                renames.append((tmp, o.name, o.producer()))
            applied.extend(n for n in nodes if all(n is not a for a in applied))
        if not applied:
            return
        # Drop the evaluated nodes nothing reads any more (a shared ancestor may still feed a
        # node that was not folded).
        dead = {id(n): n for n in applied}
        changed = True
        while changed:
            changed = False
            for k, n in list(dead.items()):
                if any(o.is_graph_output() or any(id(u.node) not in dead for u in o.uses())
                       for o in n.outputs):
                    del dead[k]
                    changed = True
        inputs = [v for n in dead.values() for v in n.inputs]
        rw.remove(list(dead.values()))
        for v in inputs:
            rw.drop_if_unused(v)
        for tmp, name, producer in renames:
            if producer is not None and producer.graph is None:
                # The producer is gone: the folded tensor takes over the original name.
                old = next((o for o in producer.outputs if o.name == name), None)
                if old is not None:
                    old.name = None
                tmp.name = name
        rw.notes.append(f"{len(renames)} tensor(s) folded into initializers")
