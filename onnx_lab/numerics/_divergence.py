"""Where two models part: the first tensor out of tolerance whose inputs all agree
(``_first_divergence``), why it differs (``_blame``: its weights, its computation or its
inputs) and the first NaN/inf the reference does not hold. Importable from
:mod:`onnx_lab.numerics.compare`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab._pandas import pd
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import const_array, is_constant, weight_makers
from onnx_lab.numerics._weight_chain import ReadWeight, read_weight
from onnx_lab.numerics.align import (
    _attr_pairs,
    _const_equal,
    _opset,
    _same_attrs,
    _shape,
    attr_equal,
)
from onnx_lab.numerics.half import to_fp16_array
from onnx_lab.numerics.metrics import (
    rule_for,
    tensor_metrics,
    value_dtype,
)


def _data_inputs(node: ir.Node, idx: Any, makers: set[str]) -> list[str]:
    """The inputs of ``node`` that carry data, not weights."""
    return [v.name for v in node.inputs if v is not None and v.name
            and not is_constant(v, stored=True) and idx.producer.get(v.name) not in makers]


def _first_divergence(model: LabModel, layers: pd.DataFrame, outputs: pd.DataFrame
                      ) -> dict[str, Any] | None:
    """The first failing tensor of a node that computes on data and whose data inputs are all
    within tolerance.

    Weights computed by nodes (Constant, ConstantOfShape over constants...) come first in
    topological order but are not where data diverges: a differing weight is reported on the
    node that consumes it (see :func:`_blame`). Inputs that were not compared (fused away, no
    counterpart) stand for their own nearest compared ancestors.
    """
    idx = model.index
    status = dict(zip(layers["tensor"], layers["passed"].astype(bool)))
    makers = weight_makers(model)
    memo: dict[str, bool] = {}

    def ok(name: str, depth: int = 0) -> bool:
        if name in status:
            return status[name]
        if name in memo:
            return memo[name]
        nid = idx.producer.get(name)
        if nid is None or depth > 500:  # a graph input, initializer or outer value
            return True
        memo[name] = True  # cycle guard
        res = all(ok(n, depth + 1) for n in _data_inputs(idx.node(nid), idx, makers))
        memo[name] = res
        return res

    def found(row: Any) -> dict[str, Any]:
        return {"tensor": row.tensor, "node_id": row.node_id, "op_type": row.op_type,
                "max_abs": float(row.max_abs),
                "reaches_outputs": _reaches(model, row.node_id, outputs),
                "cand_node_id": row.cand_node_id if isinstance(row.cand_node_id, str)
                else None}

    failing = layers.loc[~layers["passed"].astype(bool)]
    for row in failing.itertuples(index=False):
        nid = row.node_id
        if not isinstance(nid, str) or nid not in idx.entries or nid in makers:
            continue
        if all(ok(n) for n in _data_inputs(idx.node(nid), idx, makers)):
            start = _two_ways_origin(nid, idx, makers, layers, ok)
            if start is None:
                return found(row)
            # its inputs agree only as one overflow shown two ways: they differ, and the
            # node that made them is where the models part (a Clip at 65504 whose max
            # became inf was passed over for the Div after it)
            origin, (inf_ref, inf_cand) = start
            div = found(origin)
            div["max_abs"] = math.inf  # an infinity against a finite value
            div["two_ways"] = {"inf_ref": inf_ref, "inf_cand": inf_cand,
                               "dtype": origin.cand_dtype, "tensor": row.tensor,
                               "node_id": nid, "op_type": row.op_type,
                               "max_abs": float(row.max_abs)}
            return div
    # A graph output made from weights alone (skl2onnx's ``class_labels``, an Identity of a
    # constant): no node computes on it, so its differing weight is the divergence (it was
    # "no first divergence" while the output failed).
    graph_outputs = {v.name for v in model.graph.outputs}
    for row in failing.itertuples(index=False):
        if row.tensor in graph_outputs and isinstance(row.node_id, str) \
                and row.node_id in idx.entries and row.node_id in makers:
            return found(row)
    return None


def _inf_counts(row: Any) -> tuple[int, int]:
    """(the reference's, the candidate's) infinities of a layers row."""
    def count(v: Any) -> int:
        return int(v) if isinstance(v, (int, float, np.number)) and v == v else 0
    return count(getattr(row, "inf_ref", 0)), count(getattr(row, "inf_cand", 0))


def _two_ways_origin(nid: str, idx: Any, makers: set[str], layers: pd.DataFrame,
                     ok: Any) -> tuple[Any, tuple[int, int]] | None:
    """(the layers row, its (reference, candidate) infinities) of the node where an input of
    ``nid`` that passed as one narrow-float overflow shown two ways began: a passing row
    whose sides hold different numbers of infinities (one side's inf facing the other's
    largest finite float16 value, 65504, of the same sign, which the metrics take for
    one overflow: onnxruntime's float16 Conv saturates at 65504 where another kernel gives
    inf), followed up to the first node whose own inputs hold no such row. In fresh
    sessions those values differ; where a node after them fails, they are where the models
    part: a Clip at 65504 whose max became inf gives inf where the reference's gives 65504,
    and the Div after it was blamed ('its inputs agree'). None when no input is such a
    row."""
    first: dict[str, Any] = {}
    for row in layers.itertuples(index=False):
        first.setdefault(row.tensor, row)

    def two_ways(name: str) -> Any:
        row = first.get(name)
        if row is None or not bool(row.passed):
            return None
        inf_r, inf_c = _inf_counts(row)
        return row if inf_r != inf_c else None

    found = None
    seen = {nid}
    while True:
        nxt = None
        for n in _data_inputs(idx.node(nid), idx, makers):
            row = two_ways(n)
            pid = idx.producer.get(n)
            if row is None or pid is None or pid in makers or pid in seen or \
                    row.node_id != pid or not all(
                        ok(m) for m in _data_inputs(idx.node(pid), idx, makers)):
                continue
            nxt = (row, pid)
            break
        if nxt is None:
            return found
        row, nid = nxt
        seen.add(nid)
        found = (row, _inf_counts(row))


def _nonfinite_rows(layers: pd.DataFrame) -> pd.DataFrame:
    """Layers where the candidate holds more NaN or inf values than the reference."""
    if not len(layers):
        return layers
    cand = layers["nan_cand"].fillna(0) + layers["inf_cand"].fillna(0)
    ref = layers["nan_ref"].fillna(0) + layers["inf_ref"].fillna(0)
    return layers.loc[cand > ref]


def _dtype_name(arr: Any) -> str:
    return value_dtype(arr)  # sees through sequences and maps; strings are "string"


def _blame(div: dict[str, Any], model: LabModel, cand: LabModel, layers: pd.DataFrame,
           ref_dict: Mapping[str, Any] | None, alignment: pd.DataFrame | None = None,
           same_runtime: bool = True) -> None:
    """Say why the divergent node differs, and name what to look at (in place on ``div``).

    ``weights``: one of its weight inputs differs — a tensor made by a Constant (or another
    weight-making) node whose comparison failed, or an initializer whose values differ from
    its counterpart's; the weight is named (``constant``, ``constant_tensor``,
    ``constant_max_abs``). ``computation``: its data inputs were all compared and agree.
    ``inputs``: a data input has no counterpart, so it may only receive different inputs
    (``compare(confirm=True)`` tells them apart), or the node is unchanged in the candidate
    (same op, attributes, dtypes and weights, run by the same providers) and amplifies an
    error its inputs carry within their tolerance (a BatchNormalization's per-channel gain
    after a quantized Conv); ``upstream`` then names the reference nodes
    where the uncompared inputs start (nodes whose own data inputs were compared: a node
    the candidate removed or computes from something else), with the alignment's reason.
    """
    idx = model.index
    rows = layers.set_index("tensor", drop=False)
    nid = div["node_id"]
    node = idx.node(nid)
    makers = weight_makers(model)
    for v in node.inputs:
        maker = idx.producer.get(v.name) if v is not None and v.name else None
        if maker in makers and v.name in rows.index and not bool(rows.loc[v.name, "passed"]):
            err = float(rows.loc[v.name, "max_abs"])
            div.update(cause="weights", constant=maker, constant_tensor=v.name,
                       constant_max_abs=err,
                       message=f"{node.op_type} {nid}: its input {v.name!r} "
                       f"({idx.node(maker).op_type} {maker}) differs, max_abs {err:.3g}"
                       + _two_ways_text(div, "; "))
            return
    if ref_dict is None:
        differing = _differing_weights(node, cand, div.get("cand_node_id"), model)
        if differing is not None:
            name, err, how, renamed = differing
            own = any(v is not None and v.name == name for v in node.inputs) or \
                "read through " in how
            cid = div.get("cand_node_id")
            whose = "its weight" if own else \
                f"its fused counterpart {cid!r} ({cand.index.node(cid).op_type}) reads weight"
            div.update(cause="weights", constant=name, constant_tensor=name,
                       constant_max_abs=err,
                       message=f"{node.op_type} {nid}: {whose} {name!r}"
                       + (f" (in the candidate {renamed!r})" if renamed else "")
                       + f", which differs{how}, "
                       f"max_abs {err:.3g}" + _two_ways_text(div, "; "))
            return
    # A graph input is the same feed on both sides (never a row of ``layers``): it agrees.
    fed = {v.name for v in model.graph.inputs}
    compared = all(n in rows.index or n in fed for n in _data_inputs(node, idx, makers))
    div["cause"] = "computation" if compared else "inputs"
    if compared and div.get("two_ways"):
        changed = "; ".join(x for x in (
            _input_order(node, cand, div.get("cand_node_id"), rows, fed),
            _attribute_changes(node, cand, div.get("cand_node_id"), model)) if x)
        div["message"] = (f"{node.op_type} {nid} computes differently: its inputs agree"
                          + _two_ways_text(div, ", ")
                          + (f"; in the candidate {changed}" if changed else ""))
        return
    overflow = _overflow(rows, div["tensor"])
    if overflow is not None:
        div["overflow"] = overflow
    if compared and overflow is not None:
        # what the candidate's node sets otherwise is named too: a LeakyRelu whose alpha went
        # from 0.01 to 1e5 read only "its arithmetic overflows on the way there"
        changed = "; ".join(x for x in (
            _input_order(node, cand, div.get("cand_node_id"), rows, fed),
            _attribute_changes(node, cand, div.get("cand_node_id"), model)) if x)
        div["message"] = (f"{node.op_type} {nid}: the candidate overflows {overflow['dtype']} "
                          f"here: its inputs agree, its output holds {_overflow_text(overflow)}"
                          + (f"; in the candidate {changed}" if changed else ""))
        return
    if compared:
        order = _input_order(node, cand, div.get("cand_node_id"), rows, fed)
        narrowed = _narrowed_feed(node, cand, div.get("cand_node_id"))
        if narrowed is not None:
            feed, cast, dtype = narrowed
            div["cause"] = "inputs"
            div["message"] = (
                f"{node.op_type} {nid}: its output differs ({_how_much(div)}); the candidate "
                f"reads graph input {feed!r} through a Cast to {dtype} ({cast!r}), whose "
                f"rounding a {node.op_type} passes on (a graph input is fed alike to both "
                "sides: no row of its own shows it)")
            return
        reshaped = _shape_change(rows, div["tensor"])
        if reshaped is not None:
            # a shape a node gives differently is made here, whatever its values (the same
            # ones, flattened: max_abs 0 read as an error carried in through an input)
            # (and what the candidate sets otherwise: a Transpose's perm, a Gather's axis
            # that made the shape were not named)
            changed = "; ".join(x for x in (
                order, _attribute_changes(node, cand, div.get("cand_node_id"), model)) if x)
            div["message"] = (f"{node.op_type} {nid} computes differently: its inputs agree, "
                              f"its output has another shape, {reshaped[1]} instead of "
                              f"{reshaped[0]}" + (f"; in the candidate {changed}" if changed
                                                  else ""))
            return
        # (inputs read in another order are another computation, whatever their errors)
        carried = _carried_error(node, idx, makers, rows, div) if order is None else None
        if carried is not None:
            name, err = carried
            div["cause"] = "inputs"
            how = (f"by no more than its input {name!r} does (max_abs {err:.3g})"
                   if div["max_abs"] <= err * (1 + 1e-6) else
                   f"by its input {name!r}'s error (max_abs {err:.3g}) and a rounding of its "
                   "own output (within 1e-3 of its scale)")
            div["message"] = (
                f"{node.op_type} {nid}: its output differs (max_abs {div['max_abs']:.3g}) "
                f"{how}, which a {node.op_type} cannot amplify: the error comes in through "
                "that input, within its own (larger) scale's tolerance there, out of this "
                "output's")
            return
        errs = [float(rows.loc[n, "max_abs"]) for n in _data_inputs(node, idx, makers)
                if n in rows.index]
        # an unchanged node fed inputs that differ (within their tolerance): their error,
        # amplified; fed identical ones it computes differently whatever it looks like
        if same_runtime and ref_dict is None and any(e > 0 for e in errs) and \
                order is None and _unchanged(node, cand, div.get("cand_node_id"), model):
            _amplified(div, node, model, cand, idx, makers, rows)
            return
        changed = "; ".join(x for x in (
            order, _attribute_changes(node, cand, div.get("cand_node_id"), model)) if x)
        div["message"] = (f"{node.op_type} {nid} computes differently: its inputs agree, its "
                          f"output differs ({_how_much(div)})"
                          + (f"; in the candidate {changed}" if changed else ""))
        return
    roots = _uncompared_roots(node, idx, makers, set(rows.index) | fed, alignment)
    div["upstream"] = [r["node_id"] for r in roots]
    where = ""
    if roots:
        first = roots[0]
        # the root's own change, where the candidate holds a node of that id and op (a Cast
        # whose 'to' changed: its output is no longer the same quantity, and which attribute
        # did it went unsaid)
        rid = first["node_id"]
        # a named node only: an unnamed one's id comes from its position, which a candidate
        # with a node removed before it gives to another node of that op
        rname = idx.node(rid).name
        same = bool(rname) and rid in cand.index.entries \
            and cand.index.node(rid).name == rname \
            and cand.index.node(rid).op_type == first["op_type"]
        changed = _attribute_changes(idx.node(rid), cand, rid, model) if same else ""
        where = (f"; upstream, the uncompared values start at the reference's "
                 f"{first['op_type']} {first['node_id']!r}: {first['reason']}"
                 + (f" (in the candidate {changed})" if changed else "")
                 + (f", and {len(roots) - 1} more (div['upstream'])" if len(roots) > 1 else ""))
    div["message"] = (f"{node.op_type} {nid}: its output differs"
                      + (f" (the candidate overflows {overflow['dtype']} here: "
                         f"{_overflow_text(overflow)})" if overflow is not None else "")
                      + "; an input of it has no "
                      "counterpart to compare, so it may only receive different inputs "
                      f"(compare(..., confirm=True) checks){where}")


def _two_ways_text(div: dict[str, Any], sep: str) -> str:
    """What a divergence found by :func:`_two_ways_origin` holds, and the failing node after
    it; "" for any other divergence."""
    t = div.get("two_ways")
    if not t:
        return ""
    dtype = t["dtype"] if t["dtype"] in _NARROW_MAX else "float16"
    top = f"{dtype}'s largest finite value ({_NARROW_MAX[dtype]:.6g}) or beyond it"
    held = (f"{t['inf_cand'] - t['inf_ref']} inf where the reference holds {top}"
            if t["inf_cand"] > t["inf_ref"] else
            f"{top} where the reference holds {t['inf_ref'] - t['inf_cand']} inf")
    return (f"{sep}its output holds {held}, which its row passes as one overflow shown two "
            f"ways (a float16 kernel that saturates at 65504 against one that gives inf); "
            f"{t['op_type']} {t['node_id']} after it turns them into a difference (its output "
            f"{t['tensor']!r} fails, max_abs {t['max_abs']:.3g})")


#: The largest finite value of the narrow floats a candidate may overflow.
_NARROW_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def _overflow(rows: pd.DataFrame, tensor: str) -> dict[str, Any] | None:
    """{dtype, inf_cand, max_ref} when ``tensor``'s candidate is a narrow float (float16,
    bfloat16) holding more infinities than the reference: the candidate overflows that float
    there. An fp16 overflow was blamed "computes differently: its inputs agree" while only the
    non-finite line below it said where the inf started. None otherwise."""
    if tensor not in rows.index or "inf_cand" not in rows.columns:
        return None
    row = rows.loc[tensor]
    dtype = row.get("cand_dtype")
    if dtype not in _NARROW_MAX:
        return None
    inf_c, inf_r = row.get("inf_cand"), row.get("inf_ref")
    inf_c = int(inf_c) if isinstance(inf_c, (int, float, np.number)) and inf_c == inf_c else 0
    inf_r = int(inf_r) if isinstance(inf_r, (int, float, np.number)) and inf_r == inf_r else 0
    if inf_c <= inf_r:
        return None
    top = row.get("max_ref")
    top = float(top) if isinstance(top, (int, float, np.number)) else math.nan
    return {"dtype": dtype, "inf_cand": inf_c - inf_r, "max_ref": top}


def _overflow_text(o: dict[str, Any]) -> str:
    """"8 inf where the reference's values reach 1.2e+05, beyond float16's largest finite
    value, 65504"; a reference within the range overflows inside the node's arithmetic."""
    top, limit = o["max_ref"], _NARROW_MAX[o["dtype"]]
    n = f"{o['inf_cand']} inf where the reference holds finite values"
    if not math.isfinite(top):
        return n
    if top > limit:
        return (f"{n}, up to {top:.3g}, beyond {o['dtype']}'s largest finite value "
                f"{limit:.6g}")
    return (f"{n}, up to {top:.3g} (within {o['dtype']}'s largest finite value {limit:.6g}: "
            "its arithmetic overflows on the way there)")


