"""Compare an ONNX export with the PyTorch module it came from, module by module.

:func:`compare_torch` runs the ``nn.Module`` with forward hooks (every submodule's output is
recorded) and the ONNX model with every intermediate tensor captured, then matches each
module's output to an ONNX tensor through the source map (:mod:`onnx_lab.core.source_map`):
the tensors that the module's nodes produce and nodes outside it (or the graph) read, the one
of the same shape last in model order. Each pair is judged by the tolerance presets of
:func:`onnx_lab.compare` (intermediates relative to their own scale, model outputs strictly),
and the first module, in the order PyTorch finished them, whose ONNX output diverges while
everything it read agreed, is named: where the export went wrong.

torch is an optional dependency (``pip install torch``), imported only here and
only when called.

Example:
    >>> r = onnx_lab.compare_torch(model, lab, (ids,))
    >>> r.first_divergence["module"], r.modules.query("not passed")
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from onnx_lab import _display
from onnx_lab._pandas import pd
from onnx_lab.core.source import resolve
from onnx_lab.core.source_map import source_map
from onnx_lab.errors import InputError, strict_keywords
from onnx_lab.numerics.metrics import METRIC_COLUMNS, rule_for, tensor_metrics
from onnx_lab.runtime.capture import capture

logger = logging.getLogger(__name__)

__all__ = ["compare_torch", "TorchComparison", "MODULE_COLUMNS"]

#: Columns of :attr:`TorchComparison.modules` (then the metric columns of ``compare``).
MODULE_COLUMNS = ["order", "module", "module_class", "tensor", "node_id", "match"]


@dataclass
class TorchComparison:
    """The result of :func:`compare_torch`.

    Attributes:
        modules: one row per submodule PyTorch ran, in the order its forward finished:
            order, module, module_class, tensor (the matched ONNX tensor, None when
            unmatched), node_id (its producer), match ('shape', 'numel' (reshaped), or why
            none: 'no nodes', 'no tensor of shape [..]', 'not a tensor'), then the metric
            columns of :func:`onnx_lab.compare` (max_abs, cosine, passed...).
        outputs: one row per model output (PyTorch's outputs flattened in order against the
            graph outputs), with the metric columns.
        passed: every model output and every matched module within tolerance.
        first_divergence: None, or {module, module_class, tensor, node_id, max_abs, file,
            line, function, code, message}: the first module (in PyTorch's order) out of
            tolerance whose inputs' modules all agree.
        preset: the tolerance preset (``"by dtype"`` when each tensor's dtype chose).
        notes: what could not be compared and why.
    """

    modules: pd.DataFrame
    outputs: pd.DataFrame
    passed: bool
    first_divergence: dict[str, Any] | None
    preset: str
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        n = int(self.modules.tensor.notna().sum())
        head = f"TorchComparison({'passed' if self.passed else 'FAILED'}, {n} modules matched"
        if self.first_divergence:
            head += f", first divergence at module {self.first_divergence['module']!r}"
        return head + ")"

    def plot(self):
        """The largest error of each matched module, in PyTorch's order (log scale; red:
        out of tolerance, outlined: the first divergence)."""
        return _display.draw(self, "plot")

    def _repr_html_(self) -> str:
        return _display.notebook_html(_display.draw(self, "html"))


def _as_numpy(x: Any) -> np.ndarray | None:
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    return None


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, Mapping):
        return [y for v in x.values() for y in _flatten(v)]
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flatten(v)]
    if hasattr(x, "to_tuple"):  # transformers' ModelOutput
        return _flatten(x.to_tuple())
    return [x]


def _module_tensors(model: Any) -> dict[str, list[str]]:
    """Module path -> the tensors its nodes produce that nodes outside it (or the graph
    outputs) read, in model order."""
    idx = model.index
    smap = source_map(model)
    inside: dict[str, set[str]] = {}
    for nid, s in smap.items():
        if s is None:
            continue
        for q in s.path:
            inside.setdefault(q, set()).add(nid)
    outputs = {v.name for v in model.graph.outputs}
    out: dict[str, list[str]] = {}
    for q, nodes in inside.items():
        names = []
        for nid in sorted(nodes, key=lambda n: idx.entries[n].topo):
            for v in idx.entries[nid].node.outputs:
                readers = idx.consumers.get(v.name, [])
                if v.name in outputs or any(r not in nodes for r in readers):
                    names.append(v.name)
        out[q] = names
    return out


def _calls_merged(tensors_of: dict[str, list[str]], modules: set[str], model: Any
                  ) -> dict[str, list[str]]:
    """``tensors_of`` with TorchScript's names of a module's later calls (``shared_1``,
    ``blocks.0.conv_2``: no module of the nn.Module has that name, the one without the
    suffix does) merged into the module's own tensors, in model order."""
    topo = {v.name: e.topo for e in model.index.entries.values() for v in e.node.outputs
            if v.name}
    out = {k: list(v) for k, v in tensors_of.items()}
    for q in list(out):
        m = re.fullmatch(r"(.+)_(\d+)", q)
        if m is None or q in modules or m.group(1) not in modules:
            continue
        merged = out.get(m.group(1), []) + out.pop(q)
        out[m.group(1)] = sorted(dict.fromkeys(merged), key=lambda t: topo.get(t, -1))
    return out


@strict_keywords  # a misspelt keyword is an InputError with its close matches
def compare_torch(module: Any, lab: Any, inputs: Any, *, preset: str | None = None,
                  atol: float | None = None, rtol: float | None = None,
                  max_bytes: int = 1 << 30) -> TorchComparison:
    """Run ``module`` (PyTorch) and the ONNX model side by side and compare every submodule.

    Args:
        module: the ``torch.nn.Module`` the model was exported from (put in eval mode).
        lab: the exported model (a Lab, a path, anything ``onnx_lab.open`` takes); its nodes
            need source metadata (torch.onnx's dynamo exporter writes it) or name scopes.
        inputs: the positional inputs of ``module.forward`` (a tensor or a tuple of
            tensors/arrays), fed to the ONNX inputs in order.
        preset, atol, rtol: tolerances, as in :func:`onnx_lab.compare`.
        max_bytes: the most captured ONNX tensors held at once.

    Returns:
        A :class:`TorchComparison`.

    Raises:
        InputError: torch is not installed, ``module`` is not an nn.Module, or the inputs do
            not fit the model's inputs.

    Example:
        >>> r = onnx_lab.compare_torch(model, onnx_lab.open("model.onnx"), (x,))
        >>> r.first_divergence
    """
    try:
        import torch
    except ImportError as e:
        raise InputError("compare_torch needs PyTorch.",
                         fix="pip install torch") from e
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"compare_torch needs a torch.nn.Module, got {type(module).__name__}.",
                         fix="Pass the module the model was exported from.")
    lm, _, _ = resolve(lab)
    if isinstance(inputs, Mapping):
        raise InputError("compare_torch takes the positional inputs of module.forward, not "
                         f"a dict ({', '.join(map(str, list(inputs)[:4]))}).",
                         fix="Pass a tuple in the order the model was exported: (ids, mask).")
    if isinstance(inputs, list):
        inputs = tuple(inputs)
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    g = lm.graph
    graph_inputs = [v.name for v in g.inputs if v.name not in g.initializers]
    arrays = [_as_numpy(a) if _as_numpy(a) is not None else np.asarray(a) for a in args]
    if len(arrays) != len(graph_inputs):
        raise InputError(f"{len(arrays)} input(s) given, the model has {len(graph_inputs)}: "
                         f"{', '.join(graph_inputs)}.",
                         fix="Pass the inputs of module.forward in the order they were exported.")
    feeds = dict(zip(graph_inputs, arrays))
    t_args = tuple(a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))
                   for a in args)

    # PyTorch: every submodule's output, in the order the forwards finished; a module
    # called more than once keeps its last call (and that call's place in the order), as the
    # last tensor of its nodes in model order is what it is matched with (the first call
    # against the last was a false alarm; a ReLU reused after a residual Add, ordered at its
    # first call, was named before the Conv whose error it carried).
    names = {m: n for n, m in module.named_modules() if n}
    recorded: dict[str, Any] = {}
    inputs_of: dict[str, Any] = {}
    calls: dict[str, int] = {}
    order: list[str] = []
    notes: list[str] = []

    def hook(mod: Any, inp: Any, out: Any) -> None:
        name = names.get(mod)
        if name is None:
            return
        # a module called again moves to where its last call finished: that call's output
        # is the one compared, so it is judged after the modules that call fed on
        if name in recorded:
            order.remove(name)
        order.append(name)
        recorded[name] = out
        inputs_of[name] = inp[0] if isinstance(inp, tuple) and inp else None
        calls[name] = calls.get(name, 0) + 1

    # The exporters run the module in eval mode (dropout off, BatchNorm's running statistics):
    # a module left in training mode (a freshly built one is) is run so too, then put back.
    training = [m for m in module.modules() if m.training]
    if training:
        notes.append(f"the module was in training mode ({len(training)} submodule(s)): "
                     "run in eval mode, as the export ran it, and put back")
    handles = [m.register_forward_hook(hook) for m in names]
    try:
        module.eval()
        with torch.no_grad():
            result = module(*t_args)
    except Exception as e:  # noqa: BLE001 - the user's forward raises what it raises
        raise InputError(f"The module's forward failed on these inputs: "
                         f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                         fix="Pass inputs module.forward takes (the ones the model was "
                         "exported with, or of the same shapes).") from e
    finally:
        for h in handles:
            h.remove()
        for m in training:
            m.train(True)
    many = [n for n in order if calls[n] > 1]
    if many:
        notes.append(f"{len(many)} module(s) called more than once ({', '.join(many[:3])}"
                     + (", ..." if len(many) > 3 else "") + "): their last call is compared")

    tensors_of = _calls_merged(_module_tensors(lm), set(names.values()), lm)
    types = lm.types(shapes={k: list(v.shape) for k, v in feeds.items()})
    smap = source_map(lm)
    classes = {s.module: s.module_class for s in smap.values() if s is not None}
    outputs = [v.name for v in g.outputs]
    wanted: dict[str, tuple[str, str, str]] = {}  # module -> (tensor, node_id, how)
    how_of: dict[str, str] = {}
    # A module with no nodes of its own that read another module's output may have been
    # folded into it by the exporter (TorchScript folds a BatchNorm into the Conv before it):
    # that module's ONNX tensor then holds this one's output.
    folded_into: dict[str, str] = {}
    for name in order:
        if tensors_of.get(name):
            continue
        src = next((a for a in order if a != name and inputs_of.get(name) is not None
                    and recorded.get(a) is inputs_of[name] and tensors_of.get(a)), None)
        if src is not None and src not in folded_into.values():
            folded_into[name] = src
    reference = dict(recorded)
    for name, src in folded_into.items():
        reference[src] = recorded[name]  # the folded pair's output
    for name in order:
        if name in folded_into:
            how_of[name] = f"folded into {folded_into[name]!r} by the exporter"
            continue
        arr = _flatten(reference[name])
        ref = _as_numpy(arr[0]) if arr else None
        if ref is None:
            how_of[name] = "not a tensor"
            continue
        cands = tensors_of.get(name, [])
        if not cands:
            how_of[name] = "no nodes"
            continue
        shape = tuple(ref.shape)
        same = [t for t in cands if types.get(t) is not None and types[t].shape is not None
                and tuple(types[t].shape) == shape]
        how = "shape"
        if not same:
            same = [t for t in cands if types.get(t) is not None and types[t].numel == ref.size]
            how = "numel"
        if not same:
            how_of[name] = f"no tensor of shape {list(shape)}"
            continue
        t = same[-1]
        if name in folded_into.values():
            how += " (with " + ", ".join(repr(k) for k, v in folded_into.items() if v == name) \
                + ", which the exporter folded in)"
        wanted[name] = (t, lm.index.producer.get(t, ""), how)
        how_of[name] = how

    # ONNX: the matched tensors, captured in bounded chunks.
    values: dict[str, np.ndarray] = {}
    want = list(dict.fromkeys([t for t, _, _ in wanted.values()] + outputs))
    for chunk in capture(lm, feeds, want, max_bytes=max_bytes):
        values.update(chunk)

    def judge(ref: np.ndarray, cand: np.ndarray, output: bool) -> dict[str, Any]:
        _, rule = rule_for(str(ref.dtype), output=output, preset=preset, atol=atol, rtol=rtol)
        return tensor_metrics(ref, cand.reshape(ref.shape) if cand.size == ref.size else cand,
                              rule.atol, rule.rtol, rule=rule)

    rows = []
    for k, name in enumerate(order):
        base = {"order": k, "module": name, "module_class": classes.get(name) or
                type(_module_by_name(module, name)).__module__ + "." +
                type(_module_by_name(module, name)).__qualname__,
                "tensor": None, "node_id": None, "match": how_of.get(name)}
        if name in wanted:
            t, nid, _ = wanted[name]
            ref = _as_numpy(_flatten(reference[name])[0])
            base.update(tensor=t, node_id=nid, **judge(ref, values[t], t in outputs))
        rows.append(base)
    mods = pd.DataFrame(rows, columns=MODULE_COLUMNS + [c for c in METRIC_COLUMNS
                                                         if c not in MODULE_COLUMNS])
    out_rows = []
    flat = [_as_numpy(x) for x in _flatten(result)]
    flat = [x for x in flat if x is not None]
    if len(flat) != len(outputs):
        notes.append(f"PyTorch returned {len(flat)} tensors, the model has {len(outputs)} "
                     "outputs: compared the first of each in order")
    for ref, name in zip(flat, outputs):
        out_rows.append({"tensor": name, **judge(ref, values[name], True)})
    outs = pd.DataFrame(out_rows, columns=["tensor", *METRIC_COLUMNS])
    unmatched = mods.tensor.isna().sum()
    if unmatched:
        notes.append(f"{unmatched} module(s) without a matching ONNX tensor (see 'match')")
    passed = bool(outs.passed.all()) and bool(mods.passed.fillna(True).astype(bool).all())
    div = _first_divergence(lm, mods, wanted)
    return TorchComparison(mods, outs, passed, div, preset or "by dtype", notes)


