"""Linked selection: widgets opened on the same Lab share one selected node.

Ticking a slow node in the Profiler, a drifting layer in the DriftDebugger, a match in
FusionLab or a step of the history calls :meth:`Selection.select`; every other widget on that
Lab is told (the Explorer centres the node in its canvas). One :class:`Selection` per Lab,
held weakly, so closing a notebook's Labs frees it.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["Selection", "selection"]


class Selection:
    """The node selected across the widgets of one Lab.

    Attributes:
        node: the last selected node id ('' before any).
        source: the widget that selected it (None when set from code).
    """

    def __init__(self) -> None:
        self.node = ""
        self.source: Any = None
        self._subs: list[tuple[weakref.ref, Callable[[str], Any]]] = []

    def subscribe(self, widget: Any, callback: Callable[[str], Any]) -> None:
        """Call ``callback(node_id)`` when another widget (or code) selects a node."""
        self._subs.append((weakref.ref(widget), callback))

    def select(self, node_id: str, *, source: Any = None) -> None:
        """Select ``node_id`` in every subscribed widget except ``source``."""
        self.node, self.source = node_id, source
        alive = []
        for ref, cb in self._subs:
            w = ref()
            if w is None:
                continue
            alive.append((ref, cb))
            if w is source:
                continue
            try:
                cb(node_id)
            except Exception:  # noqa: BLE001 - one widget must not break the others
                log.exception("linked selection failed in %s", type(w).__name__)
        self._subs = alive


_BUSES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def selection(lab: Any) -> Selection:
    """The shared :class:`Selection` of ``lab`` (created on first use)."""
    try:
        bus = _BUSES.get(lab)
        if bus is None:
            bus = _BUSES[lab] = Selection()
        return bus
    except TypeError:  # not weak-referenceable: a private selection
        return Selection()