def _how_much(div: dict[str, Any]) -> str:
    """``max_abs 0.3``; NaN is a difference no number measures (another shape: "max_abs nan"
    read as a bug of the message)."""
    err = div.get("max_abs", math.nan)
    return f"max_abs {err:.3g}" if not math.isnan(err) else \
        "another shape or values no number measures: see its row's note"


def _unchanged(node: ir.Node, cand: LabModel, cand_node_id: str | None,
               ref: LabModel, equal: frozenset[str] = frozenset()) -> bool:
    """Whether the candidate's counterpart of ``node`` is the same computation: the same op
    of the same opset, attributes (no subgraphs), input and output dtypes, and the same
    constant inputs, exactly (a weight a node computes, a Reshape of an initializer, is not
    known to be the same, unless ``equal`` names it: a weight a node computes that the
    comparison measured identical, under the same name on both sides). Run by the same
    providers on the same inputs it gives the same output, so an output difference beyond its
    inputs' is their error amplified."""
    if not cand_node_id or cand_node_id not in cand.index.entries:
        return False
    other = cand.index.node(cand_node_id)
    domain = node.domain or ""
    if ref.ir.opset_imports.get(domain) != cand.ir.opset_imports.get(domain):
        return False
    # a weight a node computes (a Reshape of an initializer) is not known to be the same; a
    # Constant node's is stored, and compared below as an initializer is
    makers = weight_makers(ref), weight_makers(cand)
    for side, n, model in ((0, node, ref), (1, other, cand)):
        for v in n.inputs:
            if v is not None and v.name and not is_constant(v, stored=True) and \
                    model.index.producer.get(v.name) in makers[side] and v.name not in equal:
                return False
    if (other.op_type, other.domain) != (node.op_type, node.domain) or \
            len(other.inputs) != len(node.inputs) or len(other.outputs) != len(node.outputs):
        return False
    if not _same_attrs(node, other, ref, cand):  # (tensors and bodies: different)
        return False
    def dtype(model: LabModel, v: ir.Value) -> str | None:
        """Its dtype as inference gives it (a PaddlePaddle export declares none)."""
        info = model.types().get(v.name) if v.name else None
        return info.dtype if info is not None else None

    for a, b in zip(node.inputs, other.inputs):
        if (a is None) != (b is None):
            return False
        if a is None:
            continue
        if (a.name in equal or b.name in equal) and a.name != b.name:
            return False
        if dtype(ref, a) != dtype(cand, b):
            return False
        if (is_constant(a, stored=True) or is_constant(b, stored=True)) and not (
                is_constant(a, stored=True) and is_constant(b, stored=True)
                and _const_equal(a, b)):
            return False
    return all(dtype(ref, a) == dtype(cand, b) for a, b in zip(node.outputs, other.outputs))


