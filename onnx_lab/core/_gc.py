"""``paused``: Python's cyclic garbage collector held off while a model is built.

Opening a graph of 10^5 nodes makes millions of long-lived onnx_ir objects; the collector,
triggered by the allocations, re-traverses all of them again and again, which took about as
long as the building itself (20,000 nodes: deserialization 2.8 s with it, 1.3 s without;
``benchmarks/bench_open_scale.py``). A verified step is the same (a clone, its index, capture
tables: tens of thousands of objects; 0.07 s of BERT-base's ``safe`` preset went to full
collections over every tracked object of the process, for no garbage: old versions stay
referenced by the history, tensors are freed by reference counting). Nothing built there is
garbage in a cycle worth collecting early, so the collector waits until the outermost paused
call returns.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Disable the cyclic collector for the block (a decorator too); nested or concurrent
    uses and a collector the caller disabled are left as they were."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
