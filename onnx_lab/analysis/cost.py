"""Static cost model: FLOPs, MACs, parameters and bytes per node, peak activation memory, roofline.

Counts come from the inferred shapes (``LabModel.types``) and each op's attributes.

- ``macs``: multiply-accumulates of the contraction ops only — Conv/ConvInteger/QLinearConv
  (``out_elems * Cin/group * prod(kernel)``, the bias not included), ConvTranspose
  (``in_elems * Cout/group * prod(kernel)``), Gemm and MatMul (``M * N * K``, batched and
  broadcast), Einsum (the index product), attention (QK^T and PV, plus packed projections) and
  RNN/LSTM/GRU (every time step). Every other op has 0 MACs: bias adds, activations,
  normalizations (BatchNormalization included), pools, LRN, Softmax, reductions. This is
  onnxsim's definition (``ModelInfo.macs``: equal on ResNet-50), not onnx-tool's.
- ``flops``: every op's arithmetic: ``2 * MACs`` plus the bias adds, and per element the
  factors of ``_ELEMENTWISE`` (1 for add/compare/relu..., Sigmoid/Tanh 4, Gelu 8),
  ``_NORM`` (LayerNorm 8...), ``_SOFTMAX`` (5), ``_REDUCE`` (per input element), pooling
  windows (one per window element of every output), LRN ``2*size+3``, Resize (linear
  ``2*2^k-1``, cubic ``2*4^k-1`` for k resized axes, nearest 0). Data-movement ops (Reshape,
  Transpose, Gather, Concat, Cast...) cost 0 FLOPs.
- ai.onnx.ml ops (scikit-learn, LightGBM, XGBoost exports) have rules of their own: tree
  ensembles count comparisons per tree × depth; linear models and SVMs their matmul; encoders
  and scalers are element-wise; ZipMap and the map ops move data (said in ``note``). Their
  params are the numbers they learned, held in attributes: a tree's thresholds (branch nodes)
  and leaf weights, linear and SVM coefficients, a scaler's offsets and scales.
- ``macs_onnx_tool``: onnx-tool 1.0.1's "MACs", for comparing with it: it counts the
  arithmetic of every op as MACs, each operation weighed (add, multiply, compare 1; divide 4;
  sqrt 24; exp 32; log 43), and adds Conv/Gemm bias adds (see ``_onnx_tool_macs``). On the
  onnx package's light CNNs its totals are 0.2% (VGG-19) to 88% (ShuffleNet) above ``macs``,
  while the Conv/Gemm counts agree within 0.74%.

An op without a formula, or whose shapes are unknown, is reported as unknown (NaN and
``known`` False), never as zero.

Why our own: onnxsim's ModelInfo counts only the contraction ops and gives no per-node table;
onnx-tool counts unknown ops as zero and miscounts LSTM/GRU (it ignores the sequence length).

Example:
    >>> c = onnx_lab.open("sample:convnet").cost()
    >>> c.total["macs"], c.nodes.sort_values("flops", ascending=False).head()
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.analysis._counters import (
    _CONTROL_OPS,
    _COUNTERS,
    _ELEMENTWISE,
    _MOVE_OPS,
    _NORM,
    _REDUCE,
    _SOFTMAX,
    _concrete,
    _Ctx,
    _generic,
    _nbits_note,
    _prod,
    _weights_held,
    ml_params,
)
from onnx_lab.analysis._onnx_tool import _onnx_tool_macs, _onnx_tool_total, _or_nan
from onnx_lab.analysis.roofline import Roofline, roofline
from onnx_lab.core._fold import fold_values
from onnx_lab.core.branches import branch_switches
from onnx_lab.core.limits import liveness
from onnx_lab.core.llm import decoder_io
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import TensorInfo, type_at
from onnx_lab.core.source import resolve
from onnx_lab.core.source_map import group_by_module, module_at
from onnx_lab.core.units import itemsize
from onnx_lab.core.values import constant_tensor, is_constant
from onnx_lab.errors import CacheError, InputError
from onnx_lab.runtime.feeds import cache_switch_values, resolve_input_shapes, widened_mask

# The last four come from onnx_lab.analysis.generation through __getattr__ (at the end).
__all__ = ["cost", "Cost", "Roofline", "NODE_COLUMNS", "itemsize",  # noqa: F822
           "kv_cache_bytes", "generation_cost", "GenerationCost", "PHASE_COLUMNS"]

NODE_COLUMNS = ["node_id", "graph", "op_type", "domain", "calls", "flops", "macs", "params",
                "param_bytes", "input_bytes", "output_bytes", "intensity", "known", "note",
                "macs_onnx_tool"]


@dataclass
class Cost:
    """Result of :func:`cost`.

    Attributes:
        nodes: one row per node (all graphs): node_id, graph, op_type, domain, calls (times
            the node runs per model run: 1 in the main graph, × a Loop's constant trip count
            or a Scan's static length inside their bodies), flops, macs, input_bytes,
            output_bytes (per model run: per call × calls), params (elements of weight
            inputs, and of the learned attributes of ONNX-ML ops: a tree's thresholds and
            leaf weights, linear and SVM coefficients, a scaler's offsets), param_bytes, intensity (flops per byte moved), known (False: flops/macs
            are NaN), note, macs_onnx_tool (onnx-tool 1.0.1's count, per model run; NaN for
            an op outside its rules here or of unknown shapes).
        memory: per main-graph node in topological order: node_id, live_bytes (activations
            alive while it runs).
        total: flops, macs, params, param_bytes (unique weights), activation_bytes (all node
            outputs), peak_activation_bytes, peak_node, nodes, unknown_nodes, unknown_ops,
            macs_onnx_tool (the sum of the column) and macs_onnx_tool_missing (op types it
            leaves out).
        notes: caveats (unknown sizes, trip counts used or unknown, If branches).
        kv_cache: for a decoder with a KV cache (``past_key_values.*`` in, ``present.*``
            out), the cache this run returns: context (tokens it holds: past + new), bytes
            (all layers' keys and values), bytes_per_token, layers; None for other models.
            ``total["kv_cache_bytes"]`` repeats its bytes. :func:`kv_cache_bytes` gives it for
            any context.
    """

    nodes: pd.DataFrame
    memory: pd.DataFrame
    total: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    kv_cache: dict[str, Any] | None = None
    model: LabModel | None = field(default=None, repr=False)
    #: node id -> {weight name: elements}: what :meth:`by_module` counts once per module
    weights_of: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)

    def by_module(self, depth: int | None = None) -> pd.DataFrame:
        """FLOPs, MACs and parameters per PyTorch module (see
        :mod:`onnx_lab.core.source_map`), in model order.

        Columns: module ('?' for nodes of unknown source), module_class, n_nodes, first_topo,
        flops, macs, params (each weight once per module, however many of its nodes read
        it: a module called twice), output_bytes, share (of all FLOPs).

        Example:
            >>> lab.cost().by_module(depth=2).sort_values("flops", ascending=False)
        """
        if self.model is None:
            raise InputError("This Cost has no model to read modules from.",
                             fix="Compute it with onnx_lab.analysis.cost.cost(model).")
        out = group_by_module(self.nodes, self.model,
                              {"flops": lambda x: x.sum(min_count=1),
                               "macs": lambda x: x.sum(min_count=1), "params": "sum",
                               "output_bytes": "sum"}, depth=depth)
        if self.weights_of:
            # a weight counts once per module however many of its nodes read it (a module
            # called twice read its Linear's weight twice: 144 params for 72)
            held: dict[str, dict[str, int]] = {}
            for nid, m in module_at(self.model, depth).items():
                key = "?" if m is None else m
                held.setdefault(key, {}).update(self.weights_of.get(nid, {}))
            out["params"] = out["module"].map(lambda m: sum(held.get(m, {}).values()))
        total = self.nodes.flops.sum()
        return out.assign(share=out.flops / total if total else np.nan)

    def by_op(self) -> pd.DataFrame:
        """Per op type: count, flops, macs, params, share of flops."""
        g = self.nodes.groupby("op_type")
        df = pd.DataFrame({"count": g.size(), "flops": g.flops.sum(min_count=1),
                           "macs": g.macs.sum(min_count=1), "params": g.params.sum(),
                           "known": g.known.all()}).reset_index()
        total = self.nodes.flops.sum()
        df = df.assign(share=df.flops / total if total else np.nan)
        return df.sort_values("flops", ascending=False, na_position="last").reset_index(
            drop=True)

    def roofline(self, peak_flops: float, bandwidth: float) -> Roofline:
        """Latency lower bound for a device.

        Args:
            peak_flops: peak FLOP/s (e.g. 19.5e12 for an A100 fp32).
            bandwidth: memory bandwidth in bytes/s (e.g. 1.5e12).

        Example:
            >>> lab.cost().roofline(peak_flops=1e12, bandwidth=50e9).total_ms
        """
        return roofline(self.nodes, peak_flops, bandwidth)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly: {"total": {...}, "nodes": [...], "notes": [...]} (used by the CLI)."""
        rows = self.__dict__.get("_nodes")
        nodes = rows.records() if isinstance(rows, _Rows) else \
            self.nodes.to_dict(orient="records")
        return {"total": dict(self.total), "nodes": nodes, "notes": list(self.notes)}

    def __repr__(self) -> str:
        t = self.total
        return (f"<Cost {t['flops'] / 1e9:.3f} GFLOPs, {t['macs'] / 1e9:.3f} GMACs, "
                f"{t['params']:,} params, peak activations {t['peak_activation_bytes']:,} B, "
                f"{t['unknown_nodes']} unknown nodes>")

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


MEMORY_COLUMNS = ["node_id", "live_bytes"]
_FLOAT_COLUMNS = ("calls", "flops", "macs", "intensity", "macs_onnx_tool")
_INT_COLUMNS = ("params", "param_bytes", "input_bytes", "output_bytes")


def _nansum(values: Sequence[float]) -> float:
    """The sum without the NaNs, as ``Series.sum()`` gives it (numpy's pairwise sum)."""
    return float(np.nansum(np.asarray(values, dtype=np.float64)))


class _Rows:
    """A table's rows until its DataFrame is first read (:class:`Cost`'s nodes and memory)."""

    __slots__ = ("rows", "columns")

    def __init__(self, rows: list[tuple], columns: list[str]) -> None:
        self.rows, self.columns = rows, columns

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.rows, columns=self.columns)
        if self.columns is NODE_COLUMNS:
            df = df.astype({"calls": "float64", "flops": "float64", "macs": "float64",
                            "known": "bool", "macs_onnx_tool": "float64"})
        return df

    def records(self) -> list[dict[str, Any]]:
        """What ``frame().to_dict(orient="records")`` gives: Python numbers, in column order."""
        conv = [float if c in _FLOAT_COLUMNS else int if c in _INT_COLUMNS else
                bool if c == "known" else None for c in self.columns]
        return [{c: (f(v) if f is not None else v) for c, f, v in zip(self.columns, conv, r)}
                for r in self.rows]


def _table_property(name: str) -> property:
    attr = f"_{name}"

    def get(self: Cost) -> pd.DataFrame:
        v = self.__dict__.get(attr)
        if isinstance(v, _Rows):
            v = self.__dict__[attr] = v.frame()
        return v

    def put(self: Cost, value: Any) -> None:
        self.__dict__[attr] = value

    return property(get, put, doc=f"The {name} table (a DataFrame, built on first read).")


# nodes and memory are built on first read (the dataclass's __init__ stores through these).
Cost.nodes = _table_property("nodes")  # type: ignore[assignment]
Cost.memory = _table_property("memory")  # type: ignore[assignment]


def _const_int(v) -> int | None:
    """The value of a scalar integer constant (initializer or Constant output), else None."""
    if v is None:
        return None
    try:
        t = constant_tensor(v)  # get_const_tensor would rename tensors other versions share
        a = np.asarray(t.numpy()) if t is not None else None
    except Exception:  # noqa: BLE001 - unreadable constant: unknown
        return None
    if a is None or a.size != 1 or a.dtype.kind not in "iu":
        return None
    return int(a.reshape(-1)[0])


def _untaken(lm: LabModel, branches: Mapping[str, bool] | None) -> frozenset[str]:
    """Graph paths of the If bodies the given switch values do not take."""
    if not branches:
        return frozenset()
    switches = {sw.input: sw for sw in branch_switches(lm)}
    unknown = sorted(set(branches) - set(switches))
    if unknown:
        raise InputError(f"branches names {unknown}, which decide no If of the model "
                         f"(its switches: {sorted(switches) or 'none'}).",
                         fix="Pass the boolean inputs that choose If branches, e.g. "
                             "branches={'use_cache_branch': True}.")
    out: set[str] = set()
    for name, value in branches.items():
        sw = switches[name]
        out.update(sw.taken.get(not bool(value), ()))
        out.difference_update(sw.taken.get(bool(value), ()))
    return frozenset(out)


def _calls(lm: LabModel, types: dict[str, TensorInfo], untaken: frozenset[str] = frozenset(),
           why: str = "for the given switch values"
           ) -> tuple[dict[int, float], dict[int, str], list[str]]:
    """How many times each node runs per model run, by ``id`` of its ir.Node.

    Main graph: 1. Loop body: × the trip count when it is a constant or folds from the sized
    inputs (an upper bound: the condition may stop the loop earlier); Scan body: × the length of the first scan input's
    scanned axis when static; If branches: 1 each (only one runs). A body whose count is
    unknown is counted once per run of its owner, with a note. Returns (calls, notes by
    node, model-level notes).
    """
    calls: dict[int, float] = {}
    body_notes: dict[int, str] = {}
    notes: list[str] = []
    ids = {id(e.node): nid for nid, e in lm.index.entries.items()}
    computed = _computed_trip_counts(lm, types)

    def walk(graph, factor: float, note: str) -> None:
        for node in graph:
            calls[id(node)] = factor
            if note:
                body_notes[id(node)] = note
            subs = [a.value for a in node.attributes.values() if a.type == ir.AttributeType.GRAPH]
            if not subs:
                continue
            f, n = factor, note
            nid = ids.get(id(node), node.name)
            if node.op_type == "Loop":
                m = _const_int(node.inputs[0] if node.inputs else None)
                how = "its constant trip count"
                if m is None and nid in computed:
                    m, how = computed[nid], "its trip count, computed from the input shapes"
                if m is None:
                    n = f"trip count of Loop {nid!r} unknown: counted once per run of it"
                    notes.append(f"Loop {nid!r}: trip count not a constant, its body is counted "
                                 "once per run")
                else:
                    f = factor * max(m, 0)
                    notes.append(f"Loop {nid!r}: body counted {m} times per run ({how}; an "
                                 "upper bound, the condition may stop it earlier)")
            elif node.op_type == "Scan":
                length = _scan_length(node, types)
                if length is None:
                    n = f"length of Scan {nid!r} unknown: counted once per run of it"
                    notes.append(f"Scan {nid!r}: sequence length unknown, its body is counted "
                                 "once per run")
                else:
                    f = factor * length
            for sg in subs:
                if lm.index.graph_path(sg) in untaken:
                    walk(sg, 0.0, "a branch not taken: runs 0 times")
                else:
                    walk(sg, f, n)

    walk(lm.graph, 1.0, "")
    if untaken:
        notes.append(f"If branches not taken {why} run 0 times: "
                     f"{', '.join(sorted(untaken)[:4])}{' ...' if len(untaken) > 4 else ''}")
    # an If that runs with neither body left out counts both (with untaken bodies, the Ifs of
    # another switch, or of a condition the model computes, still did without a word)
    both = [n for g in lm.ir.graphs() for n in g if n.op_type == "If"
            and calls.get(id(n), 0) > 0
            and not any(lm.index.graph_path(a.value) in untaken for a in n.attributes.values()
                        if a.type == ir.AttributeType.GRAPH)]
    if both:
        notes.append("both branches of each If are counted (only one runs): an upper bound"
                     if not untaken else
                     f"both branches of {len(both)} other If{'s' if len(both) > 1 else ''} are "
                     "counted (only one runs): an upper bound")
    return calls, body_notes, notes


def _computed_trip_counts(lm: LabModel, types: dict[str, TensorInfo]) -> dict[str, int]:
    """node id -> trip count of each Loop (main graph or If branch) whose count is not a
    constant but folds from the sized inputs: TorchScript's ``for i in range(x.shape[0])``
    is ``Loop(Gather(Shape(x), 0))``."""
    targets = {}
    for nid, e in lm.index.entries.items():
        node = e.node
        if node.op_type == "Loop" and node.inputs and node.inputs[0] is not None \
                and node.inputs[0].name and _const_int(node.inputs[0]) is None:
            targets[nid] = (node.inputs[0].name, e.graph)
    if not targets:
        return {}
    values = fold_values(lm, types, list(targets.values()))
    out = {}
    for nid, (name, path) in targets.items():
        a = values.get((lm.index.scope(name, path), name))
        if a is not None and np.size(a) == 1 and np.asarray(a).dtype.kind in "iu":
            out[nid] = int(np.asarray(a).reshape(-1)[0])
    return out


def _scan_length(node, types: dict[str, TensorInfo]) -> int | None:
    """Iterations of a Scan (opset >= 9): the scanned axis of its first scan input."""
    n_scan = node.attributes.get("num_scan_inputs")
    body = node.attributes.get("body")
    # Opset 8's Scan takes sequence_lens first and scans axis 1 per batch item: unknown here.
    if n_scan is None or body is None or len(body.value.inputs) != len(node.inputs):
        return None
    n_state = len(node.inputs) - n_scan.value
    if not 0 <= n_state < len(node.inputs):
        return None
    axes = node.attributes.get("scan_input_axes")
    axis = int(axes.value[0]) if axes is not None and len(axes.value) else 0
    shape = _concrete(types, node.inputs[n_state])
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return int(shape[axis])


def cost(model: Any, dims: Mapping[str, int] | None = None,
         shapes: Mapping[str, Sequence[int]] | None = None, *,
         branches: Mapping[str, bool] | None = None) -> Cost:
    """Per-node FLOPs, MACs, parameters and bytes; totals and peak activation memory.

    Args:
        model: a Lab, LabModel or anything ``onnx_lab.open`` takes.
        dims, shapes: values for dynamic dims (merged over a Lab's). Counts need concrete
            shapes, so every dynamic input dim must be given.
        branches: values of boolean inputs that choose If branches
            (:func:`onnx_lab.core.branches.branch_switches`: optimum's ``use_cache_branch``);
            the bodies such a value does not take run 0 times. None: a switch the past length
            decides takes that branch (the cache branch when the past is at least 1, as
            generated feeds do); both branches of any other If are counted (an upper bound).

    Returns:
        A :class:`Cost`.

    Raises:
        DimError: dynamic input dims without values (lists them and how to pass them).

    Example:
        >>> c = cost("sample:transformer_block", dims={"batch": 1, "seq": 16})
        >>> c.total["flops"]
    """
    lm, dims, shapes = resolve(model, dims, shapes)
    sized = resolve_input_shapes(lm, dims, shapes)  # DimError naming every unresolved dim
    # an optimum merged decoder's mask, declared over the new tokens, covers the past too at a
    # decode step: typed as declared, its cache branch had 14 nodes of unknown cost and no KV
    # cache size
    mask = widened_mask(lm, dims, shapes)
    if mask is not None:
        shapes = {**shapes, mask: sized[mask]}
    types = lm.types(dims, shapes)
    decided = None
    if branches is None:  # the branch the past length decides, as generated feeds take it
        branches = decided = cache_switch_values(lm, sized) or None
    idx = lm.index
    rows = []
    notes: list[str] = []
    param_seen: dict[str, tuple[int, float]] = {}
    weights_of: dict[str, dict[str, int]] = {}
    why = "for the given switch values" if decided is None else (
        f"({', '.join(f'{k}={v}' for k, v in decided.items())}, as the past length decides "
        "and generated feeds take; branches= chooses)")
    untaken = _untaken(lm, branches)
    calls_of, body_notes, call_notes = _calls(lm, types, untaken, why)
    for nid, e in idx.entries.items():
        node = e.node
        c = _Ctx(node, types, e.graph)
        op = node.op_type
        note = ""
        calls = calls_of.get(id(node), 1.0)
        if op in _CONTROL_OPS:
            res: tuple[float, float] | None = (0.0, 0.0)
            note = "its body nodes are rows of their own"
        else:
            counter = _COUNTERS.get(op)
            try:
                res = counter(c) if counter is not None else _generic(c)
            except (TypeError, ValueError, ZeroDivisionError, IndexError, RecursionError
                    ) as err:
                res = None
                note = f"cannot count: {err}"
            if isinstance(res, str):  # the counter's reason
                res, note = None, res
            elif res is not None and len(res) == 3:
                res, note = (res[0], res[1]), res[2]
            if res is None and not note:
                known_op = counter is not None or op in _MOVE_OPS or op in _ELEMENTWISE \
                    or op in _REDUCE or op in _NORM or op in _SOFTMAX
                note = ("shapes unknown" if known_op else
                        f"no cost formula for {node.domain + '::' if node.domain else ''}{op}")
        params = pbytes = ibytes = obytes = 0.0
        for i, (v, s) in enumerate(zip(node.inputs, c.ins)):
            if v is None or s is None:
                continue
            size = itemsize(_dtype_at(types, v.name, e.graph)) or 0
            n = _prod(s)
            # a tensor of 4-bit (2-bit) elements is stored packed, its last byte rounded up:
            # 9 int4 weights take 5 bytes (4.5 was summed, then truncated)
            nbytes = math.ceil(n * size)
            ibytes += nbytes
            if is_constant(v, stored=True):
                weights = _weights_held(node, i, n)
                params += weights
                pbytes += nbytes
                param_seen[v.name] = (weights, nbytes)
                weights_of.setdefault(nid, {})[v.name] = int(weights)
        held, held_bytes = ml_params(node)  # an ONNX-ML op's learned attributes
        if held:
            params += held
            pbytes += held_bytes
            param_seen[f"{nid}\x1f(attributes)"] = (held, held_bytes)
        if op == "MatMulNBits" and res is not None:
            note = _nbits_note(c, pbytes)
        for v, s in zip(node.outputs, c.outs):
            if v is not None and s is not None:
                obytes += math.ceil(_prod(s) * (itemsize(_dtype_at(types, v.name, e.graph))
                                                or 0))
        flops, macs = res if res is not None else (np.nan, np.nan)
        moved = ibytes + obytes
        intensity = flops / moved if moved and res else np.nan
        if id(node) in body_notes:
            note = "; ".join(x for x in (note, body_notes[id(node)]) if x)
        rows.append((nid, e.graph, op, node.domain, calls, flops * calls, macs * calls,
                     int(params), int(pbytes), int(ibytes * calls), int(obytes * calls),
                     intensity, res is not None, note, _or_nan(_onnx_tool_macs(c)) * calls))
    # Totals from the rows: the tables are built on first use (`onnx-lab cost --json` builds
    # none, so it imports no pandas). The sums are numpy's, as the DataFrame's sums were.
    col = {name: [r[i] for r in rows] for i, name in enumerate(NODE_COLUMNS)}
    # a node that does not run (a branch not taken) costs nothing, known or not
    known = np.array(col["known"], dtype=bool) | (np.array(col["calls"], dtype=float) == 0)
    unknown_ops = sorted({op for op, k in zip(col["op_type"], known) if not k})
    live_rows, peak, peak_node, missing, _largest = liveness(lm, types)
    if missing:
        notes.append(f"{missing} activations of unknown size are left out of the peak memory")
    notes += call_notes
    n_unknown = int((~known).sum())
    if n_unknown:
        notes.append(f"{n_unknown} nodes have unknown cost (NaN): "
                     + ", ".join(unknown_ops[:10]))
    kv = _kv_cache_of_run(lm, types, notes, untaken)
    total = {
        "flops": _nansum(col["flops"]), "macs": _nansum(col["macs"]),
        "params": int(sum(n for n, _ in param_seen.values())),
        "param_bytes": int(sum(b for _, b in param_seen.values())),
        "activation_bytes": int(sum(col["output_bytes"])),
        "peak_activation_bytes": int(peak), "peak_node": peak_node,
        "nodes": len(rows), "unknown_nodes": n_unknown,
        "unknown_ops": unknown_ops,
        "kv_cache_bytes": kv["bytes"] if kv else None,
        **_onnx_tool_total(col["macs_onnx_tool"], col["op_type"]),
    }
    nodes: Any = _Rows(rows, NODE_COLUMNS)
    memory: Any = _Rows(live_rows, MEMORY_COLUMNS)
    return Cost(nodes=nodes, memory=memory, total=total, notes=notes, kv_cache=kv,
                model=lm, weights_of=weights_of)


def _dtype_at(types: Mapping[str, TensorInfo], name: str, graph: str) -> str | None:
    info = type_at(types, name, graph)
    return info.dtype if info is not None else None


def _taken_type(lm: LabModel, types: Mapping[str, TensorInfo], name: str,
                untaken: frozenset[str]) -> TensorInfo | None:
    """The type of ``name``; for an output of an If of which one branch runs, that branch's
    output's (inference merges both branches' shapes into symbols: a merged decoder's
    present.* had an unknown head size at a decode step)."""
    info = types.get(name)
    nid = lm.index.producer.get(name)
    if (info is not None and not info.dynamic) or not untaken or nid is None:
        return info
    node = lm.index.node(nid)
    if node.op_type != "If" or name not in [v.name for v in node.outputs]:
        return info
    taken = [a.value for key in ("then_branch", "else_branch")
             if (a := node.attributes.get(key)) is not None and isinstance(a.value, ir.Graph)
             and lm.index.graph_path(a.value) not in untaken]
    if len(taken) != 1:
        return info
    k = [v.name for v in node.outputs].index(name)
    outputs = list(taken[0].outputs)
    body = type_at(types, outputs[k].name, lm.index.graph_path(taken[0]) or "") \
        if k < len(outputs) and outputs[k] is not None else None
    return body if body is not None and not body.dynamic else info


def _kv_cache_of_run(lm: LabModel, types: dict[str, TensorInfo], notes: list[str],
                     untaken: frozenset[str] = frozenset()) -> dict[str, Any] | None:
    """The present.* outputs of a decoder's run: context, bytes, bytes per token, layers."""
    try:
        io = decoder_io(lm)
    except CacheError as e:
        notes.append(f"KV cache not sized: {e.problem}")
        return None
    if io is None:
        return None
    total, context = 0, None
    for slot in io.cache:
        info = _taken_type(lm, types, slot.present, untaken)
        size = itemsize(info.dtype) if info is not None else None
        if info is None or info.dynamic or size is None:
            notes.append(f"KV cache not sized: the shape of {slot.present!r} is unknown")
            return None
        total += _prod(info.shape) * size
        # a cross-attention cache holds the encoder's length, not the context
        if slot.past_axis is not None and not slot.kind.startswith("cross."):
            context = info.shape[slot.past_axis]
    return {"context": context, "bytes": int(total),
            "bytes_per_token": total / context if context else None, "layers": io.num_layers}


# The generation cost (a prefill and a decode step of a KV-cache decoder) lives in
# onnx_lab.analysis.generation, which builds on cost(); its names stay importable from here.
_GENERATION = ("kv_cache_bytes", "generation_cost", "GenerationCost", "PHASE_COLUMNS")


def __getattr__(name: str) -> Any:
    if name in _GENERATION:
        from onnx_lab.analysis import generation
        return getattr(generation, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