def _amplified(div: dict[str, Any], node: ir.Node, model: LabModel, cand: LabModel, idx: Any,
               makers: set[str], rows: pd.DataFrame) -> None:
    """Blame an unchanged node's inputs (see :func:`_unchanged`): the input that carries the
    largest error relative to its scale, and upstream, the nearest reference node whose
    counterpart is not the same computation (the quantized Conv before a BatchNorm)."""
    nid = div["node_id"]
    errs = []
    for n in _data_inputs(node, idx, makers):
        if n in rows.index:
            err = float(rows.loc[n, "max_abs"])
            scale = abs(float(rows.loc[n, "max_ref"])) if "max_ref" in rows else 0.0
            errs.append((err / scale if scale > 0 and math.isfinite(scale) else err, n, err))
    div["cause"] = "inputs"
    worst = max(errs) if errs else None
    carried = (f": its input {worst[1]!r} differs by max_abs {worst[2]:.3g}, within that "
               f"tensor's own tolerance" if worst else "")
    origin = _changed_upstream(node, model, cand, idx, makers, rows)
    if origin is not None:
        div["upstream"] = [origin]
    div["message"] = (
        f"{node.op_type} {nid}: unchanged in the candidate (same op, attributes and weights), "
        f"its output differs ({_how_much(div)}) because its inputs do{carried}, "
        f"and this {node.op_type} amplifies it"
        + (f"; the difference starts upstream, at {idx.node(origin).op_type} {origin!r}, "
           "which the candidate computes otherwise" if origin is not None else "")
        + " (compare(..., confirm=True) checks the node on the reference's inputs)")


