"""Running a model and capturing intermediate tensors in memory-bounded chunks.

onnxruntime has no API for intermediate values: tensors are exposed by adding them as graph
outputs. To bound memory, the tensors are split into chunks whose estimated size (from shape
inference at the feeds' shapes) stays under ``max_bytes``; the model runs once per chunk and
each chunk is handed to the caller before the next one is computed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from onnx_lab.core.model import LabModel
from onnx_lab.core.units import itemsize
from onnx_lab.runtime.session import make_session, run_session

logger = logging.getLogger(__name__)

__all__ = ["run", "capture", "capturable_tensors", "estimate_bytes", "plan_chunks"]


def run(model: LabModel, feeds: Mapping[str, np.ndarray], *, outputs: Sequence[str] | None = None,
        providers=None, opt_level: str = "disable") -> dict[str, np.ndarray]:
    """Run ``model`` once; return {output name: array} (graph outputs unless ``outputs``)."""
    sess = make_session(model, providers=providers, opt_level=opt_level, outputs=outputs)
    return run_session(sess, feeds)


def capturable_tensors(model: LabModel) -> list[str]:
    """Main-graph tensors that can be exposed as outputs, in topological order.

    Node outputs of the main graph (including graph outputs); tensors inside If/Loop/Scan
    bodies cannot be exposed by onnxruntime and are not listed.
    """
    idx = model.index
    out: list[str] = []
    seen: set[str] = set()
    for nid in idx.topo_order(""):
        for v in idx.node(nid).outputs:
            if v.name and v.name not in seen:
                seen.add(v.name)
                out.append(v.name)
    return out


def estimate_bytes(model: LabModel, names: Sequence[str],
                   input_shapes: Mapping[str, Sequence[int]]) -> dict[str, int | None]:
    """Estimated bytes of each tensor at the given input shapes (None when unknown)."""
    types = model.types(shapes={k: list(v) for k, v in input_shapes.items()})
    out: dict[str, int | None] = {}
    for n in names:
        info = types.get(n)
        numel = info.numel if info is not None else None
        out[n] = int(numel * (itemsize(info.dtype) or 4)) if numel is not None else None
    return out


def plan_chunks(sizes: Mapping[str, int | None], max_bytes: int) -> list[list[str]]:
    """Greedy chunks of tensor names whose summed size stays under ``max_bytes``.

    Unknown sizes count as the largest known size; a single tensor larger than max_bytes gets
    a chunk of its own.
    """
    known = [s for s in sizes.values() if s is not None]
    fallback = max(known) if known else 1 << 20
    chunks: list[list[str]] = []
    cur: list[str] = []
    total = 0
    for name, size in sizes.items():
        size = fallback if size is None else size
        if cur and total + size > max_bytes:
            chunks.append(cur)
            cur, total = [], 0
        cur.append(name)
        total += size
    if cur:
        chunks.append(cur)
    return chunks


def capture(model: LabModel, feeds: Mapping[str, np.ndarray], tensors: Sequence[str] | None = None,
            *, max_bytes: int = 1 << 30, providers=None) -> Iterator[dict[str, np.ndarray]]:
    """Yield {tensor name: array} chunks of intermediate values for one input sample.

    Graph optimizations are disabled so nothing is fused away. At most about ``max_bytes`` of
    captured tensors are held per chunk; consume each chunk before asking for the next.

    Args:
        tensors: names to capture (default: :func:`capturable_tensors`).
    """
    names = list(tensors) if tensors is not None else capturable_tensors(model)
    shapes = {k: np.asarray(v).shape for k, v in feeds.items()}
    sizes = estimate_bytes(model, names, shapes)
    for chunk in plan_chunks(sizes, max_bytes):
        yield run(model, feeds, outputs=chunk, providers=providers)