def _module_by_name(module: Any, name: str) -> Any:
    return module.get_submodule(name)


def _first_divergence(lm: Any, mods: pd.DataFrame, wanted: Mapping[str, tuple[str, str, str]]
                      ) -> dict[str, Any] | None:
    """The first failing module (PyTorch's order) none of whose input modules fail: the
    modules producing the ONNX tensors that its nodes read from outside it."""
    failed = mods.loc[mods.passed.notna() & ~mods.passed.fillna(True).astype(bool)]
    if failed.empty:
        return None
    idx = lm.index
    tensor_module = {t: m for m, (t, _, _) in wanted.items()}
    status = dict(zip(mods.module, mods.passed))
    smap = source_map(lm)
    pick = failed.iloc[0]
    for _, row in failed.iterrows():
        name = row["module"]
        nodes = {nid for nid, s in smap.items() if s is not None and name in s.path}
        feeding = {v.name for nid in nodes for v in idx.entries[nid].node.inputs
                   if v is not None and idx.producer.get(v.name) not in nodes}
        ups = [tensor_module[t] for t in feeding if t in tensor_module]
        if all(status.get(u) is not False for u in ups):
            pick = row
            break
    nid = pick["node_id"]
    s = smap.get(nid)
    part = next((p for p in s.parts if pick["module"] in p.path), s.parts[0]) \
        if s is not None else None
    frame = {"file": part.file, "line": part.line, "function": part.function,
             "code": part.code} if part is not None and part.file else \
        dict.fromkeys(("file", "line", "function", "code"))
    where = f" ({frame['file']}:{frame['line']})" if frame["file"] else ""
    return {"module": pick["module"], "module_class": pick["module_class"],
            "tensor": pick["tensor"], "node_id": nid, "max_abs": pick["max_abs"], **frame,
            "message": f"module {pick['module']!r} ({pick['module_class']}) is the first whose "
                       f"ONNX output {pick['tensor']!r} differs from PyTorch's (max_abs "
                       f"{pick['max_abs']:.3g}) while its inputs agree{where}"}