def _changed_upstream(node: ir.Node, model: LabModel, cand: LabModel, idx: Any,
                      makers: set[str], rows: pd.DataFrame, limit: int = 2000) -> str | None:
    """The nearest reference node above ``node`` whose candidate counterpart (by its output's
    row) is missing or not the same computation; None when none is found."""
    counterpart = {}
    if "cand_node_id" in rows:
        counterpart = {t: c for t, c in zip(rows["tensor"], rows["cand_node_id"])
                       if isinstance(c, str)}
    seen: set[str] = set()
    todo = list(_data_inputs(node, idx, makers))
    while todo and len(seen) < limit:
        name = todo.pop(0)
        pid = idx.producer.get(name)
        if pid is None or pid in seen or pid in makers:
            continue
        seen.add(pid)
        producer = idx.node(pid)
        if not _unchanged(producer, cand, counterpart.get(name), model):
            return pid
        todo.extend(_data_inputs(producer, idx, makers))
    return None


#: Ops whose inputs may come in any order for the same output (broadcasting included):
#: their operands reordered are the same computation, not inputs read in another order.
_COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor",
                          "Equal", "BitwiseAnd", "BitwiseOr", "BitwiseXor"})

#: Ops whose output differs from the reference's by at most what their data inputs differ
#: (non-expansive in the maximum norm: max|f(a) - f(b)| <= max|a - b|).
_NON_EXPANSIVE = frozenset({
    "Relu", "LeakyRelu", "Clip", "Identity", "Dropout", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
    "Transpose", "Slice", "Gather", "Expand", "Tile", "MaxPool", "GlobalMaxPool",
    "AveragePool", "GlobalAveragePool", "ReduceMax", "ReduceMin", "ReduceMean", "Abs", "Neg",
    "Tanh", "Sigmoid", "Max", "Min", "Concat", "Split", "SpaceToDepth", "DepthToSpace"})


