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

Waiting alone only defers the work: everything built inside would sit in the youngest
generation, to be traversed by the next young collection, again by the middle one and then
by a full one (20,000 nodes: ~0.4 s of the ~2 s of ``open`` + ``summary``). So on the way out
it is moved straight into the oldest generation (``gc.freeze()`` + ``gc.unfreeze()``, two list
splices), where only a full collection looks at it: cyclic garbage made inside, and models
dropped later, are freed then. Python would not count those objects towards its next full
collection, so ``paused`` does (:class:`_Moved`).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


class _Moved:
    """Objects moved to the oldest generation, and when a full collection is due.

    Python counts objects that reach the oldest generation through its own collections and
    makes a full collection once they exceed a quarter of those the last one left; objects
    moved here are not counted, so a like rule is kept here: once they exceed half of the
    tracked objects at the last full collection made here (or at the first move), one is
    made. Half, not a quarter: the index, types and tables of a model just opened add ~40%
    to what opening it made, and need no full collection; opening another model of its
    size makes one, which frees the first if it was dropped (its graph is all cycles)."""

    since = 0  # objects moved since that collection
    baseline: int | None = None  # tracked objects after it (None: nothing moved yet)


def _to_oldest() -> None:
    made = gc.get_count()[0]  # tracked objects made (net) since the last collection
    gc.freeze()  # every generation -> the permanent one; clears the young count
    gc.unfreeze()  # the permanent one -> the oldest
    if _Moved.baseline is None:
        _Moved.baseline = len(gc.get_objects())
        return
    _Moved.since += made
    if _Moved.since > _Moved.baseline // 2:
        gc.collect()
        _Moved.since, _Moved.baseline = 0, len(gc.get_objects())


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
        # Everything the block built joins the oldest generation now, instead of being
        # traversed again by the next young collection and the one after it (20,000
        # nodes: ~0.4 s of 2 s). Skipped where the process froze objects itself: unfreeze
        # would release them.
        if not gc.get_freeze_count():
            _to_oldest()
        gc.enable()
