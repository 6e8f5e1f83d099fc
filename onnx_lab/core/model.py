"""LabModel: one onnx_ir model plus where it came from, its index and its inferred types."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx
import onnx_ir as ir

from onnx_lab.core._files import external_attributes_read, pin_like
from onnx_lab.core._gc import paused
from onnx_lab.core._validate import remark_unreadable
from onnx_lab.core.derived import with_derived
from onnx_lab.core.shapes import infer_types

if TYPE_CHECKING:
    from onnx_lab.core.index import ModelIndex
    from onnx_lab.core.shapes import TypeTable

__all__ = ["LabModel", "mapped_briefly", "sort_nodes"]


IR_VERSION_META = "onnx_lab.ir_version"  # key in ir.Graph.meta of a LabModel's main graph


class LabModel:
    """An ONNX model held as :class:`onnx_ir.Model`, with a cached index and shape inference.

    Every feature of onnx_lab reads models through this class. A LabModel is treated as
    immutable once indexed: transforms work on :meth:`clone` and build a new LabModel, so
    caches never go stale. Code that must mutate in place calls :meth:`invalidate`.

    Attributes:
        ir: the in-memory model.
        path: the file it was opened from, or None.
    """

    def __init__(self, model: ir.Model, *, path: str | Path | None = None,
                 source: onnx.ModelProto | None = None) -> None:
        self.ir = model
        # A file's path as opened: its folder absolute and real (core._files.opened_path),
        # so the folder its data lies in does not move with the current folder.
        self.path = Path(path) if path is not None else None
        # Values only know their graph; what an initializer listed as a graph input means
        # depends on the IR version (see transforms.base.overridable), so the graph carries it.
        model.graph.meta[IR_VERSION_META] = model.ir_version
        self._index: ModelIndex | None = None
        self._types: dict[tuple, TypeTable] = {}
        self._cache: dict[tuple, Any] = {}
        # The message onnx_lab parsed the model from (a file or bytes; its small tensors
        # are onnx_ir's tensors already, so keeping it costs no memory where the model has
        # any): shape inference copies its nodes (C) instead of serializing each node of
        # the model again (Python, ~15 µs a node). Dropped by invalidate().
        self._source = source

    # -- identity -------------------------------------------------------------------------
    @property
    def base_dir(self) -> Path | None:
        """Folder that relative external data locations are resolved against."""
        return self.path.parent if self.path is not None else None

    @property
    def graph(self) -> ir.Graph:
        return self.ir.graph

    def __repr__(self) -> str:
        src = str(self.path) if self.path else "<memory>"
        return f"LabModel({src}, {self.graph.num_nodes()} main-graph nodes)"

    # -- caches ---------------------------------------------------------------------------
    @property
    def index(self) -> ModelIndex:
        """The model index (stable node ids, producers, consumers, topological order)."""
        if self._index is None:
            # on use: `import onnx_lab` does not load the index
            from onnx_lab.core.index import ModelIndex

            with paused():
                self._index = ModelIndex(self.ir)
        return self._index

    def invalidate(self) -> None:
        """Drop cached index, types and tables after an in-place change of :attr:`ir`."""
        self._index = None
        self._types.clear()
        self._cache.clear()
        self._source = None

    def source_nodes(self) -> Sequence[onnx.NodeProto] | None:
        """The main graph's nodes as read, in stored order (``graph.node`` of the parsed
        message), while they still match the model; None for a model built in memory, a
        user's ModelProto (which its owner may change) and after :meth:`invalidate`."""
        if self._source is None:
            return None
        nodes = self._source.graph.node
        return nodes if len(nodes) == self.graph.num_nodes() else None

    def cached(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` once per ``key`` for this (immutable) model; cleared by invalidate().

        Every cache on a model goes through here (tables, the runtime's weightless graphs,
        the compatibility skeleton...), so :meth:`invalidate` clears them all. Callers treat
        the value as read-only (tables hand out copies).
        """
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def is_cached(self, key: tuple) -> bool:
        """Whether :meth:`cached` holds ``key``."""
        return key in self._cache

    def forget(self, key: tuple) -> None:
        """Drop one cached entry (a large one a caller made for a single use)."""
        self._cache.pop(key, None)

    def adopt_types(self, other: LabModel) -> None:
        """Take the types ``other`` inferred so far: for a structural copy of it (the same
        values under the same names), before anything changes it."""
        for key, types in other._types.items():
            self._types.setdefault(key, types)

    def types(self, dims: Mapping[str, int] | None = None,
              shapes: Mapping[str, Sequence[int]] | None = None, *,
              declared: bool = True) -> TypeTable:
        """dtype and shape of every value, after ONNX shape inference (cached per dims/shapes).

        A :class:`~onnx_lab.core.shapes.TypeTable`: ``types[name]``, and ``types.at(name,
        graph)`` for a name that sibling If branches both define (each with its own type).

        Shape inference never raises here: when it fails, declared types are used. Dims the
        model determines (:mod:`onnx_lab.core.derived`: a head size, a total length) fill in
        those ``dims`` does not give.

        ``declared=False``: only what the inputs and weights fix, without the shapes the file
        declares for intermediates and outputs (value_info may be stale: written at batch 1
        into a model whose input says ``batch``). What a rewrite that bakes a shape in reads.
        """
        dims = with_derived(self, dims)
        key = (tuple(sorted((dims or {}).items())),
               tuple(sorted((k, tuple(v)) for k, v in (shapes or {}).items())))
        if not declared:
            if not self.cached(("declares_shapes",), self._declares_shapes):
                return self.types(dims, shapes)
            key = (*key, "inferred")
        if key not in self._types:
            with paused():
                self._types[key] = infer_types(self, dims=dims, shapes=shapes,
                                               declared=declared)
        return self._types[key]

    def _declares_shapes(self) -> bool:
        """Whether some intermediate or graph output (bodies included) declares a shape
        with a concrete dim that inference might not give: else :meth:`types` without the
        declarations is the same (a model whose inputs are all concrete, that has no bodies
        and no op whose output shape depends on values gets every dim from inference; a
        NonZero declared [1, 6] at static inputs was folded to 6 where it computed 3)."""
        graph = self.ir.graph
        if len(self.index.graphs) == 1 and all(
                v.shape is not None and all(isinstance(d, int) for d in v.shape)
                for v in graph.inputs if v.name not in graph.initializers) and not any(
                e.node.op_type in _VALUE_SHAPED for e in self.index.entries.values()):
            return False
        for g in self.index.graphs.values():
            inputs = set(g.inputs)
            values = [v for n in g for v in n.outputs] + \
                [v for v in g.outputs if v not in inputs]
            for v in values:
                if v.const_value is None and v.shape is not None \
                        and any(isinstance(d, int) for d in v.shape):
                    return True
        return False

    # -- copies and serialization ---------------------------------------------------------
    def clone(self) -> LabModel:
        """A structural copy sharing (immutable) tensor data; the copy keeps :attr:`path`.

        onnx_ir's cloner refuses a graph in which a node reads a value nothing defines (an
        invalid model that onnx_lab still opens, showing the value as ``missing``); such a
        model is copied through serialization instead (weights copied, references kept).
        """
        try:
            copy = self.ir.clone()
        except Exception:  # noqa: BLE001 - the cloner's RuntimeError wraps a ValueError
            copy = _round_trip(self.ir)
        return LabModel(copy, path=self.path)

    def sorted_clone(self) -> LabModel:
        """:meth:`clone`, its graphs storing their nodes in topological order as ONNX requires
        (tools, onnx's checker and onnx_ir's extractor refuse a graph stored out of order,
        which converters write: float16 conversion keeping float inputs and outputs appends
        their Casts at the end). A cyclic graph (invalid) stays as stored."""
        copy = self.clone()
        if not self.index.stored_in_order():
            sort_nodes(copy.ir)
        return copy

    def to_proto(self) -> onnx.ModelProto:
        """Serialize to a ModelProto; external tensors stay references to their files."""
        return ir.to_proto(self.ir)

    def external_tensors(self) -> list[ir.ExternalTensor]:
        """Initializer tensors whose data lives in external files."""
        out = []
        for g in self.ir.graphs():
            for v in g.initializers.values():
                if isinstance(v.const_value, ir.ExternalTensor):
                    out.append(v.const_value)
        return out

    @property
    def has_external_data(self) -> bool:
        """Whether initializers live in external files, or the file this model was opened
        from held Constant values there (read at open)."""
        return bool(self.external_tensors()) or external_attributes_read(self.ir) > 0

    def weights_nbytes(self) -> int:
        """Bytes of all initializer data (without reading external files)."""
        total = 0
        for g in self.ir.graphs():
            for v in g.initializers.values():
                if v.const_value is not None:
                    total += v.const_value.nbytes
        return total


# Ops whose output shape depends on the values of their data input: at concrete input
# shapes inference leaves those dims unknown, and only a declaration, which may be stale,
# fixes them. (A Reshape, Slice or Range computed from shapes is folded by inference; one
# computed from data values is not, and is rare enough to pay no second inference for.)
_VALUE_SHAPED = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress", "TopK",
                           "StringSplit"})


def _round_trip(model: ir.Model) -> ir.Model:
    """A copy of ``model`` through its ModelProto, with the same external data folders and
    the same unreadable tensors."""
    copy = ir.serde.deserialize_model(ir.serde.serialize_model(model))
    folders = {t.base_dir for g in model.graphs() for v in g.initializers.values()
               if isinstance((t := v.const_value), ir.ExternalTensor)}
    if len(folders) == 1:
        ir.external_data.set_base_dir(copy.graph, folders.pop())
    pin_like(copy, model)
    remark_unreadable(copy)
    return copy


@contextlib.contextmanager
def mapped_briefly(tensor: Any) -> Iterator[Any]:
    """Use ``tensor``'s data inside the block; a file map the block opens is closed after it.

    ``onnx_ir.ExternalTensor`` maps its whole data file on first use and keeps the map, and
    every map's touched pages count in the process's memory again: reading many external
    weights one by one (statistics, hashing, inlining shape vectors) would keep them all.
    A map that was open before the block stays open. No view of the data may outlive the
    block.
    """
    unmap = isinstance(tensor, ir.ExternalTensor) and tensor.raw is None
    try:
        yield tensor
    finally:
        if unmap and tensor.raw is not None:
            tensor.release()


def sort_nodes(m: ir.Model) -> None:
    """Sort ``m``'s graphs (bodies too) topologically, in place; a cyclic graph (invalid)
    stays as stored, for whatever reads it next to say what it finds."""
    with contextlib.suppress(ValueError):
        m.graph.sort()