def _narrowed_feed(node: ir.Node, cand: LabModel, cand_node_id: str | None
                   ) -> tuple[str, str, str] | None:
    """(graph input, Cast node id, dtype) when ``node`` cannot amplify an error and its
    candidate counterpart reads a graph input through a Cast to a narrower float (to_fp16
    keeps a KV cache's past in float32 at the interface and rounds it inside): that rounding
    is the error it passes on. Blamed on another input before, with an inequality that was
    false (0.000812 "no more than" 0.000482)."""
    if node.op_type not in _NON_EXPANSIVE or node.domain not in ("", "ai.onnx") or \
            not cand_node_id or cand_node_id not in cand.index.entries:
        return None
    feeds = {v.name for v in cand.graph.inputs}
    node_c = cand.index.entries[cand_node_id].node
    for _ in range(3):  # the output's own Cast back to float32: the node it casts
        if node_c.op_type != "Cast" or not node_c.inputs or node_c.inputs[0] is None:
            break
        pid = cand.index.producer.get(node_c.inputs[0].name)
        if pid is None:
            break
        node_c = cand.index.entries[pid].node
    if node_c.op_type != node.op_type:
        return None
    for v in node_c.inputs:
        pid = cand.index.producer.get(v.name) if v is not None and v.name else None
        cast = cand.index.entries[pid].node if pid is not None else None
        if cast is None or cast.op_type != "Cast" or cast.domain not in ("", "ai.onnx") or \
                not cast.inputs or cast.inputs[0] is None or cast.inputs[0].name not in feeds:
            continue
        to = cast.attributes.get_int("to", 0)
        if to in _NARROW_FLOATS:
            return cast.inputs[0].name, pid, _NARROW_FLOATS[to]
    return None


#: ONNX float types narrower than float32 (TensorProto's numbers).
_NARROW_FLOATS = {10: "float16", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz",
                  19: "float8e5m2", 20: "float8e5m2fnuz"}


def _shape_change(rows: pd.DataFrame, tensor: str) -> tuple[list, list] | None:
    """(reference shape, candidate shape) of ``tensor``'s row when they differ, else None."""
    if tensor not in rows.index or "cand_shape" not in rows.columns:
        return None
    ref, cand = rows.loc[tensor, "shape"], rows.loc[tensor, "cand_shape"]
    if not isinstance(ref, (list, tuple)) or not isinstance(cand, (list, tuple)):
        return None
    return (list(ref), list(cand)) if list(ref) != list(cand) else None


def _carried_error(node: ir.Node, idx: Any, makers: set[str], rows: pd.DataFrame,
                   div: dict[str, Any]) -> tuple[str, float] | None:
    """(input, its max_abs) when ``node`` is an op that cannot amplify an error and its
    output differs by no more than that input does (plus float16 rounding of the output):
    its inputs passed by their own scale (a Clip to 6 of a tensor up to 67 carries the same
    0.09), so the node computes nothing wrong. None otherwise."""
    if node.op_type not in _NON_EXPANSIVE or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "LeakyRelu" and abs(node.attributes.get_float("alpha", 0.01)) > 1:
        return None
    errs = [(n, float(rows.loc[n, "max_abs"])) for n in _data_inputs(node, idx, makers)
            if n in rows.index]
    if not errs:
        return None
    name, err = max(errs, key=lambda x: x[1])
    out_ref = float(rows.loc[div["tensor"], "max_ref"]) if div["tensor"] in rows.index else 0.0
    slack = 1e-3 * abs(out_ref) if math.isfinite(out_ref) else 0.0
    if math.isfinite(err) and div["max_abs"] <= err * (1 + 1e-6) + slack:
        return name, err
    return None


