"""Lab: the object a user holds — a history of model versions plus every feature as a method.

A façade only: each method calls one function of ``core``, ``analysis``, ``transforms``,
``numerics``, ``profiling``, ``render`` or :mod:`onnx_lab.steps` on the current version. The
lower layers take and return models; this module wraps what they return in Labs
(``open``, ``merge``, ``to_fp16``...).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_lab._display import notebook_html
from onnx_lab._lab_methods import _HISTORY_TABLE, _EditStep, _history_table  # noqa: F401
from onnx_lab._lab_profiling import batch_sweep_predicted, profile, profile_generation_predicted
from onnx_lab._pandas import pd
from onnx_lab.core._location import user_path
from onnx_lab.core.history import History
from onnx_lab.core.model import LabModel
from onnx_lab.core.provenance import origins
from onnx_lab.core.shapes import validate_dims
from onnx_lab.core.source import load_source, resolve
from onnx_lab.core.source_map import carry_sources
from onnx_lab.errors import (
    PassError,
    forwards,
    strict_keywords,
    strict_methods,
)
from onnx_lab.render._html import esc_text

if TYPE_CHECKING:
    import onnx_ir as ir

    from onnx_lab import culprit
    from onnx_lab.analysis.summary import Summary
    from onnx_lab.core.index import ModelIndex

# Each method imports the feature it runs on use: `import onnx_lab` loads the core and what
# draws results, not every feature, nor the steps (see _steps; tests/core/test_light_import.py).

__all__ = ["Lab", "open_lab", "as_lab", "merge", "to_fp16", "to_int8_dynamic", "to_int8_static",
           "repro", "profile"]


# The steps (verification: numerics, runtime) and the culprit search load with their first
# call, not with the façade: `onnx-lab summary` opens a Lab and runs neither (0.3 s of its
# start-up on a loaded two-core machine, python -X importtime).
def _steps():
    from onnx_lab import steps

    return steps


def _culprit():
    from onnx_lab import culprit

    return culprit

@strict_keywords
def open_lab(source: Any, *, dims: Mapping[str, int] | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None, mmap: bool = False,
             base_dir: str | os.PathLike | None = None) -> Lab:
    """Open a model for exploration, optimization and debugging.

    Args:
        source: a path, bytes, an ``onnx.ModelProto``, an ``onnx_ir.Model``, or
            ``"sample:NAME"`` for an embedded sample (``convnet``, ``transformer_block``,
            ``control_flow``). External data is not read now; weights are read on use.
        dims: values for symbolic dims, e.g. ``{"batch": 1}``.
        shapes: full shapes for inputs whose dims are unnamed, ``-1`` or ``?``,
            e.g. ``{"x": [1, 3, 48, 192]}``.
        mmap: map a model file into memory instead of reading it (faster, and the weights
            are not held twice), for scripts and commands: the file must not be rewritten
            by another program while the Lab is in use, or the process crashes on the next
            weight access. ``lab.save`` over the source is safe either way.
        base_dir: for bytes, a ModelProto or an onnx_ir.Model that refer to external data:
            the folder their data files lie in (a path reads them from its own folder).
            Without it such an in-memory model is refused rather than read from the
            current folder.

    Raises:
        ModelLoadError, ExternalDataError, DimError, UnknownNameError.

    Example:
        >>> import onnx_lab
        >>> lab = onnx_lab.open("sample:convnet")
        >>> lab.nodes.op_type.value_counts().head(3)
    """
    return Lab(load_source(source, mmap=mmap, base_dir=base_dir), dims=dims, shapes=shapes)


@strict_keywords
def as_lab(source: Any, *, dims: Mapping[str, int] | None = None,
           shapes: Mapping[str, Sequence[int]] | None = None) -> Lab:
    """``source`` itself when it is a Lab, else :func:`open_lab` of it."""
    if isinstance(source, Lab):
        return source
    return open_lab(source, dims=dims, shapes=shapes)


@strict_keywords
def merge(a: Any, b: Any, io_map: Sequence[tuple[str, str]], *, prefix1: str | None = None,
          prefix2: str | None = None, inputs: Sequence[str] | None = None,
          outputs: Sequence[str] | None = None) -> Lab:
    """A new Lab of two models connected into one; see
    :func:`onnx_lab.transforms.edit.merge_models` for the arguments.

    Example:
        >>> both = onnx_lab.merge("enc.onnx", "dec.onnx", io_map=[("hidden", "hidden")])
    """
    from onnx_lab.transforms.edit import merge_models

    model = merge_models(a, b, io_map, prefix1=prefix1, prefix2=prefix2, inputs=inputs,
                         outputs=outputs)
    # The merged Lab remembers both files: a save never replaces either without asking.
    pa, pb = _source_paths(a), _source_paths(b)
    names = " and ".join(str(p[0]) if p else "an in-memory model" for p in (pa, pb))
    paths = pa + pb
    lab = Lab(History(model, derived_from=f"merge of {names}",
                      source_path=paths[0] if paths else None, protected=paths[1:]))
    # the dim values the two Labs had, where the merged model still names those dims
    given = {k: v for src in (a, b) if isinstance(src, Lab) for k, v in src.dims.items()}
    if given:
        from onnx_lab.core.shapes import fit_dims

        kept, _shapes = fit_dims(model, given, None)
        if kept:
            lab.dims = kept
    return lab


def _source_paths(source: Any) -> list[Path]:
    """The files ``source`` (a Lab, a History, a LabModel, a path) was opened from: its own
    source first, then the files it was derived from."""
    history = source._history if isinstance(source, Lab) else \
        source if isinstance(source, History) else None
    if history is not None:
        first = [history.source_path] if history.source_path is not None else []
        return first + [p for p in history.protected if p not in first]
    if isinstance(source, LabModel):
        return [source.path] if source.path is not None else []
    if isinstance(source, (str, os.PathLike)) and not str(source).startswith("sample:"):
        # as open() read it: '~/m.onnx' is the home folder's (a Path('~/m.onnx') protected
        # ./~/m.onnx, and the converted Lab's save over the source it was made from went on)
        return [user_path(source)]
    return []


@strict_keywords
def repro(comparison: Any, folder: str | Path, divergence: dict[str, Any] | None = None, *,
          overwrite: bool = False):
    """Write a minimal repro of a comparison's first divergence (or ``divergence``) into
    ``folder``: the candidate's node alone, the reference's activations, the expected outputs
    and a script that shows the difference with onnxruntime alone. See
    :func:`onnx_lab.numerics.repro.write_repro`.

    Example:
        >>> c = onnx_lab.compare("model.onnx", "model.opt.onnx")
        >>> onnx_lab.repro(c, "repro/")         # then: python repro/repro.py
    """
    from onnx_lab.numerics.repro import write_repro

    return write_repro(comparison, folder, divergence, overwrite=overwrite)


def _converted(source: Any, model: LabModel, what: str,
               retry: Callable[[list[str]], LabModel] | None = None,
               candidates: Callable[[LabModel], list[str]] | None = None,
               keyword: str = "block_list", note: str = "") -> Lab:
    """A Lab of ``model``, converted from ``source``: same dims/shapes, and it remembers the
    source's file (``save`` never overwrites it without ``overwrite=True``). ``note``: what
    the conversion did first (its ``derived_from`` says it).

    A result that does not load at onnxruntime's default options while ``source`` does is
    refused; with ``retry`` (the conversion redone with node ids kept out) and
    ``candidates`` (the node ids it changes), the refusal names the op type whose nodes, kept
    out, make it load (:mod:`onnx_lab.numerics.load_blockers`), as ``keyword=[...]``."""
    before, dims, shapes = resolve(source)
    if not model.index.stored_in_order():
        # onnxruntime's quantizer appends the nodes it makes for a Loop body's outer reads
        # after the Loop: onnx's checker (and lab.check()) refuses such a graph
        model = model.sorted_clone()
    from onnx_lab.runtime.session import default_load_regression  # onnxruntime: on use

    problem = default_load_regression(model, before)
    if problem is not None:
        # in the caller's process such a model ends it (a dynamic-int8 LSTM aborts
        # onnxruntime 1.32 at load): what profile() or a deployment would do
        raise PassError(f"The {what} of this model cannot be used: {problem}.",
                        fix=_load_fix(before, retry, candidates, keyword))
    # Quantization and conversion tools drop the PyTorch source of the nodes they replace.
    carry_sources(before, model)
    paths = _source_paths(source)
    if not paths and getattr(model, "path", None) is not None:
        paths = [model.path]
    path = paths[0] if paths else None
    name = str(path) if path is not None else "an in-memory model"
    return Lab(History(model, dims=dims, shapes=shapes, derived_from=f"{what} of {name}{note}",
                       source_path=path, protected=paths[1:]))


def _load_fix(before: LabModel, retry: Callable[[list[str]], LabModel] | None,
              candidates: Callable[[LabModel], list[str]] | None, keyword: str) -> str:
    """The fix of a conversion that does not load at default options: the op type to keep
    out, checked, when one is found."""
    generic = (f"Keep some nodes out of it ({keyword}=[...]): the op onnxruntime names, or "
               "the Loop/LSTM/If it aborts on.")
    if retry is None or candidates is None:
        return generic
    from onnx_lab.numerics.load_blockers import load_blocker, op_types_to_try

    cands = candidates(before)  # (HalfRules or the quantizer's registry: once)
    found = load_blocker(retry, before, cands)
    if found is None:
        return generic + (" Keeping out all the nodes of any one of the op types tried did "
                          "not help (tried: " + ", ".join(op_types_to_try(before, cands)) + ").")
    ids = found.node_ids
    shown = repr(ids) if len(ids) <= 4 else f"[{', '.join(map(repr, ids[:3]))}, ...]"
    arg = f"[{found.op_type!r}]" if keyword == "block_list" else shown
    return (f"Keep the {len(ids)} {found.op_type} node(s) out: {keyword}={arg} (checked: "
            "with them kept out the result loads at onnxruntime's default options).")


def _half_candidates(model: LabModel) -> list[str]:
    from onnx_lab.numerics.half import HalfRules

    return list(HalfRules(model).candidates)


def _int8_candidates(model: LabModel) -> list[str]:
    from onnxruntime.quantization.registry import (
        IntegerOpsRegistry,
        QDQRegistry,
        QLinearOpsRegistry,
    )

    ops = set(IntegerOpsRegistry) | set(QDQRegistry) | set(QLinearOpsRegistry)
    return [nid for nid, e in model.index.entries.items() if e.node.op_type in ops]


def _one_or_more(names: Any) -> Any:
    """A name given where a list of names is taken as the list of that name
    (``block_list="Softmax"`` was read letter by letter: "Unknown node id or op type 'S'")."""
    return [names] if isinstance(names, str) else names


@strict_keywords
def to_fp16(source: Any, keep_io_types: bool = True,
            block_list: Sequence[str] | None = None) -> Lab:
    """A float16 copy of a model as a new Lab; see
    :func:`onnx_lab.numerics.quantize.fp16_model`.

    Example:
        >>> half = onnx_lab.to_fp16(onnx_lab.open("sample:transformer_block"),
        ...                         block_list=["Softmax"])
    """
    from onnx_lab.numerics.quantize import fp16_model

    block_list = _one_or_more(block_list)
    return _converted(source, fp16_model(source, keep_io_types, block_list), "fp16 conversion",
                      retry=lambda ids: fp16_model(source, keep_io_types, [*(block_list or ()),
                                                                            *ids]),
                      candidates=_half_candidates)


@strict_keywords
def to_int8_dynamic(source: Any, nodes_to_exclude: Sequence[str] | None = None,
                    reduce_range: bool | None = None) -> Lab:
    """Dynamic int8 quantization as a new Lab; see
    :func:`onnx_lab.numerics.quantize.int8_dynamic_model` (``reduce_range=None``: 7-bit
    weights where this CPU's int8 kernels saturate). Weights that nodes compute from stored
    tensors (a ConstantOfShape, a Transpose of a weight) are folded first, on a copy: the
    quantizer takes stored weights only (``derived_from`` says so).

    Example:
        >>> q = onnx_lab.to_int8_dynamic(onnx_lab.open("sample:transformer_block"))
    """
    from onnx_lab.numerics.quantize import int8_dynamic_model

    src = _steps().weights_stored(source)
    nodes_to_exclude = src.unfolded(_one_or_more(nodes_to_exclude))
    return _converted(source, int8_dynamic_model(src, nodes_to_exclude, reduce_range),
                      "dynamic int8 quantization",
                      retry=lambda ids: int8_dynamic_model(src, [*(nodes_to_exclude or ()), *ids],
                                                           reduce_range),
                      candidates=_int8_candidates, keyword="nodes_to_exclude", note=src.note)


@strict_keywords
def to_int8_static(source: Any, feeds: Any = None, n: int = 8,
                   nodes_to_exclude: Sequence[str] | None = None) -> Lab:
    """Static (QDQ) int8 quantization as a new Lab; see
    :func:`onnx_lab.numerics.quantize.int8_static_model`. Weights that nodes compute from
    stored tensors are folded first, as :func:`to_int8_dynamic` does (the static quantizer
    calibrated them as activations).

    Example:
        >>> q = onnx_lab.to_int8_static(onnx_lab.open("sample:convnet"), n=4)
    """
    from onnx_lab.numerics.quantize import int8_static_model

    src = _steps().weights_stored(source)
    nodes_to_exclude = src.unfolded(_one_or_more(nodes_to_exclude))
    return _converted(source, int8_static_model(src, feeds, n, nodes_to_exclude),
                      "static int8 quantization",
                      retry=lambda ids: int8_static_model(src, feeds, n,
                                                          [*(nodes_to_exclude or ()), *ids]),
                      candidates=_int8_candidates, keyword="nodes_to_exclude", note=src.note)


@strict_methods
class Lab:
    """A model opened with :func:`onnx_lab.open`: a history of versions, the current one shown.

    ``Lab(model, dims=..., shapes=...)`` starts a history at ``model``; ``Lab(history)`` shows
    an existing :class:`~onnx_lab.core.history.History`.
    """

    def __init__(self, model: LabModel | History, *, dims: Mapping[str, int] | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 derived_from: str | None = None) -> None:
        if isinstance(model, History):
            validate_dims(model.model, model.dims, model.shapes)
            self._history = model
        else:
            validate_dims(model, dims, shapes)
            self._history = History(model, dims=dims, shapes=shapes, derived_from=derived_from)

    # ------------------------------------------------------------------ model and index
    @property
    def version_history(self) -> History:
        """The :class:`~onnx_lab.core.history.History` object (its versions, undo/redo,
        to_script) whose table is ``lab.history`` (read-only use: change it through
        apply/undo/redo/checkout)."""
        return self._history

    @property
    def versions(self) -> History:
        """Deprecated name of :attr:`version_history` (the History object; ``lab.history`` is
        its table)."""
        warnings.warn("lab.versions is deprecated: use lab.version_history (the History "
                      "object; lab.history is its table).", DeprecationWarning, stacklevel=2)
        return self._history

    @property
    def model(self) -> LabModel:
        """The current model version (changes with apply/undo/redo/checkout)."""
        return self._history.model

    @property
    def dims(self) -> dict[str, int]:
        """Symbolic dim values of the current version (used for shapes, feeds, cost, profiling)."""
        return self._history.dims

    @dims.setter
    def dims(self, dims: Mapping[str, int]) -> None:
        self._history.dims = dims

    @property
    def shapes(self) -> dict[str, list[int]]:
        """Full input shapes of the current version."""
        return self._history.shapes

    @shapes.setter
    def shapes(self, shapes: Mapping[str, Sequence[int]]) -> None:
        self._history.shapes = shapes

    @property
    def derived_from(self) -> str | None:
        """For a Lab built from another one (e.g. by ``extract``), what it was derived from;
        its ``path`` is then the file of that model (where external weights are read from)."""
        return self._history.derived_from

    @property
    def ir(self) -> ir.Model:
        """The current model as ``onnx_ir.Model`` (treat as read-only; use lab.apply to edit)."""
        return self.model.ir

    @property
    def index(self) -> ModelIndex:
        """The index of the current version: node ids, producers, consumers, topo order."""
        return self.model.index

    @property
    def path(self) -> Path | None:
        """The file the model was opened from (never modified by onnx_lab)."""
        return self._history.path

    # ------------------------------------------------------------------ tables
    @property
    def nodes(self) -> pd.DataFrame:
        """One row per node (all graphs). See :func:`onnx_lab.analysis.tables.nodes_table`."""
        from onnx_lab.analysis.tables import nodes_table

        return nodes_table(self.model)

    @property
    def initializers(self) -> pd.DataFrame:
        """One row per weight (initializers and Constant tensors).

        See :func:`onnx_lab.analysis.tables.initializers_table`."""
        from onnx_lab.analysis.tables import initializers_table

        return initializers_table(self.model)

    @property
    def tensors(self) -> pd.DataFrame:
        """One row per value, with inferred dtype/shape.

        See :func:`onnx_lab.analysis.tables.tensors_table`."""
        from onnx_lab.analysis.tables import tensors_table

        return tensors_table(self.model, self.dims, self.shapes)

    @property
    def inputs(self) -> pd.DataFrame:
        """Graph inputs (initializers excluded): name, dtype, shape, dynamic."""
        from onnx_lab.analysis.tables import io_table

        return io_table(self.model, "inputs", self.dims, self.shapes)

    @property
    def outputs(self) -> pd.DataFrame:
        """Graph outputs: name, dtype, shape, dynamic."""
        from onnx_lab.analysis.tables import io_table

        return io_table(self.model, "outputs", self.dims, self.shapes)

    def summary(self) -> Summary:
        """Versions, sizes, inputs/outputs, dynamic dims, op counts and families.

        Example:
            >>> lab.summary()["num_params"]
        """
        from onnx_lab.analysis.summary import summarize

        return summarize(self.model, self.dims, self.shapes)

    def weight_stats(self, names: str | Iterable[str] | None = None) -> pd.DataFrame:
        """Statistics and an outlier score per weight, read lazily.

        See :func:`onnx_lab.analysis.weights.weight_stats`."""
        from onnx_lab.analysis.weights import weight_stats

        return weight_stats(self.model, names)

    def weight_histogram(self, name: str, bins: int = 100):
        """A matplotlib Figure with the histogram of weight ``name``."""
        from onnx_lab.analysis.weights import weight_histogram

        return weight_histogram(self.model, name, bins=bins)

    # ------------------------------------------------------------------ display
    def _source(self) -> str:
        if self.derived_from:
            return self.derived_from
        return str(self.path) if self.path else "in-memory model"

    def __repr__(self) -> str:
        return (f"<onnx_lab.Lab {self._source()}: {len(self.index)} nodes, "
                f"{self.model.graph.num_nodes()} in the main graph>")

    def _repr_html_(self) -> str:
        src = esc_text(self._source())
        return notebook_html(f"<div><b>onnx_lab.Lab</b> — {src}</div>"
                             + self.summary()._repr_html_())

    # ================================================================== graph views
    def render(self, nodes: Any = None, *, around: Any = None, radius: int = 2,
               direction: str = "both", graph: str = "", collapse: int | str | None = None,
               expand: Any = None, max_nodes: int = 300, show_initializers: bool = False,
               show_shapes: bool = True, overlay: Any = None, overlay_label: str | None = None,
               overlay_log: bool | None = None, highlight: Any = None, timeout: float = 10,
               title: str | None = None):
        """Draw part of the model: nodes, a neighbourhood, collapsed scopes, overlays.

        See :func:`onnx_lab.render.view.render_model` (this passes the Lab's dims/shapes for
        the shapes on edges). Returns a :class:`~onnx_lab.render.view.Rendering`.

        Example:
            >>> lab.render(lab.nodes.query("op_type == 'Conv'"))
            >>> lab.render(collapse="auto", expand="/layer.0")
        """
        from onnx_lab.render.view import render_model

        return render_model(
            self.model, nodes, around=around, radius=radius, direction=direction, graph=graph,
            collapse=collapse, expand=expand, max_nodes=max_nodes,
            show_initializers=show_initializers, show_shapes=show_shapes, overlay=overlay,
            overlay_label=overlay_label, overlay_log=overlay_log, highlight=highlight,
            timeout=timeout, title=title, dims=self.dims or None, shapes=self.shapes or None)

    # ================================================================== versions and passes
    def patterns(self, near_misses: bool = False) -> pd.DataFrame:
        """Optimization opportunities of the current model, one row per match.

        Columns: match_id, pattern, pass, node_ids, anchor, description, saving_nodes,
        saving_bytes. Apply chosen rows with ``lab.apply(pass, matches=[match_id, ...])``.

        ``near_misses=True`` lists instead the candidates that almost matched, with the check
        that failed: onnx_lab's own patterns ("Conv → BatchNormalization: ... is not a
        constant") and the attention / LayerNorm / Erf-Gelu subgraphs left unfused (see
        :func:`onnx_lab.transforms.near_miss.near_misses`; columns kind (pattern / tool),
        source, fusion, anchor, node_ids, reason, description, log). Render one with
        ``lab.render(nodes=row.node_ids)``.
        """
        if near_misses:
            from onnx_lab.transforms.near_miss import near_misses as _near

            return _near(self.model)
        from onnx_lab.transforms.patterns import find_patterns

        return find_patterns(self.model)

    def apply(self, pass_name: str, matches: Sequence[str] | str | None = None,
              verify: bool | Mapping[str, Any] = True, *, find_culprit: bool = False,
              **params: Any):
        """Apply a pass (all matches or the chosen match ids) as a new verified version.

        See :func:`onnx_lab.steps.apply`. ``find_culprit=True`` (tool steps: onnxslim,
        onnxsim, onnxoptimizer, ort:*) also bisects the tool's switches on the verdict and
        sets ``r.culprit`` (see :func:`onnx_lab.culprit.apply`).

        Example:
            >>> r = lab.apply("fuse_conv_bn")
            >>> r.verify_passed, lab.history.tail(1)
        """
        if find_culprit:
            return _culprit().apply(self._history, pass_name, matches, verify, **params)
        return _steps().apply(self._history, pass_name, matches, verify, **params)

    def find_culprit(self, tool: str, verify: bool | Mapping[str, Any] = True,
                     **params: Any) -> culprit.Culprit:
        """The switch of a whole-model tool that makes its step fail verification.

        Bisects over the tool's own switches in at most ⌈log₂P⌉+2 verification runs; the
        history is not changed. See :func:`onnx_lab.culprit.find_culprit`.

        Example:
            >>> c = lab.find_culprit("onnxslim")
            >>> c.culprit, c.fix, c.table()
        """
        return _culprit().find_culprit(self._history, tool, verify=verify, **params)

    @forwards("onnx_lab.numerics.precision:find_precision",
              "onnx_lab.numerics.weight_only:find_weight_only",
              drop=("source", "speed"))
    def find_precision(self, target: str = "fp16", feeds: Any = None,
                       verify: bool | Mapping[str, Any] = True, **kw: Any):
        """The fewest nodes to keep in higher precision so the outputs meet a tolerance; the
        converted model becomes a new verified version.

        Keywords as :func:`onnx_lab.numerics.precision.find_precision` (metric, tolerance,
        atol, rtol, calibration, recheck, max_trials, progress, should_stop, keep: node ids
        always kept). See
        :func:`onnx_lab.steps.find_precision`. ``target="int4"`` (a decoder LLM):
        weight-only MatMulNBits and the MatMuls to keep in 8 bits or float, with the keywords
        of :func:`onnx_lab.numerics.weight_only.find_weight_only` (min_top1, max_kl,
        block_size, accuracy_level, keep, tokens...).

        Example:
            >>> plan = lab.find_precision("fp16", atol=1e-3, rtol=1e-2)
            >>> plan.kept, plan.trials, lab.history.tail(1)
        """
        return _steps().find_precision(self._history, target, feeds, verify, **kw)

    @forwards("onnx_lab.numerics.precision:sensitivity", drop=("source",))
    def sensitivity(self, target: str = "fp16", feeds: Any = None, by: str = "node",
                    **kw: Any) -> pd.DataFrame:
        """Nodes ranked by how much the output error drops when each alone stays in the higher
        precision (:func:`onnx_lab.numerics.precision.sensitivity`).

        Example:
            >>> lab.sensitivity("int8", by="op_type").head()
        """
        from onnx_lab.numerics.precision import sensitivity

        kw.setdefault("dims", self.dims)
        kw.setdefault("shapes", self.shapes)
        return sensitivity(self, target, feeds, by=by, **kw)

    def to_fp16(self, keep_io_types: bool = True,
                block_list: Sequence[str] | None = None) -> Lab:
        """A float16 copy of the current version as a new Lab: a thin alias of the one door,
        :func:`onnx_lab.to_fp16` (``onnx_lab.to_fp16(lab)``, the same call and result).

        Example:
            >>> half = lab.to_fp16(block_list=["Softmax"])
        """
        return to_fp16(self, keep_io_types, block_list)

    def to_int8_dynamic(self, nodes_to_exclude: Sequence[str] | None = None,
                        reduce_range: bool | None = None) -> Lab:
        """Dynamic int8 quantization of the current version as a new Lab: a thin alias of the
        one door, :func:`onnx_lab.to_int8_dynamic` (``onnx_lab.to_int8_dynamic(lab)``)."""
        return to_int8_dynamic(self, nodes_to_exclude, reduce_range)

    def to_int8_static(self, feeds: Any = None, n: int = 8,
                       nodes_to_exclude: Sequence[str] | None = None) -> Lab:
        """Static (QDQ) int8 quantization of the current version as a new Lab: a thin alias of
        the one door, :func:`onnx_lab.to_int8_static` (``onnx_lab.to_int8_static(lab)``)."""
        return to_int8_static(self, feeds, n, nodes_to_exclude)

    def apply_preset(self, preset: str | Sequence[str] = "safe",
                     verify: bool | Mapping[str, Any] = True, *, progress: Any = None,
                     params: Mapping[str, Mapping[str, Any]] | None = None) -> list:
        """Apply every pass of a preset (``"safe"``) as verified steps; returns PassResults
        (``progress``: a callable(done, total, label), one step per pass; ``params``: pass
        name -> its parameters, e.g. ``{"fold_constants": {"max_growth_bytes": 1 << 30}}``)."""
        return _steps().apply_preset(self._history, preset, verify, progress=progress,
                                     params=params)

    @property
    def history(self) -> pd.DataFrame:
        """One row per version: step, pass, params, modified, nodes_before, nodes_after,
        verify_passed, max_abs_err, seconds, current (a DataFrame; ``lab.history.to_script()``
        replays the session, as :meth:`to_script`)."""
        return _history_table(self._history.table(), self.to_script)

    @property
    def results(self) -> list:
        """The PassResult of every step (None for step 0), with verification reports."""
        return [v.result for v in self._history.versions]

    def undo(self) -> None:
        """Go back one version (InputError at step 0)."""
        self._history.undo()

    def redo(self) -> None:
        """Go forward one version after an undo."""
        self._history.redo()

    def checkout(self, step: int) -> None:
        """Show version ``step`` of ``lab.history`` (applying then drops later steps)."""
        self._history.checkout(step)

    @property
    def original(self) -> Lab:
        """A new Lab of step 0 (the model as opened)."""
        v = self._history.original
        return Lab(History(v.model, dims=v.dims, shapes=v.shapes,
                           derived_from=self._history.derived_from,
                           source_path=self._history.source_path,
                           protected=self._history.protected))

    @property
    def origins(self) -> dict[str, list[str]]:
        """For every node of the current version: the node ids of the original it comes from
        (``[]`` when a tool's rewrite could not be traced)."""
        return origins(self.model)

    def save(self, path: str | Path, external_data: bool | str = "auto",
             overwrite: bool = False, check: bool = True) -> Path:
        """Write the current version to ``path``; see :func:`onnx_lab.core.save.save`.

        With ``check`` (default) the written file must load in a fresh onnxruntime session
        from its own folder before it replaces anything, else SaveError naming the file and
        onnxruntime's message (a model onnxruntime cannot load from memory either, such as
        one with ops for another runtime, is saved as it is, unless the original version
        loads: then a step broke it, and SaveError says so). A version made by steps must
        also load where the original does with onnxruntime's default options (graph
        optimizations on, asked in a child process: what a deployment does).
        """
        from onnx_lab.core.save import save
        from onnx_lab.runtime.session import default_load_regression, load_problem

        model, original = self._history.model, self._history.original.model
        # onnxruntime's own offline levels are loaded at that level or lower (its advice, in
        # the step's notes): their versions are not held to the default options
        steps = self._history.versions[1:self._history.version.step + 1]
        offline = any(v.result is not None and v.result.name.startswith("ort:") for v in steps)

        def loads(p: Path) -> str | None:
            problem = load_problem(p, model, original)
            if problem or model is original or offline:
                return problem
            problem = default_load_regression(p, original)
            return problem and problem + self._first_unloadable(steps, original)

        return save(self._history, path, external_data=external_data, overwrite=overwrite,
                    check=loads if check else None)

    @staticmethod
    def _first_unloadable(steps: Sequence[Any], original: LabModel) -> str:
        """The sentence naming the first step whose version does not load at onnxruntime's
        default options (each asked in a child process, on this failure path only): steps
        verified with the optimizations off can each pass while a deployment's session
        refuses the result (``fold_shapes`` made an If's condition a constant, which
        onnxruntime's optimizer then inlined into a Range it rejects)."""
        from onnx_lab.runtime.session import default_load_regression

        for v in steps:
            if v.result is not None and default_load_regression(v.model, original):
                return (f". Step {v.step} ({v.result.name}) is the first version that does not "
                        f"load so: lab.checkout({v.step - 1}) goes back before it (its "
                        "verification ran with the optimizations off; the steps after it can "
                        "be applied again without it)")
        return ""


    # Edits: lab.<edit pass>(...) is lab.apply(<pass>, ...), generated from the registry.
    fix_dims = _EditStep("fix_dims")
    set_input_shape = _EditStep("set_input_shape", legacy={"name": "input"})
    convert_opset = _EditStep("convert_opset")
    set_attribute = _EditStep("set_attribute", legacy={"name": "attribute"})
    remove_node = _EditStep("remove_node")
    rename_tensor = _EditStep("rename_tensor")
    rename_node = _EditStep("rename_node")
    add_output = _EditStep("add_output")
    remove_output = _EditStep("remove_output")
    replace_initializer = _EditStep("replace_initializer", legacy={"name": "initializer"})
    scale_initializer = _EditStep("scale_initializer", legacy={"name": "initializer"})
    add_node = _EditStep("add_node", legacy={"name": "node_name"})

    def extract(self, inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
                nodes: Sequence[str] | None = None, verify: bool | Mapping[str, Any] = True
                ) -> Lab:
        """A new Lab of a subgraph, verified against this model; see
        :func:`onnx_lab.transforms.extract.extract_model` and :func:`onnx_lab.steps.extract`."""
        return Lab(_steps().extract(self._history, inputs=inputs, outputs=outputs, nodes=nodes,
                                 verify=verify))

    def removal_plan(self, node_id: str, mode: str = "reconnect") -> dict[str, Any]:
        """What ``remove_node(node_id, mode=mode)`` would remove, before doing it; see
        :func:`onnx_lab.transforms.edit.removal_plan`."""
        from onnx_lab.transforms.edit import removal_plan

        return removal_plan(self.model, node_id, mode, self.dims)

    def remove_node_cascade(self, node_id: str, verify: bool | Mapping[str, Any] = True):
        """Remove a node and every node after it (see :meth:`removal_plan` first)."""
        return self.apply("remove_node", verify=verify, node_id=node_id, mode="cascade")

    def to_script(self, source: str | None = None) -> str:
        """A Python script replaying the history up to the current step; see
        :meth:`onnx_lab.core.history.History.to_script`."""
        from onnx_lab.transforms.base import pass_names

        return self._history.to_script(source, set(pass_names()))

    @forwards("onnx_lab.widgets.editor:Editor", drop=("lab",))
    def edit(self, **kwargs: Any):
        """The Editor widget on this Lab: the graph canvas and an edit panel.

        Example:
            >>> onnx_lab.open("sample:convnet").edit()
        """
        from onnx_lab.widgets.editor import Editor

        return Editor(self, **kwargs)

    # ================================================================== comparison
    @forwards("onnx_lab.numerics.compare:compare", drop=("reference", "candidate"))
    def compare(self, other: Any = None, **kw: Any):
        """Compare ``other`` (the candidate) against this model, layer by layer; without
        ``other``, compare the current version against the original (``lab.original``).

        Keywords as :func:`onnx_lab.compare` (this Lab's dims/shapes apply).

        Example:
            >>> lab.compare(lab_fp16, atol=1e-2, rtol=1e-2).first_divergence
            >>> lab.apply("fuse_conv_bn"); lab.compare().passed
        """
        from onnx_lab.numerics.compare import compare

        kw.setdefault("dims", self.dims)
        kw.setdefault("shapes", self.shapes)
        if other is None:
            return compare(self._history.original, self, **kw)
        return compare(self, other, **kw)

    def repro(self, comparison: Any, folder: str | Path,
              divergence: dict[str, Any] | None = None, *, overwrite: bool = False):
        """Deprecated: it never used the Lab. Use ``comparison.repro(folder)`` or
        ``onnx_lab.repro(comparison, folder)`` (the same function).

        Example:
            >>> c = lab.compare(candidate)
            >>> c.repro("repro/")
        """
        warnings.warn("lab.repro(comparison, folder) is deprecated: use "
                      "comparison.repro(folder) or onnx_lab.repro(comparison, folder).",
                      DeprecationWarning, stacklevel=2)
        return repro(comparison, folder, divergence, overwrite=overwrite)

    def diff(self, other: Any):
        """Nodes added, removed and changed from this model to ``other``
        (:func:`onnx_lab.diff`)."""
        from onnx_lab.numerics.diff import diff

        return diff(self, other)

    # ================================================================== cost and profiling
    def cost(self, dims: Mapping[str, int] | None = None,
             shapes: Mapping[str, Sequence[int]] | None = None, *,
             branches: Mapping[str, bool] | None = None):
        """FLOPs, MACs, params and bytes per node, totals, peak activation memory, roofline.
        ``branches``: values of the boolean inputs that choose If branches (optimum's
        ``use_cache_branch``); the bodies they do not take run 0 times.

        See :func:`onnx_lab.analysis.cost.cost`. Example:
            >>> lab.cost().total["macs"]
        """
        from onnx_lab.analysis.cost import cost

        return cost(self, dims=dims, shapes=shapes, branches=branches)

    def generation_cost(self, prompt: int, context: int | None = None, *, batch: int = 1):
        """A KV-cache decoder's static cost: a prefill of ``prompt`` tokens and one decode step
        at ``context``, with the KV cache's bytes.

        See :func:`onnx_lab.analysis.cost.generation_cost`. Example:
            >>> lab.generation_cost(prompt=32, context=128).table()
        """
        from onnx_lab.analysis.cost import generation_cost

        return generation_cost(self, prompt, context, batch=batch)

    def kv_cache_bytes(self, context: int, *, batch: int = 1) -> int:
        """Bytes of the decoder's KV cache holding ``context`` tokens (all layers, K and V).

        See :func:`onnx_lab.analysis.cost.kv_cache_bytes`. Example:
            >>> lab.kv_cache_bytes(4096)
        """
        from onnx_lab.analysis.cost import kv_cache_bytes

        return kv_cache_bytes(self, context, batch=batch)

    @forwards("onnx_lab.analysis.compat:check", drop=("model",))
    def check(self, **kw: Any) -> pd.DataFrame:
        """Compatibility findings (severity, code, node_id, message, fix).

        See :func:`onnx_lab.analysis.compat.check`. Example:
            >>> lab.check().query("severity == 'error'")
        """
        from onnx_lab.analysis.compat import check

        return check(self, **kw)

    @forwards("onnx_lab.profiling.run:profile", drop=("model",))
    def profile(self, **kw: Any):
        """Per-operator profile of the current model with onnxruntime; the same as
        ``onnx_lab.profile(lab)`` (:func:`onnx_lab.lab.profile`).

        Example:
            >>> lab.profile(runs=20).ops.head()
        """
        return profile(self, **kw)

    @forwards("onnx_lab.profiling.generate:profile_generation", drop=("model",))
    def profile_generation(self, **kw: Any):
        """Prefill and decode of a decoder LLM timed in a real greedy generation loop (the
        KV cache fed back), with the per-operator share of each phase and the memory (its
        ``predicted_kv_cache_bytes`` from the cost model, :meth:`kv_cache_bytes`).

        See :func:`onnx_lab.profile_generation` (prompt, new_tokens, runs, budget_s...).
        Example:
            >>> g = lab.profile_generation(prompt=32, new_tokens=16)
            >>> g.prefill_ms, g.decode_ms_per_token, g.tokens_per_s
        """
        return profile_generation_predicted(self, **kw)

    @forwards("onnx_lab.profiling.sweep:batch_sweep", drop=("model", "predict"))
    def batch_sweep(self, batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32), **kw: Any):
        """Latency and throughput per batch size, the knee, and the measured process peak
        beside the cost model's predicted activation peak per batch.

        See :func:`onnx_lab.profiling.batch_sweep` (dim, runs, budget_s, providers...).
        Example:
            >>> lab.batch_sweep((1, 2, 4, 8)).table[["batch", "items_per_s",
            ...                                      "predicted_activation_bytes"]]
        """
        return batch_sweep_predicted(self, batch_sizes, **kw)

    @forwards("onnx_lab.backends:compare_backends", drop=("model",))
    def compare_backends(self, backends: Sequence[str] | None = None, **kw: Any):
        """onnxruntime CPU and OpenVINO CPU (CUDA/TensorRT where present) side by side:
        latency with its spread, throughput at the knee, outputs against onnxruntime CPU.

        See :func:`onnx_lab.backends.compare_backends`. Example:
            >>> lab.compare_backends(["cpu", "openvino"], batch_sizes=(1, 2, 4, 8)).table
        """
        from onnx_lab.backends import compare_backends

        return compare_backends(self, backends, **kw)

    # ================================================================== reports
    @forwards("onnx_lab.reporting:report_html", drop=("source",))
    def report(self, path: str | Path, **sections: Any) -> Path:
        """Write one self-contained HTML report of the current version (and its history).

        Keywords as :func:`onnx_lab.reporting.write_report`: profile, against, precision,
        history, tables, title, max_nodes... (this Lab's dims/shapes apply). The file opens
        from disk in any browser with nothing running; a failing section is a note in it.

        Example:
            >>> lab.report("model.html", profile=True, against="model_fp16.onnx")
        """
        from onnx_lab.reporting import write_report

        return write_report(self, path, **sections)

    # ================================================================== widgets
    @forwards("onnx_lab.widgets.explorer:Explorer", drop=("lab",))
    def explore(self, **kwargs: Any):
        """The Explorer widget on this Lab (Summary | Nodes | Initializers | Tensors | Graph).

        Example:
            >>> onnx_lab.open("sample:convnet").explore()
        """
        from onnx_lab.widgets.explorer import Explorer

        return Explorer(self, **kwargs)
