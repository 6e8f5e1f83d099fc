"""Roofline: a lower bound on latency from a device's peak compute and memory bandwidth,
drawn from a :class:`~onnx_lab.analysis.cost.Cost`'s per-node table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from onnx_lab._pandas import pd
from onnx_lab.errors import InputError

__all__ = ["Roofline", "roofline"]


@dataclass
class Roofline:
    """Lower bound on latency from a device's peak compute and memory bandwidth.

    Attributes:
        nodes: per known node: node_id, op_type, flops, bytes, compute_ms, memory_ms, time_ms
            (the larger of the two), bound ('compute' or 'memory').
        total_ms: sum of the per-node bounds (nodes run one after another).
        compute_ms, memory_ms: whole-model compute and memory times.
        unknown_nodes: nodes left out (unknown cost).
    """

    nodes: pd.DataFrame
    total_ms: float
    compute_ms: float
    memory_ms: float
    peak_flops: float
    bandwidth: float
    unknown_nodes: int

    _SUMMARY = ("total_ms", "compute_ms", "memory_ms", "peak_flops", "bandwidth",
                "unknown_nodes")

    def keys(self) -> tuple[str, ...]:
        """Summary fields, so ``dict(roofline)`` gives the totals."""
        return self._SUMMARY

    def __getitem__(self, key: str) -> Any:
        if key not in self._SUMMARY:
            raise KeyError(key)
        return getattr(self, key)

    def __repr__(self) -> str:
        return (f"<Roofline >= {self.total_ms:.3f} ms (compute {self.compute_ms:.3f} ms, "
                f"memory {self.memory_ms:.3f} ms; {self.unknown_nodes} nodes unknown)>")


def roofline(nodes: pd.DataFrame, peak_flops: float, bandwidth: float) -> Roofline:
    """Latency lower bound of a cost table (:attr:`Cost.nodes`) on a device.

    Args:
        nodes: the per-node table of a :class:`~onnx_lab.analysis.cost.Cost`.
        peak_flops: peak FLOP/s (e.g. 19.5e12 for an A100 fp32).
        bandwidth: memory bandwidth in bytes/s (e.g. 1.5e12).

    Example:
        >>> roofline(lab.cost().nodes, peak_flops=1e12, bandwidth=50e9).total_ms
    """
    for name, v in (("peak_flops", peak_flops), ("bandwidth", bandwidth)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise InputError(f"{name} must be a positive number, got {v!r}.",
                             fix="Pass e.g. peak_flops=1e12 (FLOP/s), bandwidth=50e9 (B/s).")
    df = nodes.loc[nodes.known]
    moved = df.input_bytes + df.output_bytes
    compute = df.flops / peak_flops * 1e3
    memory = moved / bandwidth * 1e3
    out = pd.DataFrame({"node_id": df.node_id, "op_type": df.op_type, "flops": df.flops,
                        "bytes": moved, "compute_ms": compute, "memory_ms": memory,
                        "time_ms": np.maximum(compute, memory),
                        "bound": np.where(compute >= memory, "compute", "memory")})
    return Roofline(nodes=out.reset_index(drop=True), total_ms=float(out.time_ms.sum()),
                    compute_ms=float(compute.sum()), memory_ms=float(memory.sum()),
                    peak_flops=float(peak_flops), bandwidth=float(bandwidth),
                    unknown_nodes=int((~nodes.known).sum()))
