"""Renames, graph outputs and initializers: ``rename_tensor``, ``rename_node``,
``add_output``, ``remove_output``, ``replace_initializer``, ``scale_initializer``.
Importable from :mod:`onnx_lab.transforms.edit`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from onnx_lab.core._location import user_path
from onnx_lab.core.model import LabModel
from onnx_lab.core.values import (
    constant_producer,
    constant_tensor,
    constant_tensors,
    rename_value,
)
from onnx_lab.errors import InputError, PassError, unknown_name
from onnx_lab.runtime.feeds import npy_load_fix, npy_load_reason
from onnx_lab.transforms._edit_base import _EditPass, _node
from onnx_lab.transforms.base import (
    Match,
    Param,
    Rewrite,
    register_pass,
)
from onnx_lab.transforms.extract import _ir_dtype, types_from_a_run


@register_pass("rename_tensor", kind="edit")
class RenameTensor(_EditPass):
    """Rename a tensor everywhere (edges, inputs, outputs, initializers, If/Loop bodies)."""

    params = (Param("old", str, "", "current name"), Param("new", str, "", "new name"))
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        old, new = self.options["old"], self.options["new"]
        model.index.value(old)  # UnknownNameError with close matches
        if not new:
            raise PassError("rename_tensor needs a non-empty new name.", fix="Pass new='...'.")
        if new in model.index.values and new != old:
            raise PassError(f"Cannot rename {old!r} to {new!r}: a tensor named {new!r} exists.",
                            fix="Pick an unused name.")
        if new == old:
            return []
        return [Match(f"rename_tensor:{old}", "rename_tensor", self.name, [], "",
                      f"rename {old} -> {new}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        # (clones share tensor objects: an initializer gets its own, earlier versions keep
        # their names)
        rename_value(model.index.value(self.options["old"]), self.options["new"])
        rw.modified = True


@register_pass("rename_node", kind="edit")
class RenameNode(_EditPass):
    """Rename a node (its id becomes the new name)."""

    params = (Param("node_id", str, "", "the node"), Param("new", str, "", "new name"))
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        nid, new = self.options["node_id"], self.options["new"]
        node = _node(model, nid)
        if not new:
            raise PassError("rename_node needs a non-empty new name.", fix="Pass new='...'.")
        if new == nid and node.name == new:
            return []
        taken = {e.node.name for e in model.index.entries.values() if e.node is not node}
        if new in taken or (new in model.index.entries and new != nid):
            raise PassError(f"Cannot rename node {nid!r} to {new!r}: a node named {new!r} "
                            "exists.", fix="Pick an unused node name.")
        return [Match(f"rename_node:{nid}", "rename_node", self.name, [nid], nid,
                      f"rename node {nid} -> {new}")]

    no_match_reason = "the node already has this name"

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        node = _node(model, self.options["node_id"])
        node.name = self.options["new"]
        rw.record(node, [node])


def _top_value(model: LabModel, name: str, what: str = "model outputs") -> ir.Value:
    v = model.index.value(name)  # UnknownNameError with close matches
    if model.index.value_graph.get(name, "") != "":
        raise PassError(f"Tensor {name!r} lives inside a subgraph "
                        f"({model.index.value_graph[name]}); only main-graph tensors can be "
                        f"{what}.", fix="Pick a tensor of the main graph.")
    return v


@register_pass("add_output", kind="edit")
class AddOutput(_EditPass):
    """Make an intermediate tensor a graph output (existing outputs stay bit-identical)."""

    params = (Param("tensor", str, "", "the tensor"),)
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        name = self.options["tensor"]
        v = _top_value(model, name)
        if v.is_graph_output():
            return []
        return [Match(f"add_output:{name}", "add_output", self.name, [], "",
                      f"add output {name}")]

    no_match_reason = "the tensor is already a graph output"

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        name = self.options["tensor"]
        v = model.index.value(name)
        info = model.types().get(name)
        if v.type is None and info is not None and info.dtype is not None:
            v.type = ir.TensorType(_ir_dtype(info.dtype))
        if v.shape is None and info is not None and info.shape is not None:
            v.shape = ir.Shape(list(info.shape))
        if v.type is None or (v.shape is None and isinstance(v.type, ir.TensorType)):
            # ONNX infers nothing for some ops (ai.onnx.ml's TreeEnsembleClassifier), and a
            # graph output needs a type and a rank: read them from one run
            self._from_a_run(model, v, rw)
        model.graph.outputs.append(v)
        rw.modified = True

    def _from_a_run(self, model: LabModel, v: ir.Value, rw: Rewrite) -> None:
        from onnx_lab.errors import LabError

        producer = v.producer()
        op = f"{producer.domain + '::' if producer and producer.domain else ''}" \
            f"{producer.op_type if producer else 'its producer'}"
        try:
            found = types_from_a_run(model, [v.name], self.context.dims, self.context.shapes)
        except LabError as e:
            raise PassError(f"Cannot add {v.name!r} as an output: ONNX's inference gives it "
                            f"no {'type' if v.type is None else 'rank'} ({op}), and a run to "
                            f"read it failed: {e.problem}",
                            fix="Give the Lab dims or input shapes the model runs with.") from e
        if v.name not in found:
            raise PassError(f"Cannot add {v.name!r} as an output: ONNX's inference gives it "
                            f"no type ({op}) and a run returns no array for it.",
                            fix="Add a tensor instead.")
        dtype, rank = found[v.name]
        if v.type is None:
            v.type = ir.TensorType(dtype)
        v.shape = ir.Shape([None] * rank)  # its rank; sizes as the run had them vary
        rw.notes.append(f"{v.name!r}: type and rank read from one run ({op} has no ONNX "
                        "type inference)")


@register_pass("remove_output", kind="edit")
class RemoveOutput(_EditPass):
    """Remove a graph output and the nodes only it needed."""

    params = (Param("output", str, "", "the graph output"),)
    verify_preset = "exact"

    def find(self, model: LabModel) -> list[Match]:
        name = self.options["output"]
        outs = [v.name for v in model.graph.outputs]
        if name not in outs:
            raise unknown_name("graph output", name, outs, fix=f"Graph outputs: {outs}.")
        if len(outs) == 1:
            raise PassError(f"Cannot remove {name!r}: it is the only graph output.",
                            fix="Add another output first (add_output).")
        return [Match(f"remove_output:{name}", "remove_output", self.name, [], "",
                      f"remove output {name}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        g = model.graph
        v = next(v for v in g.outputs if v.name == self.options["output"])
        g.outputs.remove(v)
        rw.modified = True
        # the nodes only this output needed: remove dead producers until none is left
        pending = [v]
        while pending:
            val = pending.pop()
            if val.uses() or val.is_graph_output():
                continue
            prod = val.producer()
            if prod is None:
                rw.drop_if_unused(val)
                continue
            if prod.graph is g and all(not o.uses() and not o.is_graph_output()
                                       for o in prod.outputs):
                ins = list(prod.inputs)
                rw.remove(prod)
                pending.extend(i for i in ins if i is not None)


def _load_array(source: Any, name: str) -> np.ndarray:
    if isinstance(source, np.ndarray):
        return source
    if isinstance(source, np.generic):  # np.float32(2.0) for a scalar weight
        return np.asarray(source)
    if isinstance(source, (str, Path)):
        p = user_path(source)
        if not p.is_file():
            what = f"The value {str(p)!r} for initializer {name!r} is a folder, not a file" \
                if p.is_dir() else f"No file {str(p)!r} for initializer {name!r}"
            raise InputError(f"{what}.", fix="Pass the path of a .npy or .npz file.")
        try:
            data = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"Cannot read {str(p)!r} as .npy/.npz: {npy_load_reason(e, p)}.",
                             fix=npy_load_fix(e, "Save the array with numpy.save or "
                                              "numpy.savez.", p)) from e
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                keys = list(data.keys())
                if name in keys:
                    return data[name]
                if len(keys) == 1:
                    return data[keys[0]]
                raise unknown_name(f"array in {p.name}", name, keys,
                                   fix="Name the array after the initializer in the .npz.")
        return data
    raise InputError(f"replace_initializer needs a numpy array or a .npy/.npz path, got "
                     f"{type(source).__name__}.", fix="Pass value=np.array(...) or 'w.npy'.")


def _initializer(model: LabModel, name: str) -> ir.Value:
    """The initializer named ``name``, or the output of the ``Constant`` node holding a tensor
    under that name (``lab.initializers`` lists both: source 'initializer' / 'constant')."""
    for g in model.index.graphs.values():
        if name in g.initializers:
            return g.initializers[name]
    held = {n: nid for n, _, nid, _ in constant_tensors(model)}
    if name in held:
        return next(v for v in _node(model, held[name]).outputs if v.name == name)
    names = [n for g in model.index.graphs.values() for n in g.initializers] + list(held)
    raise unknown_name("initializer", name, names, fix="See lab.initializers.")


def _tensor(v: ir.Value) -> ir.TensorProtocol:
    """The tensor an initializer or its Constant node holds."""
    return v.const_value if v.const_value is not None else constant_tensor(v)


def _set_tensor(v: ir.Value, array: np.ndarray) -> None:
    # a new tensor object: earlier versions share the old one
    if _tensor(v).dtype == ir.DataType.STRING:
        flat = [x if isinstance(x, bytes) else str(x).encode("utf-8")
                for x in np.asarray(array, dtype=object).reshape(-1)]
        t = ir.StringTensor(flat, shape=ir.Shape(array.shape), name=v.name)
    else:
        # np.ascontiguousarray makes a 0-d array 1-d: a scalar weight (every dynamo export
        # has some) kept its rank only through a copy
        t = ir.tensor(np.array(array, order="C", copy=True), name=v.name)
    node = constant_producer(v) if v.const_value is None else None
    if node is not None:  # a Constant node's tensor: a new attribute on this version's node
        # (in place of value_float(s)/value_int(s)...: a Constant holds exactly one)
        for other in [k for k in node.attributes if k != "value"]:
            del node.attributes[other]
        node.attributes["value"] = ir.AttrTensor("value", t)
    else:
        v.const_value = t


@register_pass("replace_initializer", kind="edit")
class ReplaceInitializer(_EditPass):
    """Replace an initializer's values from an array or a .npy/.npz file (same shape, dtype)."""

    params = (Param("initializer", str, "", "the initializer"),
              Param("value", object, None, "numpy array, or path of a .npy / .npz"))
    semantics_preserving = False

    def _array(self, model: LabModel) -> np.ndarray:
        name = self.options["initializer"]
        v = _initializer(model, name)
        arr = _load_array(self.options["value"], name)
        t = _tensor(v)
        want_shape = tuple(int(d) for d in t.shape)
        want_dtype = t.dtype.numpy()
        if tuple(arr.shape) != want_shape:
            raise PassError(f"Replacement for initializer {name!r} has shape "
                            f"{list(arr.shape)}; the initializer has {list(want_shape)}.",
                            fix="Reshape the array to the initializer's shape.")
        if t.dtype == ir.DataType.STRING:  # class labels: str, bytes or object arrays
            if arr.dtype.kind not in "OUS" or (arr.dtype.kind == "O" and not all(
                    isinstance(x, (str, bytes)) for x in arr.reshape(-1))):
                raise PassError(f"Replacement for initializer {name!r} holds {arr.dtype} "
                                "values; the initializer holds strings.",
                                fix="Pass an array of str, e.g. np.array(['cat', 'dog']).")
            return arr
        if arr.dtype != want_dtype:
            raise PassError(f"Replacement for initializer {name!r} is {arr.dtype}; the "
                            f"initializer is {want_dtype}.",
                            fix=f"Convert it first: array.astype('{want_dtype}').")
        return arr

    def find(self, model: LabModel) -> list[Match]:
        self._array(model)
        name = self.options["initializer"]
        return [Match(f"replace_initializer:{name}", "replace_initializer", self.name, [], "",
                      f"replace {name}")]

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        v = _initializer(model, self.options["initializer"])
        _set_tensor(v, self._array(model))
        for u in v.uses():
            rw.record(u.node, [u.node])
        rw.modified = True