def _uncompared_roots(node: ir.Node, idx: Any, makers: set[str], compared: set[str],
                      alignment: pd.DataFrame | None, limit: int = 2000) -> list[dict[str, Any]]:
    """The reference nodes where ``node``'s uncompared data inputs start: walking up through
    tensors without a counterpart, the nodes whose own data inputs were all compared (or fed),
    nearest first, each with the alignment's reason for its output."""
    reasons: dict[str, str] = {}
    if alignment is not None and "reason" in alignment:
        reasons = {t: r for t, r in zip(alignment["tensor"], alignment["reason"])
                   if isinstance(r, str)}
    roots: list[dict[str, Any]] = []
    seen: set[str] = set()
    todo = [n for n in _data_inputs(node, idx, makers) if n not in compared]
    while todo and len(seen) < limit:
        name = todo.pop(0)
        pid = idx.producer.get(name)
        if pid is None or pid in seen:
            continue
        seen.add(pid)
        up = [n for n in _data_inputs(idx.node(pid), idx, makers) if n not in compared]
        if up:
            todo.extend(up)
        else:
            roots.append({"node_id": pid, "op_type": idx.node(pid).op_type, "tensor": name,
                          "reason": reasons.get(name, "no counterpart in the candidate")})
    return roots


def _input_order(node: ir.Node, cand: LabModel, cand_node_id: str | None,
                 rows: pd.DataFrame, fed: set[str]) -> str | None:
    """``inputs 0 and 1 swapped ('a' and 'b')`` when the candidate's counterpart of ``node``
    (the same op) reads the same tensors in another order: a Concat's parts, a Sub's or a
    Div's operands, a MatMul's, a Where's branches were blamed "computes differently: its
    inputs agree" with no word of the order. A data input is the same tensor as the
    candidate's its row is paired with (a graph input: the same name); a constant, the
    candidate's constant input of equal values. None when the order is the same or a tensor
    is not known on the other side."""
    if not cand_node_id or cand_node_id not in cand.index.entries:
        return None
    other = cand.index.node(cand_node_id)
    if (other.op_type, other.domain) != (node.op_type, node.domain) or \
            len(other.inputs) != len(node.inputs) or len(node.inputs) < 2:
        return None
    if node.op_type in _COMMUTATIVE and node.domain in ("", "ai.onnx"):
        # Add(b, a) is Add(a, b): an order a correct rewrite may choose, no other computation
        return None
    theirs = [v.name if v is not None else None for v in other.inputs]
    ours: list[str | None] = []
    for i, v in enumerate(node.inputs):
        if v is None or not v.name:
            ours.append(None)
        elif v.name in rows.index and isinstance(rows.loc[v.name, "cand_tensor"], str):
            ours.append(rows.loc[v.name, "cand_tensor"])
        elif v.name in fed:
            ours.append(v.name)
        elif is_constant(v, stored=True):
            # the candidate's equal constant, at the same position first
            same = [j for j in [i, *range(len(other.inputs))]
                    if other.inputs[j] is not None and is_constant(other.inputs[j], stored=True)
                    and _const_equal(v, other.inputs[j])]
            if not same:
                return None
            ours.append(theirs[same[0]])
        else:
            return None
    if ours == theirs or sorted(ours, key=str) != sorted(theirs, key=str):
        return None
    moved = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    names = [v.name if v is not None else "" for v in node.inputs]
    if len(moved) == 2:
        i, j = moved
        return f"inputs {i} and {j} swapped ({names[i]!r:.40} and {names[j]!r:.40})"
    # input k of the candidate is the reference's input order[k]
    order: list[int] = []
    for b in theirs:
        order.append(next(i for i, a in enumerate(ours) if a == b and i not in order))
    return f"its inputs read in another order: the reference's {order}"[:120]


def _attribute_changes(node: ir.Node, cand: LabModel, cand_node_id: str | None,
                       ref: LabModel | None = None) -> str:
    """What the candidate's counterpart of ``node`` sets otherwise, as text (``epsilon 1e-05
    -> 0.05``; its op when that differs), '' when nothing readable does: an epsilon, an axis
    or a Gelu's approximation changed were blamed "computes differently" with no word of
    which. Values are the model's (hostile): shown with repr, cut at 40 characters. An
    attribute that means the same on both sides is no change (:func:`~onnx_lab.numerics.
    align._attr_pairs`: an axis counted from the end or the start, a default written out or
    left out, in the node's opset; ``ref``, the reference model, gives ranks and the opset)."""
    if not cand_node_id or cand_node_id not in cand.index.entries:
        return ""
    other = cand.index.node(cand_node_id)
    if (other.op_type, other.domain) != (node.op_type, node.domain):
        return f"it is a {other.op_type!r}"[:80]
    out = []
    redefined = _redefined(node, other, ref, cand)
    for k, a, b, va, vb in _attr_pairs(node, other, ref, cand):
        if (a is not None and a.is_ref()) or (b is not None and b.is_ref()):
            continue
        if va is None and vb is None or attr_equal(va, vb):
            continue
        if k in ("to", "output_dtype", "dtype") and isinstance(va, int) \
                and isinstance(vb, int):  # a data type by its name: 'to' int32 -> bool
            va, vb = _type_code_name(va), _type_code_name(vb)
        out.append(f"{k!r:.40} {_shown(va)} -> {_shown(vb)}")
    more = f" and {len(out) - 3} more" if len(out) > 3 else ""
    attrs = (f"attribute{'s' if len(out) > 1 else ''} " + ", ".join(out[:3]) + more
             if out else "")
    return "; ".join(x for x in (redefined, attrs) if x)


