"""One-glance summary of a model: versions, sizes, inputs/outputs, dynamic dims, op families."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from onnx_lab import _display
from onnx_lab.analysis._counters import _weights_held, ml_params
from onnx_lab.analysis.tables import initializer_rows, io_rows
from onnx_lab.core._gc import paused
from onnx_lab.core.derived import derived_dims
from onnx_lab.core.model import LabModel
from onnx_lab.core.shapes import dynamic_dims, value_type
from onnx_lab.core.units import itemsize
from onnx_lab.core.values import QUANTIZATION_OPS, foldable_nodes

__all__ = ["Summary", "summarize", "op_family", "OP_FAMILIES", "constant_computed"]

# Computed constants at most this large are shape vectors and axes, not weights.
_CONSTANT_MIN_BYTES = 4096

OP_FAMILIES: dict[str, set[str]] = {
    "convolution": {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv"},
    "normalization": {"BatchNormalization", "LayerNormalization", "InstanceNormalization",
                      "GroupNormalization", "LpNormalization", "SkipLayerNormalization",
                      "SimplifiedLayerNormalization", "RMSNormalization", "LRN",
                      "MeanVarianceNormalization"},
    "activation": {"Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Gelu", "FastGelu",
                   "BiasGelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus",
                   "Softsign", "Mish", "Swish", "Softmax", "LogSoftmax", "Clip", "Erf", "QuickGelu"},
    "pooling": {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
                "GlobalLpPool", "MaxRoiPool", "RoiAlign", "MaxUnpool"},
    "matmul/gemm": {"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum",
                    "FusedMatMul", "MatMulNBits", "Attention", "MultiHeadAttention",
                    "GroupQueryAttention", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"},
    "shape ops": {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Split",
                  "Slice", "Gather", "GatherElements", "GatherND", "Shape", "Size", "Expand",
                  "Tile", "Pad", "Identity", "ConstantOfShape", "Range", "DepthToSpace",
                  "SpaceToDepth", "Resize", "ScatterND", "ScatterElements"},
    "control flow": {"If", "Loop", "Scan", "SequenceMap"},
    "quantization": {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                     "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger",
                     "QLinearAdd", "QLinearMul", "DynamicQuantizeMatMul", "MatMulNBits"},
}


def op_family(op_type: str, domain: str) -> str:
    """The family of an op (first match in OP_FAMILIES), 'onnx-ml' (the standard
    ``ai.onnx.ml`` domain: trees, linear models, encoders, ZipMap), 'custom domain' or
    'other'."""
    if domain == "ai.onnx.ml":
        return "onnx-ml"
    if domain not in ("", "ai.onnx") and op_type not in OP_FAMILIES["quantization"]:
        return "custom domain"
    for fam, ops in OP_FAMILIES.items():
        if op_type in ops:
            return fam
    return "other"


def constant_computed(model: LabModel) -> list[dict[str, Any]]:
    """Tensors over 4 KB that the main graph computes from constants only (weights built
    at run time, e.g. with ConstantOfShape), which ``lab.apply("fold_constants")`` turns into
    initializers.

    onnxruntime does not fold every such subgraph (never ConstantOfShape): the model then
    rebuilds them at every run, and its initializers understate its weights. The
    QuantizeLinear/DequantizeLinear of stored weights (and what reads them) are not listed:
    they are the model's quantization, which the pass keeps.

    Returns:
        One dict per tensor: tensor, node_id (its producer), op_type, nbytes; largest first.

    Example:
        >>> sum(t["nbytes"] for t in constant_computed(lab.model))
    """
    fold = foldable_nodes(model, keep=QUANTIZATION_OPS)
    if not fold:
        return []
    types = model.types()
    out = []
    for nid, node in fold.values():
        if node.op_type == "Identity":
            continue  # a copy of a weight that is already counted
        for o in node.outputs:
            if not o.name or not (o.is_graph_output()
                                  or any(id(u.node) not in fold for u in o.uses())):
                continue
            info = value_type(model, o, types)
            n = info.numel if info is not None else None
            if n is None:
                continue
            size = int(n * (itemsize(info.dtype) or 4))
            if size > _CONSTANT_MIN_BYTES:
                out.append({"tensor": o.name, "node_id": nid, "op_type": node.op_type,
                            "nbytes": size})
    return sorted(out, key=lambda r: -r["nbytes"])


class Summary(Mapping[str, Any]):
    """Dict-like summary with an HTML view. Keys:

    ir_version, opsets ({domain: version}), producer ("name version"), num_nodes (all graphs),
    num_nodes_main, num_initializers, num_params (as :func:`~onnx_lab.cost` counts them: a
    4-bit MatMulNBits weight holds K·N, a ``value_float`` Constant one; plus the stored
    constants no node reads, which ``cost()`` has no node for), param_bytes (stored), inputs
    and outputs
    ([{name, dtype, shape}]), dynamic_dims ({dim: [inputs]}), derived_dims ({dim: {value,
    kind, source}}: the dims the model determines and the Lab's dims do not give, filled in
    everywhere; see :mod:`onnx_lab.core.derived`), op_counts ({op: n}),
    op_families ({family: n}), subgraphs (number of If/Loop/Scan bodies), external_data (bool),
    constant_computed_tensors and constant_computed_bytes (tensors over 4 KB computed from
    constants only at run time, not counted in num_params/param_bytes; see
    :func:`constant_computed`).
    """

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __getattr__(self, key: str) -> Any:
        # Dunder/private lookups (copy, pickle) before __init__ ran must not recurse.
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._fields[key]
        except KeyError:
            raise AttributeError(key) from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self._fields)

    def __repr__(self) -> str:
        f = self._fields
        extra = (f" + {f['constant_computed_bytes']:,} bytes computed from constants"
                 if f.get("constant_computed_bytes") else "")
        return (f"Summary({f['num_nodes']} nodes, {f['num_params']:,} params{extra}, "
                f"opsets={f['opsets']}, inputs={[i['name'] for i in f['inputs']]})")

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


def _params_held(model: LabModel, name: str, n: int) -> int:
    """The parameters a weight of ``n`` stored elements holds, as :func:`~onnx_lab.cost`
    counts them: a 4-bit MatMulNBits weight packs K·N weights in K·N/2 bytes, a 4-bit
    GatherBlockQuantized table two weights per byte (their scales and zero points count none;
    the int4 build's count was 78,404 for the float one's 143,682)."""
    idx = model.index
    for nid in idx.consumers.get(name, ()):
        node = idx.node(nid)
        if node.op_type in ("MatMulNBits", "GatherBlockQuantized"):
            for i, v in enumerate(node.inputs):
                if v is not None and v.name == name:
                    return _weights_held(node, i, n)
    return n


@paused()
def summarize(model: LabModel, dims: Mapping[str, int] | None = None,
              shapes: Mapping[str, Sequence[int]] | None = None) -> Summary:
    """Build the :class:`Summary` of ``model`` (no weight values are read)."""
    m = model.ir
    idx = model.index
    # Counted per (op, domain) first, then keyed and given a family once per kind of op
    # (first-seen order kept, so ties in most_common() fall as before).
    kinds = Counter((e.node.op_type, e.node.domain) for e in idx.entries.values())
    ops = Counter()
    fams = Counter()
    for (op, domain), n in kinds.items():
        ops[op if domain in ("", "ai.onnx") else f"{domain}::{op}"] += n
        fams[op_family(op, domain)] += n
    # The initializers table's rows (name, dtype, shape, numel, nbytes, external, ...,
    # source): counted without building the frame, so the summary needs no pandas.
    inits = initializer_rows(model)
    ml_held = [ml_params(e.node) for e in idx.entries.values() if e.node.domain == "ai.onnx.ml"]

    def io(which: str) -> list[dict[str, Any]]:
        return [{"name": name, "dtype": dtype,
                 "shape": list(shape) if shape is not None else None}
                for name, dtype, shape, _ in io_rows(model, which, dims, shapes)]

    producer = " ".join(x for x in (m.producer_name, m.producer_version) if x)
    computed = constant_computed(model)
    return Summary({
        "ir_version": m.ir_version,
        "opsets": dict(m.opset_imports),
        "producer": producer,
        "num_nodes": len(idx),
        "num_nodes_main": m.graph.num_nodes(),
        "num_initializers": sum(r[9] == "initializer" for r in inits),
        "num_constant_tensors": sum(r[9] == "constant" for r in inits),
        # + an ONNX-ML op's learned attributes (a tree's thresholds and leaves), as cost()
        "num_params": sum(_params_held(model, r[0], r[3]) for r in inits)
        + sum(n for n, _ in ml_held),
        "param_bytes": sum(r[4] for r in inits) + sum(b for _, b in ml_held),
        "inputs": io("inputs"),
        "outputs": io("outputs"),
        "dynamic_dims": dynamic_dims(model),
        "op_counts": dict(ops.most_common()),
        "op_families": dict(fams.most_common()),
        "subgraphs": len(idx.graphs) - 1,
        "external_data": any(r[5] for r in inits),
        "constant_computed_tensors": len(computed),
        "constant_computed_bytes": int(sum(t["nbytes"] for t in computed)),
        "derived_dims": {n: d.to_dict() for n, d in derived_dims(model, dims).items()},
    })