@register_pass("scale_initializer", kind="edit")
class ScaleInitializer(_EditPass):
    """Multiply a float initializer by a factor."""

    params = (Param("initializer", str, "", "the initializer"),
              Param("factor", float, 1.0, "the factor"))
    semantics_preserving = False

    def find(self, model: LabModel) -> list[Match]:
        name = self.options["initializer"]
        v = _initializer(model, name)
        dt = _tensor(v).dtype.numpy()
        if not np.issubdtype(dt, np.floating):
            raise PassError(f"Initializer {name!r} is {dt}; only float initializers can be "
                            "scaled.", fix="Use replace_initializer for integer tensors.")
        if not np.isfinite(self.options["factor"]):
            raise PassError(f"factor must be finite, got {self.options['factor']!r}.",
                            fix="Pass e.g. factor=0.5.")
        if self.options["factor"] == 1.0:
            return []
        return [Match(f"scale_initializer:{name}", "scale_initializer", self.name, [], "",
                      f"scale {name} by {self.options['factor']}")]

    no_match_reason = "factor 1.0 changes nothing"

    def rewrite(self, model: LabModel, matches: list[Match], rw: Rewrite) -> None:
        v = _initializer(model, self.options["initializer"])
        arr = _tensor(v).numpy()
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = (arr * self.options["factor"]).astype(arr.dtype)
        if np.isfinite(arr).all() and not np.isfinite(scaled).all():  # 1e300 wrote inf weights
            big = float(np.abs(arr[np.isfinite(arr)]).max()) if arr.size else 0.0
            raise PassError(f"Scaling {self.options['initializer']!r} by "
                            f"{self.options['factor']!r} overflows {arr.dtype} (its largest "
                            f"value {big:.3g} becomes inf).",
                            fix=f"Pass a factor below {float(np.finfo(arr.dtype).max) / max(big, 1e-30):.3g} "
                            "in size.")
        _set_tensor(v, scaled)
        for u in v.uses():
            rw.record(u.node, [u.node])
        rw.modified = True