def _redefined(node: ir.Node, other: ir.Node, ref: LabModel | None, cand: LabModel) -> str:
    """``opset 9 -> 13 (Softmax is defined anew in opset 13)`` when the two nodes' opsets
    hold different definitions of their op (the same attributes may then compute
    otherwise: Softmax's axis 1 on a rank-3 input normalizes over dims 1 and 2 up to opset
    12, over dim 1 alone from 13), '' otherwise or when unknown."""
    a, b = _opset(node, ref), _opset(other, cand)
    if a is None or b is None or a == b:
        return ""
    import onnx  # on use: only a divergence's wording needs the schemas

    try:
        since = [onnx.defs.get_schema(node.op_type, v, domain=node.domain or "").since_version
                 for v in (a, b)]
    except onnx.defs.SchemaError:
        return ""
    if since[0] == since[1]:
        return ""
    return f"opset {a} -> {b} ({node.op_type!r:.40} is defined anew in opset {max(since)})"


def _type_code_name(code: int) -> Any:
    """An ONNX data type code by its name (``'int32'``), the code itself when unknown."""
    try:
        return ir.DataType(code).name.lower()
    except ValueError:
        return code


def _shown(v: Any) -> str:
    """An attribute value for a message: floats at 6 digits (an epsilon stored as float32 read
    9.999999747378752e-06), the rest by repr, cut at 40 characters."""
    if v is None:
        return "unset"
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, tuple) and v and all(isinstance(x, float) for x in v):
        return ("(" + ", ".join(f"{x:.6g}" for x in v) + ")")[:40]
    return repr(v)[:40]


def _differing_weights(node: ir.Node, cand: LabModel, cand_node_id: str | None,
                       ref: LabModel | None = None
                       ) -> tuple[str, float, str, str | None] | None:
    """(name, max_abs, how, candidate's name) of the first constant input of ``node`` whose value differs from
    the same input of its counterpart in ``cand`` beyond the scale-aware rule of its dtype, or
    for weights of two float widths beyond the rounding to the narrower (``how`` then says
    so: " beyond its rounding to float16"; the candidate's name is None when it is the
    same)."""
    if not cand_node_id or cand_node_id not in cand.index.entries:
        return None
    other = cand.index.node(cand_node_id)
    if other.op_type != node.op_type or len(other.inputs) != len(node.inputs):
        # A fused counterpart (onnxruntime's Gemm for a MatMul+Add) holds the node's weights
        # under their names: the same name and shape is the same weight.
        inits = cand.graph.initializers
        pairs = [(a, inits.get(a.name)) for a in node.inputs
                 if a is not None and a.name and is_constant(a, stored=True)]
        if ref is not None:
            # and the weights of the nodes it fused with this one (a FusedConv standing for
            # the Relu holds the Conv's weight): by name in the reference
            r_inits = ref.graph.initializers
            pairs += [(r_inits.get(b.name), b) for b in other.inputs
                      if b is not None and b.name and is_constant(b, stored=True)
                      and all(b.name != a.name for a, _ in pairs if a is not None)]
    else:
        pairs = list(zip(node.inputs, other.inputs))
    for a, b in pairs:
        if a is None or b is None:
            continue
        # a weight the candidate holds under another name: the reference's name alone sent
        # the reader to a tensor that, in the candidate, still holds the old values
        renamed = b.name if a.name and b.name and a.name != b.name else None
        x, y = const_array(a, stored=True), const_array(b, stored=True)
        if x is None or y is None:
            # a weight behind a Cast from float16, a DequantizeLinear, a Reshape...: its
            # change read "computes differently: its inputs agree"
            found = _differing_read(read_weight(a, ref), read_weight(b, cand))
            if found is not None:
                return found
            continue
        if x.shape != y.shape:
            continue
        if a is _target(node) and b is _target(other) and \
                _resolved(node, x, ref) is not None and \
                _resolved(node, x, ref) == _resolved(other, y, cand):
            continue  # a Reshape target written with 0 or -1 for the dims it gives alike
        if x.dtype != y.dtype:
            # a float16 candidate of a float32 reference (to_fp16, or a converter's file)
            # holds its weights rounded: the same weight unless beyond that rounding. Skipped
            # before, so a planted weight read "computes differently: its inputs agree".
            if x.dtype.kind == "f" and y.dtype.kind == "f":
                err = _beyond_rounding(x, y)
                if err is not None:
                    narrow = min(x.dtype, y.dtype, key=lambda d: d.itemsize)
                    return a.name or "", err, f" beyond its rounding to {narrow}", renamed
            continue
        if x.dtype.kind not in "fiub":
            continue
        if x.dtype.kind == "f" and (np.isfinite(x) != np.isfinite(y)).any():
            # a stored infinity against a finite value differs: the metrics take a float16
            # inf facing 65504 for one overflow shown two ways (a kernel that saturates), and
            # no kernel made a weight (a Clip's max 65504 become inf was no weight change)
            return a.name or "", math.inf, "", renamed
        _name, rule = rule_for(_dtype_name(x), output=False)
        m = tensor_metrics(x, y, rule=rule, statistics=False)
        if not m["passed"]:
            return a.name or "", float(m["max_abs"]), "", renamed
    return None


def _differing_read(ra: ReadWeight | None, rb: ReadWeight | None
                    ) -> tuple[str, float, str, str | None] | None:
    """:func:`_differing_weights`' answer for two weights as their nodes read them, one of
    them at least through a chain (:func:`read_weight`): compared with the rounding each
    side's storage implies (float16 behind a Cast, a DequantizeLinear's step), never named for
    that rounding alone. The name is the reference's stored tensor; ``how`` says what the
    node reads it through."""
    if ra is None or rb is None:
        return None
    x, y = ra.values, rb.values
    if x.shape != y.shape or x.dtype.kind != "f" or y.dtype.kind != "f":
        return None
    renamed = rb.name if ra.name and rb.name and ra.name != rb.name else None
    notes = [f"read through {' -> '.join(ra.through)} on both sides"] \
        if ra.through and ra.through == rb.through else \
        [f"{'in the candidate ' if r is rb else ''}read through {' -> '.join(r.through)}"
         for r in (ra, rb) if r.through]
    if ra.step is not None or rb.step is not None:
        # a quantized side holds the weight rounded to a multiple of its step (half of it off
        # at most, on each quantized side), in the narrower float's rounding besides
        with np.errstate(over="ignore", invalid="ignore"):
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            diff = np.abs(x64 - y64)
            narrow = min((r.stored or r.values.dtype for r in (ra, rb)),
                         key=lambda d: d.itemsize)
            ulp = np.spacing(np.maximum(np.abs(x64), np.abs(y64)).astype(narrow))
            tol = 0.5 * ((ra.step or 0.0) + (rb.step or 0.0)) * (1 + 1e-3) + ulp
            same = (diff <= tol) | (np.isnan(x64) & np.isnan(y64)) | (x64 == y64)
        if bool(same.all()):
            return None
        q = ra if ra.step is not None else rb
        notes.insert(0, f"beyond its quantization to {q.qdtype}, step {q.step:.3g}")
        if ra.step is not None and rb.step is not None:
            # the stored scale or zero point that changed, by name: the integers may not have
            notes += [f"its {'scale' if i == 0 else 'zero point'} {n!r} differs"
                      for i, ((n, u), (_m, w)) in enumerate(zip(ra.scales, rb.scales))
                      if u.shape == w.shape and not np.array_equal(u, w, equal_nan=True)]
        finite = diff[np.isfinite(diff)]
        err = float(finite.max()) if finite.size and np.isfinite(diff[~same]).all() \
            else math.inf
        return ra.name, err, " (" + "; ".join(notes) + ")", renamed
    if ra.stored != rb.stored:
        # one side stored narrower (float16 behind a Cast): the other is it rounded, unless
        # beyond that rounding
        narrow = min((r.stored or r.values.dtype for r in (ra, rb)), key=lambda d: d.itemsize)
        xs, ys = (r.values.astype(narrow) if r.stored == narrow else r.values for r in (ra, rb))
        err = _beyond_rounding(xs, ys)
        if err is None:
            return None
        notes.insert(0, f"beyond its rounding to {narrow}")
        return ra.name, err, " (" + "; ".join(notes) + ")", renamed
    how = " (" + "; ".join(notes) + ")" if notes else ""
    if (np.isfinite(x) != np.isfinite(y)).any():
        return ra.name, math.inf, how, renamed
    _name, rule = rule_for((ra.stored or x.dtype).name, output=False)
    m = tensor_metrics(x, y, rule=rule, statistics=False)
    if m["passed"]:
        return None
    return ra.name, float(m["max_abs"]), how, renamed


def _target(node: ir.Node) -> ir.Value | None:
    """A Reshape's shape input, else None."""
    if node.op_type == "Reshape" and node.domain in ("", "ai.onnx") and len(node.inputs) > 1:
        return node.inputs[1]
    return None


def _resolved(node: ir.Node, target: np.ndarray, model: LabModel | None) -> list[int] | None:
    """The shape a Reshape gives its data input with ``target`` (0: the input's dim, -1: the
    rest, without ``allowzero``), where the data input's shape is known; None otherwise."""
    shape = _shape(node.inputs[0], model) if node.inputs else None
    if shape is None or any(d is None for d in shape) or target.ndim != 1 or \
            target.dtype.kind not in "iu" or node.attributes.get_int("allowzero", 0):
        return None
    dims = [int(shape[i]) if d == 0 and i < len(shape) else int(d)
            for i, d in enumerate(target.tolist())]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        return None
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        total = math.prod(shape)
        if rest == 0 or total % rest:
            return None
        dims[dims.index(-1)] = total // rest
    return dims if math.prod(dims) == math.prod(shape) else None


def _beyond_rounding(x: np.ndarray, y: np.ndarray) -> float | None:
    """max|x - y| when two float weights of different widths differ by more than the
    rounding of the wider one to the narrower dtype (one unit in the last place of the
    narrower, which any converter's rounding mode meets; float16 clamped into its range as
    onnxruntime's converter does); None when one is the other rounded."""
    wide, narrow = (x, y) if x.dtype.itemsize >= y.dtype.itemsize else (y, x)
    with np.errstate(over="ignore", invalid="ignore"):
        r = to_fp16_array(wide) if narrow.dtype == np.float16 else wide.astype(narrow.dtype)
        ulp = np.spacing(np.abs(r)).astype(np.float64)
        r64, n64 = r.astype(np.float64), narrow.astype(np.float64)
        same = (r64 == n64) | (np.abs(r64 - n64) <= ulp) | (np.isnan(r64) & np.isnan(n64))
    if bool(same.all()):
        return None
    diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
    finite = diff[np.isfinite(diff)]
    return float(finite.max()) if finite.size and not (~np.isfinite(diff) & ~same).any() \
        else math.inf


def _reaches(model: LabModel, node_id: str, outputs: pd.DataFrame) -> bool:
    """Whether a failing graph output depends on ``node_id``."""
    bad = set(outputs.loc[~outputs["passed"].astype(bool), "tensor"])
    if not bad:
        return False
    idx = model.index
    seen = {node_id}
    stack = [node_id]
    while stack:
        nid = stack.pop()
        if any(v.name in bad for v in idx.node(nid).outputs):
            return True
        for s in idx.successors(nid):
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return False
